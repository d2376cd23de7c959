"""``dcd-validate MODEL ONNX``: the parity report on its own."""

from __future__ import annotations

import functools
from pathlib import Path

import click

from .._limits import MAX_BATCH, MAX_INPUTS, load_onnx_checked
from .._threads import preparation_threads
from .._version import __version__
from ..errors import DCDDeployError, UnsupportedInputError
from ..runtimes import PARITY_BACKENDS, graph_inputs, read_onnx_input
from ._input_set import refuse_image_options
from ._model_arg import MODEL_HELP, model_inputs, model_options, resolve_model
from ._outputs import OutputPath, check_outputs, write_json_atomic
from ._parity_options import (
    accept_inconclusive_option,
    check_parity_budget,
    inputs_option,
    make_preprocess_from_options,
    parity_failure,
    preprocess_options,
)
from ._run import run_cli


def _sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter("expected comma-separated positive integers, e.g. 1,2") from None
    if not sizes or min(sizes) < 1 or max(sizes) > MAX_BATCH:
        raise click.BadParameter(f"expected comma-separated positive integers up to {MAX_BATCH}, e.g. 1,2")
    return sizes


@click.command(context_settings={"help_option_names": ["-h", "--help"]}, epilog=MODEL_HELP)
@click.version_option(__version__, "--version", prog_name="dcd-validate")
@click.argument("model")
@click.argument("onnx_path", metavar="ONNX", type=click.Path(path_type=Path))
@click.option(
    "--batch-sizes",
    default=None,
    help=f"Comma-separated batch sizes (1-{MAX_BATCH}).  [default: 1,2 (1 for one --inputs sample); a file of fixed batch N: N]",
)
@click.option(
    "--num-inputs",
    "n_inputs",
    type=click.IntRange(1, MAX_INPUTS),
    default=8,
    show_default=True,
    help="Synthetic inputs per batch size (without --inputs).",
)
@inputs_option
@preprocess_options
@click.option("--atol", type=float, default=None, help="Absolute tolerance (default 1e-5).")
@click.option("--rtol", type=float, default=None, help="Tolerance relative to the output scale (default 1e-3).")
@click.option(
    "--backend",
    "backends",
    type=click.Choice(list(PARITY_BACKENDS)),
    multiple=True,
    help="Runtime to check in (repeatable; default onnxruntime). 'openvino': the CPU plugin, "
    "fp32, with the fused-kernel extension loaded for a --mode fused file.",
)
@click.option(
    "--layers",
    "show_layers",
    is_flag=True,
    help="Print the layer-wise table: every layer the file records, checked on its own input "
    "against float64 (the JSON report always has it).",
)
@accept_inconclusive_option
@click.option("--json", "json_path", type=OutputPath(), default=None, help="Also write the report as JSON.")
@model_options
@run_cli
def main(
    model,
    onnx_path,
    batch_sizes,
    n_inputs,
    inputs_path,
    preset,
    mean,
    std,
    scale,
    bgr,
    atol,
    rtol,
    backends,
    show_layers,
    accept_inconclusive,
    json_path,
    arch,
    weights,
    weights_key,
    trust_checkpoint,
    seed,
):
    """Check that ONNX computes what MODEL (a checkpoint, a zoo name or MODULE:FUNCTION) computes."""
    from ..inputs import read_input_set
    from ..parity import check_parity

    if not onnx_path.is_file():
        raise DCDDeployError(f"{onnx_path}: no such ONNX file")
    check_outputs(outputs=[json_path], inputs=[*model_inputs(model, weights), onnx_path, inputs_path])
    sizes = _sizes(batch_sizes) if batch_sizes is not None else None  # a usage error first
    input_set = read_input_set(inputs_path) if inputs_path is not None else None
    if input_set is not None:
        refuse_image_options(inputs_path, preset=preset, mean=mean, std=std, scale=scale, bgr=bgr)
    resolve = functools.partial(
        resolve_model,
        model,
        arch=arch,
        weights=weights,
        weights_key=weights_key,
        trust_checkpoint=trust_checkpoint,
        seed=seed,
    )
    preprocess = functools.partial(make_preprocess_from_options, preset, mean, std, scale, bgr)
    proto = load_onnx_checked(onnx_path)  # read once: a big file takes seconds to parse
    if input_set is not None or not _one_image_input(proto.graph):
        plan = _general_plan(onnx_path, proto, input_set, sizes, n_inputs, resolve, preprocess)
    else:
        plan = _image_plan(onnx_path, proto, inputs_path, sizes, n_inputs, resolve, preprocess)
    described, channels, plan_preprocess = plan.pop("described"), plan.pop("channels"), plan["preprocess"]
    with preparation_threads():
        report = check_parity(
            atol=atol,
            rtol=rtol,
            backends=tuple(dict.fromkeys(backends)) or ("onnxruntime",),
            accept_inconclusive=accept_inconclusive,
            onnx_proto=proto,
            **plan,
        )
    click.echo(report.table())
    if show_layers:
        click.echo(
            report.layer_table()
            if report.layers
            else "(no layer-wise check: the file records no layers)"
            if not report.layer_record
            else "(no layer-wise check: no sample with finite inputs)"
        )
    click.echo(report.summary())
    if json_path is not None:
        write_json_atomic(
            json_path,
            {
                **report.to_dict(),
                "model": model,
                "inputs": None if inputs_path is None else str(inputs_path),
                "inputs_description": described or _builtin(plan_preprocess, channels),
            },
        )
    if not report:
        raise parity_failure(report, file_of_its_own=True)


