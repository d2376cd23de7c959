"""The timed input of a model of several inputs (or of one that is no image), given by the
caller (``dcd-bench latency --inputs FILE``) instead of the synthetic images.

The inputs are kept by name (a dict by ``forward`` argument) or by position (int keys)
until the models are built; then they are put in ``forward``'s order, and the first
``batch`` samples of each are what every runner runs.
"""

from __future__ import annotations

from ..errors import DCDDeployError


def given_inputs(inputs, *, files, profile: bool, batch: int) -> dict:
    """``inputs`` (a tuple or list in ``forward``'s order, or a dict by argument name) as a
    dict (positions as int keys), checked against the run.

    Raises:
        DCDDeployError: ONNX files to time (their inputs are their own), ``profile`` (its
            breakdowns feed one image input), no tensors, or fewer samples than ``batch``.
    """
    import torch

    if files:
        raise DCDDeployError(f"--inputs feeds models built in PyTorch; {files[0]} is timed on its own input shape")
    if profile:
        raise DCDDeployError("--profile breaks down runs on one image input; leave it out with --inputs")
    named = dict(inputs) if isinstance(inputs, dict) else dict(enumerate(inputs))
    if not named or not all(isinstance(t, torch.Tensor) and t.dim() >= 1 for t in named.values()):
        raise DCDDeployError("--inputs: expected one tensor per input, each with the batch on axis 0")
    short = {k: t.shape[0] for k, t in named.items() if t.shape[0] < batch}
    if short:
        k, n = next(iter(short.items()))
        raise DCDDeployError(f"--inputs: input {k} has {n} samples; --batch {batch} times {batch}")
    return {k: t[:batch].contiguous() for k, t in named.items()}


def in_forward_order(inputs: dict, model) -> tuple:
    """The inputs as ``model.forward`` takes them: by name, or by position for int keys."""
    from ..inputs import InputSet

    names = None if all(isinstance(k, int) for k in inputs) else tuple(map(str, inputs))
    return InputSet(tuple(inputs.values()), names, "--inputs").for_model(model)[0]


def inputs_text(inputs: dict) -> str:
    """``rgb 1x3x64x80, depth 1x1x64x80``: each input's name (or position) and shape."""
    return ", ".join(
        f"{'#' + str(k) if isinstance(k, int) else k} {'x'.join(map(str, t.shape))}" for k, t in inputs.items()
    )
