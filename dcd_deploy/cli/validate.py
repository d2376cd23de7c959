"""``dcd-validate MODEL ONNX``: the parity report on its own."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import DCDDeployError, ParityError
from ..checkpoint import resolve_model
from .._limits import MAX_BATCH, MAX_INPUTS, read_onnx_input_size
from ._common import OutputPath, check_outputs, check_parity_budget, model_options, onnxruntime_errors, run_cli
from ._common import write_json_atomic


def _sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter("expected comma-separated positive integers, e.g. 1,2") from None
    if not sizes or min(sizes) < 1 or max(sizes) > MAX_BATCH:
        raise click.BadParameter(f"expected comma-separated positive integers up to {MAX_BATCH}, e.g. 1,2")
    return sizes


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model")
@click.argument("onnx_path", metavar="ONNX", type=click.Path(path_type=Path))
@click.option("--batch-sizes", default="1,2", show_default=True, help=f"Comma-separated batch sizes (1-{MAX_BATCH}).")
@click.option("--inputs", "n_inputs", type=click.IntRange(1, MAX_INPUTS), default=8, show_default=True,
              help="Synthetic inputs per batch size.")
@click.option("--atol", type=float, default=None, help="Absolute tolerance (default 1e-5).")
@click.option("--rtol", type=float, default=None, help="Tolerance relative to the output scale (default 1e-3).")
@click.option("--json", "json_path", type=OutputPath(), default=None,
              help="Also write the report as JSON.")
@model_options
@run_cli
def main(model, onnx_path, batch_sizes, n_inputs, atol, rtol, json_path, arch, trust_checkpoint, seed):
    """Check that ONNX computes what MODEL (checkpoint path or zoo name) computes."""
    from ..parity import check_parity

    if not onnx_path.is_file():
        raise DCDDeployError(f"{onnx_path}: no such ONNX file")
    check_outputs(outputs=[json_path], inputs=[model, onnx_path])
    sizes = _sizes(batch_sizes)
    input_size = _onnx_input_size(onnx_path)
    check_parity_budget(input_size=input_size, batch_sizes=sizes, n_inputs=n_inputs)
    net = resolve_model(model, arch=arch, trust_checkpoint=trust_checkpoint, seed=seed, input_size=input_size)
    with onnxruntime_errors(onnx_path):
        report = check_parity(net, onnx_path, batch_sizes=sizes, n_inputs=n_inputs, atol=atol, rtol=rtol)
    click.echo(report.table())
    click.echo(report.summary())
    if json_path is not None:
        write_json_atomic(json_path, report.to_dict())
    if not report:
        raise ParityError(f"parity check failed: {report.summary()}", report)


def _onnx_input_size(path: Path) -> int:
    """Input side recorded in the file (so a zoo model is pseudo-trained at that size)."""
    return read_onnx_input_size(path)