def _image_plan(onnx_path: Path, proto, inputs_path, sizes, n_inputs: int, resolve, preprocess) -> dict:
    """``check_parity``'s arguments for a file of one image input (N, C, H, W)."""
    from ..inputs import load_images
    from ..parity import default_batch_sizes

    file_input = read_onnx_input(onnx_path, proto)
    input_size = file_input.image_size()  # (H, W): a zoo model is pseudo-trained at that size
    preprocess = _file_preprocess(preprocess(channels=file_input.channels), file_input)
    inputs, described = None, None
    if inputs_path is not None:
        inputs, described = load_images(
            inputs_path, input_size=input_size, preprocess=preprocess, channels=file_input.channels
        )
    # a file exported with --batch N runs batch N only; one image of the user's, batch 1
    sizes = sizes or ((file_input.shape[0],) if file_input.shape[0] is not None else default_batch_sizes(inputs))
    check_parity_budget(input_size=max(input_size), batch_sizes=sizes, n_inputs=n_inputs)
    return {
        "model": resolve(input_size=input_size),
        "onnx_path": onnx_path,
        "batch_sizes": sizes,
        "n_inputs": n_inputs,
        "inputs": inputs,
        "preprocess": preprocess,
        "described": described,
        "channels": file_input.channels,
        **_size_example(proto.graph, input_size, file_input.channels),
    }


def _file_preprocess(preprocess, file_input):
    """``preprocess``, or ``uint8`` for a file that takes uint8 pixels
    (``dcd-export --preprocess uint8``) when the options left the default.

    Raises:
        DCDDeployError: a float preprocessing named for a file of uint8 pixels, or
            ``uint8`` for a float one.
    """
    from ..preprocess import PRESETS

    if (preprocess.dtype == "uint8") == (file_input.dtype == "uint8"):
        return preprocess
    if file_input.dtype == "uint8" and preprocess == PRESETS["imagenet"]:
        return PRESETS["uint8"]
    raise DCDDeployError(
        f"{file_input.path} takes {file_input.dtype} images; --preprocess {preprocess.name} makes "
        f"{preprocess.dtype} ones"
    )


