"""``dcd-export MODEL``: deploy-form ONNX, parity-checked; the file appears only on success."""

from __future__ import annotations

import time

import click

from .._limits import MAX_BATCH, MAX_INPUT_SIZE
from .._threads import preparation_threads
from .._version import __version__
from ..errors import ParityError
from ._input_set import largest_side, refuse_image_options, shapes_text
from ._input_size import InputSize, api_size, channels_option, format_size
from ._model_arg import MODEL_HELP, model_inputs, model_label, model_options, output_stem, resolve_model
from ._outputs import OutputPath, check_outputs, default_output, write_json_atomic
from ._parity_options import (
    accept_inconclusive_option,
    check_parity_budget,
    inputs_option,
    make_preprocess_from_options,
    parity_failure,
    preprocess_options,
)
from ._run import run_cli


def trace_worker(*args, **kwargs):
    """:func:`dcd_deploy.exporters.onnx.trace_worker`, imported on first use (torch)."""
    from ..exporters.onnx import trace_worker as worker

    return worker(*args, **kwargs)


#: Input side when neither --input-size nor --inputs gives one.
DEFAULT_INPUT_SIZE = 224


def _batch(value: str) -> int | None:
    if value == "dynamic":
        return None
    try:
        batch = int(value)
    except ValueError:
        raise click.BadParameter(f"expected a positive integer or 'dynamic' (a batch of at most {MAX_BATCH})") from None
    if not 1 <= batch <= MAX_BATCH:
        raise click.BadParameter(f"expected a positive integer or 'dynamic' (a batch of at most {MAX_BATCH})")
    return batch


@click.command(context_settings={"help_option_names": ["-h", "--help"]}, epilog=MODEL_HELP)
@click.version_option(__version__, "--version", prog_name="dcd-export")
@click.argument("model")
@click.option(
    "-o",
    "--output",
    type=OutputPath(),
    default=None,
    help="Output .onnx path (default: MODEL's name with .onnx, in the current directory; "
    "never MODEL itself). A symlink is written through to its target.",
)
@click.option(
    "--input-size",
    type=InputSize(1, MAX_INPUT_SIZE),
    default=None,
    help=f"Input size: one side (224) or height x width (256x320), each 1-{MAX_INPUT_SIZE} "
    f"(default: that of --inputs, else {DEFAULT_INPUT_SIZE}).",
)
@channels_option(
    "With other than 3 the export's parity check runs on seeded samples (or --inputs "
    "holding preprocessed floats), not the built-in images; 1 with --preprocess uint8 "
    "(a grey camera's pixels) on the built-in images as grey pixels."
)
@click.option(
    "--dynamic-size",
    is_flag=True,
    help="Dynamic height and width axes in the ONNX file (where every layer allows it; "
    "otherwise an error naming the layer that does not).",
)
@click.option(
    "--batch",
    default="dynamic",
    show_default=True,
    metavar="N|dynamic",
    help=f"Fixed batch size (1-{MAX_BATCH}), or a dynamic batch axis.",
)
@click.option(
    "--opset",
    type=int,
    default=None,
    help="ONNX opset (11 up to the installed onnx's newest; default 18, what torch.onnx writes; below 13 not every op converts).",
)
@click.option(
    "--mode",
    type=click.Choice(["standard", "function", "fused"]),
    default="standard",
    show_default=True,
    help="'function': one dcd_deploy node per DCD layer (model-local functions); 'fused': "
    "channels-last DCDPointwise nodes for the OpenVINO extension (checked in ONNX Runtime "
    "and, when installed, OpenVINO).",
)
@click.option(
    "--strategy",
    type=click.Choice(["auto", "latent", "weight"]),
    default="auto",
    show_default=True,
    help="DCD layer form: latent path, per-sample weight, or per-layer cost model.",
)
@click.option("--no-simplify", is_flag=True, help="Skip onnxsim.")
@click.option("--no-check", is_flag=True, help="Skip the parity check against PyTorch.")
@inputs_option
@preprocess_options
@accept_inconclusive_option
@click.option("--json", "json_path", type=OutputPath(), default=None, help="Also write the export report as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="List the form chosen for every DCD layer.")
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="Print only the 'wrote ...' line (errors still print their one Error: line, without the parity table).",
)
@model_options
@run_cli
def main(
    model,
    output,
    input_size,
    channels,
    dynamic_size,
    batch,
    opset,
    mode,
    strategy,
    no_simplify,
    no_check,
    inputs_path,
    preset,
    mean,
    std,
    scale,
    bgr,
    accept_inconclusive,
    json_path,
    verbose,
    quiet,
    arch,
    weights,
    weights_key,
    trust_checkpoint,
    seed,
):
    """Export MODEL (a checkpoint, a zoo name or MODULE:FUNCTION) to ONNX in deploy form."""
    if quiet and verbose:
        raise click.UsageError("-q/--quiet and -v/--verbose exclude each other")
    batch = _batch(batch)
    if output is None:
        output = default_output(output_stem(model))
    # fail before the slow part, and before anything is written
    check_outputs(outputs=[output, json_path], inputs=[*model_inputs(model, weights), inputs_path])
    input_set, inputs, described, preprocess = _read_inputs(
        inputs_path, input_size=input_size, channels=channels, preprocess=(preset, mean, std, scale, bgr)
    )
    input_size = tuple(inputs.shape[2:]) if inputs is not None else input_size or (DEFAULT_INPUT_SIZE,) * 2
    side = max(input_size) if input_set is None else largest_side(input_set.tensors)
    check_parity_budget(input_size=side, batch_sizes=(batch or 2,), n_inputs=8)
    progress = None if quiet else click.echo  # on stdout with the report: stderr is for the Error line
    started = time.perf_counter()
    with trace_worker() as worker:  # imports the exporter on the second core while the model loads
        n_inputs = 1 if input_set is None else len(input_set.tensors)
        loading = {"arch": arch, "weights": weights, "weights_key": weights_key, "trust_checkpoint": trust_checkpoint}
        net = resolve_model(model, input_size=input_size, n_inputs=n_inputs, seed=seed, **loading)
        inputs, names = _for_model(net, input_set, inputs)
        if progress is not None:
            progress(f"[load] {time.perf_counter() - started:.1f} s")
        result = _export(
            net,
            output,
            quiet=quiet,
            input_size=api_size(input_size),
            batch=batch,
            opset=opset,
            simplify=not no_simplify,
            mode=mode,
            check=not no_check,
            strategy=strategy,
            parity_inputs=inputs,
            progress=progress,
            accept_inconclusive=accept_inconclusive,
            parity_preprocess=preprocess,
            parity_inputs_description=described,
            parallel_check=True,
            trace_worker=worker,
            **_example(dynamic_size, input_size, channels, None if input_set is None else inputs, preprocess),
            input_names=names,
        )
    click.echo(f"wrote {result.path} ({result.size_bytes / 1e6:.1f} MB) in {time.perf_counter() - started:.1f} s")
    flat = _file_inputs(net, input_set, inputs, result)
    _write_json(json_path, result, model=model, inputs_path=inputs_path)
    if not quiet:
        _print_report(
            result,
            label=model_label(model, net),
            params=sum(p.numel() for p in net.parameters()),
            shape=_shape_text(
                result, input_set, flat, channels=channels, size=input_size, batch=batch, dynamic_size=dynamic_size
            ),
            channels=channels
            if input_set is None
            else {n: [batch or 1, *t.shape[1:]] for n, t in zip(result.input_names, flat)},
            strategy=strategy,
            verbose=verbose,
        )


