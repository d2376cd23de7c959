"""The timed input of a model of several inputs (or of one that is no image), given by the
caller (``dcd-bench latency --inputs FILE``) instead of the synthetic images.

The inputs are kept by name (a dict by ``forward`` argument or by the file's input name)
or by position (int keys) until the models are built; then they are put in ``forward``'s
order, or an ONNX file's input order (each checked against the file's declared type and
fixed axes), and the first ``batch`` samples of each are what every runner runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import DCDDeployError


def given_inputs(inputs, *, batch: int) -> dict:
    """``inputs`` (a tuple or list in ``forward``'s or the file's order, or a dict by
    argument or input name) as a dict (positions as int keys), checked against the run.

    Raises:
        DCDDeployError: no tensors, or fewer samples than ``batch``.
    """
    import torch

    named = dict(inputs) if isinstance(inputs, dict) else dict(enumerate(inputs))
    if not named or not all(isinstance(t, torch.Tensor) and t.dim() >= 1 for t in named.values()):
        raise DCDDeployError("--inputs: expected one tensor per input, each with the batch on axis 0")
    short = {k: t.shape[0] for k, t in named.items() if t.shape[0] < batch}
    if short:
        k, n = next(iter(short.items()))
        raise DCDDeployError(f"--inputs: input {k} has {n} samples; --batch {batch} times {batch}")
    return {k: t[:batch].contiguous() for k, t in named.items()}


def in_model_order(inputs: dict, models: Sequence) -> tuple:
    """The inputs as the run's models take them: by name, or by position for int keys; in
    ``forward``'s order for PyTorch models (the first), in each ONNX file's (``Path``)
    input order, which every file of the run must share.

    Raises:
        DCDDeployError: names or a count that do not fit, files that take different
            inputs, a tensor of another type, rank or fixed axis than the file's input.
    """
    from ..inputs import InputSet
    from ..runtimes import read_onnx_file

    names = None if all(isinstance(k, int) for k in inputs) else tuple(map(str, inputs))
    given = InputSet(tuple(inputs.values()), names, "--inputs")
    if not isinstance(models[0], Path):
        return given.for_model(models[0])[0]
    files = [read_onnx_file(m) for m in models]
    wanted = [i.name for i in files[0].inputs]
    other = next((f for f in files[1:] if [i.name for i in f.inputs] != wanted), None)
    if other is not None:
        theirs = ", ".join(i.name for i in other.inputs)
        raise DCDDeployError(f"{files[0].path} takes {', '.join(wanted)} and {other.path} {theirs}; a pair takes one")
    tensors = given.arrange(wanted, what=files[0].path)
    for file in files:
        for spec, tensor in zip(file.inputs, tensors):
            _check_fits(spec, tensor, file.path)
    return tensors


def flat_run(x, built: dict) -> tuple:
    """``(x, built, unread)`` for a run whose models take dicts (``x`` holds one, as
    :func:`in_model_order` gives it for a ``forward(self, batch)``): the tensors in tree
    order, each PyTorch model as its flat view (:mod:`dcd_deploy._input_tree`), which the
    torch backends time as ``model(*tensors)`` (the dict rebuilt inside: a few dict
    insertions) and the exporter writes a file of those inputs from, and the key paths of
    the entries ``forward`` never reads, left out; else ``(x, built, ())``."""
    from torch import nn

    from .._input_tree import example_tree, flat_view

    modules = [m for m in built.values() if isinstance(m, nn.Module)]
    # entries the model never reads (a batch's labels) are left out, as dcd-export leaves them
    tree = None if x is None or not modules else example_tree(modules[0], tuple(x))
    if tree is None:
        return x, built, ()
    views = {name: flat_view(m, tree) if isinstance(m, nn.Module) else m for name, m in built.items()}
    return tree.flatten(tuple(x)), views, tree.unread


def _check_fits(spec, tensor, path: str) -> None:
    """Refuse ``tensor`` for the file's input ``spec`` (a :class:`~dcd_deploy.runtimes.GraphInput`)
    when its element type, rank or a fixed axis differs: the runtimes would stop at the
    first run with their own words."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    shape = "x".join(map(str, tensor.shape))
    if dtype != spec.dtype:
        raise DCDDeployError(f"--inputs: {spec.name} is {dtype} {shape}; {path} takes {spec.dtype}")
    if spec.shape is None:
        return
    wants = "x".join("?" if d is None else str(d) for d in spec.shape)
    if len(spec.shape) != tensor.dim() or any(d not in (None, n) for d, n in zip(spec.shape, tensor.shape)):
        raise DCDDeployError(f"--inputs: {spec.name} is {shape} (the first --batch samples); {path} takes {wants}")


def inputs_text(inputs: dict) -> str:
    """``rgb 1x3x64x80, depth 1x1x64x80``: each input's name (or position) and shape."""
    return ", ".join(
        f"{'#' + str(k) if isinstance(k, int) else k} {'x'.join(map(str, t.shape))}" for k, t in inputs.items()
    )