def _general_plan(onnx_path: Path, proto, input_set, sizes, n_inputs: int, resolve, preprocess) -> dict:
    """``check_parity``'s arguments for a file of several inputs, or fed a set of one
    array per input (``--inputs`` .npz or .pt dict): the set's arrays in the file's input
    order, else what :func:`~dcd_deploy.check_parity` makes for each input (the built-in
    images for a 3-channel image input, seeded samples of the file's shape otherwise)."""
    from ..parity import default_batch_sizes

    names, batch, sides, _ = _file_inputs(proto.graph)
    if not names:
        raise UnsupportedInputError(f"{onnx_path} has 0 inputs; a model's file takes at least one")
    given = None if input_set is None else input_set.tensors
    sizes = sizes or ((batch,) if batch is not None else default_batch_sizes(given))
    check_parity_budget(input_size=max(sides, default=1), batch_sizes=sizes, n_inputs=n_inputs)  # before the load
    model = resolve(n_inputs=len(names))
    inputs = None if input_set is None else _set_for_file(input_set, proto, names, model, onnx_path)
    return {
        "model": model,
        "onnx_path": onnx_path,
        "batch_sizes": sizes,
        "n_inputs": n_inputs,
        "inputs": inputs,
        "preprocess": None if input_set is not None else preprocess(),
        "described": None if input_set is None else input_set.describe(),
        "channels": None,
    }


def _set_for_file(input_set, proto, names: list[str], model, onnx_path: Path):
    """An inputs file's arrays as the file takes them: by the file's input names, or, for a
    file recording an input tree (a model of dict arguments), as ``forward`` takes them
    when the arrays are named so (``batch.image``, a nested dict in a ``.pt``); the
    entries its model never reads dropped (a batch's labels)."""
    from .._input_tree import read_tree

    tree = read_tree(proto)
    if tree is None:
        return input_set.arrange(names, what=str(onnx_path))
    fitted = input_set.without(tree.unread)
    if fitted.names is not None and set(fitted.names) != set(names):
        try:
            arranged = fitted.for_model(model)[0]
        except UnsupportedInputError:  # the file's names say it better
            arranged = ()
        if tree.fits(tuple(arranged)):
            return arranged
    return fitted.arrange(names, what=str(onnx_path))


def _builtin(preprocess, channels: int | None) -> str:
    """What the check ran on without ``--inputs`` (``channels`` None: a file of several inputs)."""
    if channels is None:
        return "built-in natural images for 3-channel image inputs, seeded samples for the others"
    if channels == 1 and preprocess.dtype == "uint8":
        return "built-in natural images as grey uint8 pixels"
    if channels != 3:
        return f"seeded samples ({channels}-channel input: the built-in images are RGB)"
    return f"built-in natural images, preprocessed: {preprocess.describe()}"


def _one_image_input(graph) -> bool:
    """The file's ``graph`` takes one 4-D input (an image batch; anything else is fed as a set)."""
    names, _, _, ranks = _file_inputs(graph)
    return len(names) == 1 and ranks[0] == 4


def _file_inputs(graph) -> tuple[list[str], int | None, list[int], list[int]]:
    """(input names, the first input's static batch or None, the static sides of its 4-D
    inputs, each input's rank) of the file's ``graph``."""
    inputs = graph_inputs(graph)
    dims = [i.shape or () for i in inputs]
    batch = dims[0][0] if dims and dims[0] else None
    sides = [d for ds in dims if len(ds) == 4 for d in ds[2:] if d]
    return [i.name for i in inputs], batch, sides, [len(ds) for ds in dims]


def _size_example(graph, size: tuple[int, int], channels: int) -> dict:
    """For a file (its ``graph``) with symbolic height and width (``dcd-export
    --dynamic-size``), the example the check makes its images like: of the size the file's
    metadata records."""
    import torch

    weights = {t.name for t in graph.initializer}
    dims = next(i for i in graph.input if i.name not in weights).type.tensor_type.shape.dim
    if all(d.HasField("dim_value") for d in dims[2:]):
        return {}
    return {"example_inputs": (torch.zeros(1, channels, *size),)}