def _for_model(net, input_set, inputs) -> tuple:
    """(the check's inputs as ``net`` takes them, the file's input names or None): an
    inputs file's arrays put in ``forward``'s order, into the dict a ``forward(self,
    batch)`` takes (:meth:`~dcd_deploy.inputs.InputSet.for_model`)."""
    if input_set is None:
        return inputs, None
    return input_set.for_model(net)


def _file_inputs(net, input_set, inputs, result) -> tuple:
    """The tensors the written file takes (of an inputs file's set: the leaves of
    ``inputs`` but those ``forward`` never reads, which the export left out and this
    names)."""
    if input_set is None:
        return inputs
    from .._input_tree import file_leaves

    if result.unread_inputs:
        unread = result.unread_inputs
        click.echo(
            f"  left out {', '.join(unread)}: {type(net).__name__}.forward never reads {'them' if len(unread) > 1 else 'it'}"
        )
    return file_leaves(net, inputs, result.unread_inputs)


def _write_json(json_path, result, *, model: str, inputs_path) -> None:
    """``--json``: the export report, with MODEL and the inputs file as given."""
    if json_path is not None:
        parity_inputs = None if inputs_path is None else str(inputs_path)
        write_json_atomic(json_path, {**result.to_dict(), "model": model, "parity_inputs": parity_inputs})


def _shape_text(result, input_set, inputs, *, channels: int, size: tuple[int, int], batch, dynamic_size: bool) -> str:
    """The report's ``input`` field: ``Nx3x224x224``, or each input of a set."""
    if input_set is not None:
        return shapes_text(inputs, result.input_names, batch, dynamic_size=dynamic_size)
    return f"{'N' if batch is None else batch}x{channels}x{'HxW' if dynamic_size else format_size(size)}"


def _read_inputs(inputs_path, *, input_size, channels: int, preprocess: tuple):
    """(input set, images, their description, the preprocessing) from ``--inputs`` and the
    image options: a set of one array per argument (the image options refused beside it,
    its arrays ordered once the model is built), else one batch of images, else nothing."""
    from ..inputs import load_images, read_input_set

    input_set = read_input_set(inputs_path) if inputs_path is not None else None
    if input_set is not None:
        preset, mean, std, scale, bgr = preprocess
        refuse_image_options(
            inputs_path,
            input_size=input_size,
            channels=channels,
            preset=preset,
            mean=mean,
            std=std,
            scale=scale,
            bgr=bgr,
        )
        return input_set, None, input_set.describe(), None
    preprocess = make_preprocess_from_options(*preprocess, channels=channels)
    if inputs_path is None:
        return None, None, None, preprocess
    images, described = load_images(inputs_path, input_size=input_size, preprocess=preprocess, channels=channels)
    return None, images, described, preprocess


def _export(net, output, *, quiet: bool, **options):
    """:func:`~dcd_deploy.export_onnx` on the preparation threads; a parity failure prints
    its table (unless ``quiet``) and becomes the one-line error."""
    from ..exporters import export_onnx

    try:
        with preparation_threads():  # 3-5 s instead of 25-40 s on a busy 2-core machine
            return export_onnx(net, output, **options)
    except ParityError as exc:
        if exc.report is None:  # the model itself is broken (NaN outputs): nothing to tabulate
            raise
        if not quiet:
            click.echo(exc.report.table(), err=True)
        raise parity_failure(exc.report) from None


def _print_report(
    result, *, label: str, params: int, shape: str, channels: int | dict, strategy: str, verbose: bool
) -> None:
    """The lines under ``wrote ...``: model, graph, DCD forms, fused nodes, parity."""
    ops = ", ".join(f"{k} {v}" for k, v in result.op_histogram.items())
    forms = list(result.strategies.values())
    click.echo(
        f"  model    {label}: {params / 1e6:.2f}M params, input {shape}, opset {result.opset}, "
        f"mode {result.mode}{', simplified' if result.simplified else ''}"
    )
    click.echo(f"  graph    {result.num_nodes} nodes: {ops}")
    if forms:
        click.echo(
            f"  DCD      {len(forms)} layers: {forms.count('weight')} weight form, "
            f"{forms.count('latent')} latent form (strategy {strategy})"
        )
        if verbose:
            for path, form in result.strategies.items():
                click.echo(f"           {path}: {form}")
    if result.mode == "fused":
        click.echo(f"  fused    {result.fused_summary()}")
        for path, reason in result.unfused.items():
            click.echo(f"           {path}: not fused ({reason})")
        if result.fused and (result.batch is None or result.dynamic_size):
            _static_shape_note(result, channels)
    if result.parity is not None:
        click.echo(f"  parity   {result.parity.summary()}")
        runtimes = dict.fromkeys(r.backend for r in result.parity.rows)
        click.echo(
            f"  checked  in {', '.join(runtimes)}"
            + (" (the fused kernels)" if "openvino" in runtimes and result.mode == "fused" else "")
        )
    else:
        click.echo("  parity   not checked (--no-check)")


def _static_shape_note(result, channels: int | dict) -> None:
    """How to compile a fused file with a dynamic axis in OpenVINO without the slow path
    (``channels``: the image's, or every input's static shape by name for a set)."""
    if isinstance(channels, dict):
        shapes = ", ".join(f"{n!r}: {list(s)}" for n, s in channels.items())
        click.echo(
            f"  note     in OpenVINO, reshape to static shapes before compiling (model.reshape({{{shapes}}});"
            " dcd_deploy.openvino.compile_onnx(path, input_shape={...}) does it)"
        )
    else:
        h, w = (result.input_size,) * 2 if isinstance(result.input_size, int) else result.input_size
        click.echo(
            f"  note     in OpenVINO, reshape to a static shape before compiling (model.reshape([{result.batch or 1}, {channels}, {h}, {w}]);"
            " dcd_deploy.openvino.compile_onnx(path, input_shape=...) does it)"
        )
    click.echo(
        "           at a dynamic shape the layout changes around the fused nodes run as reference ops"
        " (MobileNetV2 x1.0: about twice the time, docs/performance.md)"
    )


def _example(
    dynamic_size: bool, size: tuple[int, int], channels: int, inputs: tuple | None = None, preprocess=None
) -> dict:
    """The exporter's ``example_inputs`` when the default (one (1, 3, H, W) float image) is
    not it: a file with symbolic height and width does not say at which size to check it
    (``dynamic_size=True`` is passed only then: the keyword is newer than ``input_size``),
    a model of other than 3 channels takes (1, C, H, W), and one of ``--preprocess uint8``
    (``preprocess``) uint8 pixels. An inputs file of one array per argument (``inputs``,
    in the model's order) gives the first sample of each."""
    pixels = "float32" if preprocess is None else preprocess.dtype
    if inputs is None and not dynamic_size and channels == 3 and pixels == "float32":
        return {}
    import torch
    from torch.utils._pytree import tree_map_only

    image = torch.zeros(1, channels, *size, dtype=getattr(torch, pixels))
    example = {
        "example_inputs": (image,) if inputs is None else tree_map_only(torch.Tensor, lambda t: t[:1], tuple(inputs))
    }
    return {"dynamic_size": True, **example} if dynamic_size else example
