"""``dcd-bench``: our models beside the paper's figures.

Without a mode flag: the latency benchmark (:func:`dcd_deploy.bench.latency.run_benchmark`):
static vs DCD MobileNetV2 x0.5 and x1.0, one thread, batch 1, 224x224, in three steps: the
paper's conditions (``torch-paper``: eager PyTorch, deploy form, oneDNN off) beside the
paper's times, today's eager PyTorch (``torch-deploy``) and ONNX Runtime; progress lines
go to stderr, the table to stdout; ``--json/--markdown/--plot`` write files (``--json -``:
the JSON alone on stdout), ``--profile`` adds per-part breakdowns. Everything is measured
by the library; this module only parses options and prints.

``dcd-bench --frontier`` times every model of the paper's Table 4 on one backend and marks
each family's accuracy-latency frontier with the paper's top-1 (:mod:`dcd_deploy.bench.frontier`).

``dcd-bench --floor`` times each DCD model's dynamic branch alone (and with ``W(x)``
formed) beside the static model and the full export (:mod:`dcd_deploy.bench.floor`).

``dcd-bench --complexity`` counts the parameters and MAdds of every model in Tables 1-4
(:func:`dcd_deploy.bench.complexity.compare_with_paper`) and prints them beside the
paper's cells; ``--json PATH`` also writes one record per paper row.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..bench.complexity import (
    DEFAULT_INPUT_SIZE, MILLION, STATUS_MISS, TOLERANCE_PCT, PaperCheck, compare_with_paper,
)
from ..bench.paper import PARAMS_EXCL_CLASSIFIER
from .._version import __version__
from ..errors import DCDDeployError
from .._limits import MAX_BATCH, MAX_INPUT_SIZE, MAX_SEED, MAX_THREADS, check_memory
from ._outputs import OutputPath, check_outputs, write_json_atomic
from ._run import run_cli
from ._input_size import InputSize, api_size, format_size
from ._model_arg import model_inputs

#: Smallest input side every zoo model can take (five stride-2 stages).
MIN_INPUT_SIZE = 32
#: Input side the paper's figures are for.
PAPER_INPUT_SIZE = 224

# Table layout; legend: (header, width, alignment) of each column of the complexity table.
_COLUMNS = (
    ("tbl", 3, "<"), ("row", 17, "<"), ("model", 24, "<"), ("conv.", 5, "<"),
    ("P paper", 7, ">"), ("P ours", 7, ">"), ("dev", 6, ">"),
    ("M paper", 7, ">"), ("M ours", 8, ">"), ("form", 4, "<"), ("dev", 6, ">"),
    ("latent", 8, ">"), ("weight", 8, ">"), ("pool", 5, ">"), ("tol", 4, ">"), ("status", 10, "<"),
)
_CONVENTION_ABBREV = {PARAMS_EXCL_CLASSIFIER: "-cls"}


# Options each mode takes (besides --input-size and --json, which all take).
_MODE_OPTIONS = {
    "the latency benchmark": ("models", "baseline", "backends", "batch", "threads", "runs", "min_time", "warmup",
                              "quick", "profile", "profile_runs", "markdown_path", "plot_path", "seed",
                              "trust_checkpoint"),
    "--floor": ("models", "threads", "runs", "min_time", "warmup", "quick", "seed", "trust_checkpoint"),
    "--frontier": ("models", "backends", "threads", "runs", "min_time", "warmup", "quick", "markdown_path",
                   "plot_path", "seed"),
    "--complexity": (),
}
_ALL_OPTIONS = tuple(dict.fromkeys(k for opts in _MODE_OPTIONS.values() for k in opts))


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise click.BadParameter("expected a comma-separated list")
    return items


def _backends(ctx, param, value):
    items = _csv(value)
    if items is None:
        return None
    from ..bench.latency import BACKENDS

    bad = [b for b in items if b not in BACKENDS]
    if bad:
        raise click.BadParameter(f"unknown backend {', '.join(bad)}; choose from {', '.join(BACKENDS)}")
    return items


def _out_path(dash: bool = False):
    return OutputPath(allow_dash=dash)


def _list_models(ctx, param, value):
    if value and not ctx.resilient_parsing:
        for line in format_model_list():
            click.echo(line)
        ctx.exit()


def format_model_list() -> list[str]:
    """Every zoo name with its parameter count (all parameters, 1000 classes), as lines."""
    import torch

    from ..models import create_model, list_models

    lines = [f"{'model':<26} {'params M':>8}", "-" * 35]
    for name in list_models():
        with torch.device("meta"):  # shapes only: the CondConv ResNet-50 alone would take 0.7 GB
            model = create_model(name)
        lines.append(f"{name:<26} {sum(p.numel() for p in model.parameters()) / MILLION:>8.2f}")
    return lines + ["", "X: static; X_dcd: DCD (the authors' release layers); X_dyconv: DY-Conv (K = 4);",
                    "X_condconv: CondConv (K = 8). Params count every parameter, classifier included."]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="dcd-bench")
@click.option("--list-models", is_flag=True, is_eager=True, expose_value=False, callback=_list_models,
              help="Print the model zoo with parameter counts and exit.")
@click.option("--complexity", is_flag=True,
              help="Count params and MAdds of every model in the paper's Tables 1-4 and "
                   "compare them with the paper's cells (instead of timing).")
@click.option("--frontier", is_flag=True,
              help="Time every model of the paper's Table 4 on one backend (default onnxruntime) and "
                   "print it beside the paper's top-1, marking each family's accuracy-latency frontier.")
@click.option("--models", default=None, metavar="A,B,...",
              help="Zoo names, checkpoint paths, MODULE:FUNCTION (your model: a Python file or module and "
                   "the function returning it; this runs that code) or ONNX files; X and X_dcd are paired "
                   "as static vs DCD (a checkpoint by the architecture it holds), your model with "
                   "dcd_deploy.to_static() of it, a file with --baseline. [default: mobilenetv2_050,"
                   "mobilenetv2_050_dcd,mobilenetv2_100,mobilenetv2_100_dcd; --frontier: all of Table 4]")
@click.option("--baseline", default=None, metavar="MODEL",
              help="The static partner of the one model in --models, of the same kind (an ONNX file for a "
                   "file: dcd-bench --models net.onnx --baseline net_static.onnx), instead of its zoo "
                   "partner or to_static() of it.")
@click.option("--backends", default=None, callback=_backends, metavar="B,...",
              help="Some of torch-paper, torch, torch-deploy, onnxruntime, openvino, openvino-fused (the "
                   "last two if openvino is installed; openvino-fused builds the extension). "
                   "[default: torch-paper,torch-deploy,onnxruntime,openvino,openvino-fused (torch-paper with "
                   "--threads 1 only, OpenVINO if installed); "
                   "--frontier: one backend, onnxruntime]")
@click.option("--threads", type=click.IntRange(1, MAX_THREADS), default=1, show_default=True,
              help="Threads of every backend (torch intra/inter-op, ORT intra = inter).")
@click.option("--batch", type=click.IntRange(1, MAX_BATCH), default=1, show_default=True, help="Images per run.")
@click.option("--input-size", type=InputSize(MIN_INPUT_SIZE, MAX_INPUT_SIZE), default=str(DEFAULT_INPUT_SIZE),
              show_default=True, help=f"Input side (224) or height x width (256x320), each {MIN_INPUT_SIZE}-"
                                      f"{MAX_INPUT_SIZE}; the paper's figures are for 224 (an ONNX file's fixed "
                                      "axes win). Not square: the latency benchmark only.")
@click.option("--runs", type=click.IntRange(min=1), default=None,
              help="Minimum timed runs per model and backend. [default: 50, --frontier 20; --quick 5]")
@click.option("--min-time", type=click.FloatRange(min=0.0), default=None, metavar="SECONDS",
              help="Minimum timed seconds per model and backend. [default: 5, --frontier 2; --quick 0]")
@click.option("--warmup", type=click.IntRange(min=0), default=None,
              help="Warm-up runs dropped per model and backend, after the first run. [default: 5, "
                   "--frontier 2; --quick 1]")
@click.option("--quick", is_flag=True, help="A few runs only: a smoke test, not a measurement.")
@click.option("--floor", is_flag=True,
              help="Time, for each DCD model in --models, its dynamic branch alone and with W(x) "
                   "formed (W0 applied statically) beside the static model and the full export: "
                   "the latency floor of the model on this machine (ONNX Runtime).")
@click.option("--profile", is_flag=True,
              help="Also break each model's time down by part: ONNX Runtime's per-node profile, and "
                   "PyTorch's per-op profile under the paper's conditions.")
@click.option("--profile-runs", type=click.IntRange(min=1), default=None,
              help="Profiled runs per model. [default: 50; --quick 3]")
@click.option("--json", "json_path", type=_out_path(dash=True), default=None, metavar="PATH",
              help="Also write the results as JSON to PATH (atomically; a symlink is written through to its "
                   "target); '-': the JSON alone on stdout (the table goes to stderr).")
@click.option("--markdown", "markdown_path", type=_out_path(), default=None, metavar="PATH",
              help="Also write the report as Markdown to PATH (latency and --frontier).")
@click.option("--plot", "plot_path", type=_out_path(), default=None, metavar="PATH.png",
              help="Also draw the results to PATH (latency and --frontier; needs matplotlib).")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
              help="Pseudo-training seed of zoo models and the input's seed.")
@click.option("--trust-checkpoint", is_flag=True,
              help="Allow checkpoints that need full unpickling (runs code from the file).")
@run_cli
def main(complexity: bool, floor: bool, frontier: bool, json_path: Path | None, input_size: int,
         **options) -> None:
    """Benchmark the model zoo against the paper (ICLR 2021): latency, --frontier, --floor or --complexity."""
    modes = [name for name, on in (("--complexity", complexity), ("--floor", floor), ("--frontier", frontier)) if on]
    if len(modes) > 1:
        raise click.UsageError(f"{' and '.join(modes)} are separate runs")
    mode = modes[0] if modes else "the latency benchmark"
    _reject_given(mode)
    if modes and input_size[0] != input_size[1]:
        raise click.UsageError(f"{mode} takes a square --input-size, not {format_size(input_size)}")
    input_size = api_size(input_size)
    echo = _Echo(to_stderr=json_path is not None and str(json_path) == "-")
    taken = {k: options[k] for k in _MODE_OPTIONS[mode]}
    if complexity:
        run_complexity(json_path=json_path, input_size=input_size, echo=echo)
    elif floor:
        run_floor_cli(json_path=json_path, input_size=input_size, echo=echo, **taken)
    elif frontier:
        run_frontier_cli(json_path=json_path, input_size=input_size, echo=echo, **taken)
    else:
        run_latency(json_path=json_path, input_size=input_size, echo=echo, **taken)


def _flag(key: str) -> str:
    return f"--{key.replace('_path', '').replace('_', '-')}"


def _reject_given(mode: str) -> None:
    """A usage error for options given on the command line that ``mode`` does not take,
    saying which modes take them."""
    ctx = click.get_current_context()
    given = [k for k in _ALL_OPTIONS if k not in _MODE_OPTIONS[mode]
             and ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE]
    if given:
        parts = []
        for k in given:
            takers = [m for m, opts in _MODE_OPTIONS.items() if k in opts]
            parts.append(f"{_flag(k)} (it applies to {' and '.join(takers)})")
        raise click.UsageError(f"{mode} does not take {', '.join(parts)}")


class _Echo:
    """Where the report goes: stdout, or stderr when ``--json -`` claims stdout for the JSON."""

    def __init__(self, *, to_stderr: bool):
        self.to_stderr = to_stderr

    def __call__(self, line: str = "") -> None:
        click.echo(line, err=self.to_stderr)

    def progress(self, line: str) -> None:
        click.echo(line, err=True)


def _write_json(path: Path, data) -> str | None:
    """Write ``data`` to ``path``, or to stdout alone for ``-``; the name written, for the report."""
    if str(path) == "-":
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return None
    write_json_atomic(path, data)
    return str(path)


def _check_out_dir(*paths: Path | None, models: str | None = None) -> None:
    """Refuse unwritable outputs, and outputs that are a --models file or each other ('-' is stdout)."""
    files = [p for p in paths if p is not None and str(p) != "-"]
    for path in files:
        if not path.resolve().parent.is_dir():
            raise DCDDeployError(f"cannot write {path}: no directory {path.parent}")
    check_outputs(outputs=files, inputs=[f for spec in _csv(models) or () for f in model_inputs(spec)])


def _write_outputs(echo: _Echo, json_path: Path | None, document: dict, files) -> None:
    """Write the JSON document and each ``(path, render -> bytes)`` asked for, then say what was written."""
    from ..bench.report import write_bytes_atomic

    written = [] if json_path is None else [_write_json(json_path, document)]
    for path, render in files:
        if path is not None:
            write_bytes_atomic(path, render())
            written.append(str(path))
    _wrote(echo, written)


def _wrote(echo: _Echo, written: list[str | None]) -> None:
    names = [w for w in written if w]
    if names:
        echo(f"\nwrote {', '.join(names)}")


def run_floor_cli(*, json_path: Path | None, input_size: int, echo: _Echo, models: str | None, threads: int,
                  runs: int | None, min_time: float | None, warmup: int | None, quick: bool, seed: int,
                  trust_checkpoint: bool) -> None:
    """Run :func:`~dcd_deploy.bench.floor.run_floor` and print its table."""
    import tempfile

    from ..bench import floor

    _check_out_dir(json_path, models=models)
    check_memory(input_size=input_size, batch=1, what="the floor benchmark")
    with tempfile.TemporaryDirectory(prefix="dcd-floor-") as tmp:
        result = floor.run_floor(
            _csv(models) or floor.DEFAULT_FLOOR_MODELS, threads=threads, input_size=input_size, quick=quick,
            runs=runs, min_time=min_time, warmup=warmup, seed=seed, trust_checkpoint=trust_checkpoint,
            workdir=Path(tmp), progress=echo.progress)
    echo("")
    for line in floor.format_floor_table(result):
        echo(line)
    if json_path is not None:
        _wrote(echo, [_write_json(json_path, result.to_dict())])


def run_complexity(*, json_path: Path | None, input_size: int, echo: _Echo | None = None) -> None:
    """Count, print the table with its legend, and write JSON if asked."""
    from ..bench.complexity import complexity_document

    echo = echo or _Echo(to_stderr=False)
    _check_out_dir(json_path)
    checks = compare_with_paper(input_size=input_size, progress=echo.progress)
    if input_size != PAPER_INPUT_SIZE:
        echo(f"note: counted at {input_size}x{input_size}; the paper's figures are for "
             f"{PAPER_INPUT_SIZE}x{PAPER_INPUT_SIZE}, so deviations are not meaningful\n")
    for line in format_complexity_table(checks):
        echo(line)
    if json_path is not None:
        name = _write_json(json_path, complexity_document(checks, input_size=input_size))
        if name:
            echo(f"\nwrote {len(checks)} records to {name}")


def run_latency(*, json_path: Path | None, input_size: int, echo: _Echo | None = None, models: str | None = None,
                backends: list[str] | None = None, threads: int = 1, batch: int = 1, runs: int | None = None,
                min_time: float | None = None, warmup: int | None = None, quick: bool = False,
                profile: bool = False, profile_runs: int | None = None, markdown_path: Path | None = None,
                plot_path: Path | None = None, seed: int = 0, trust_checkpoint: bool = False,
                baseline: str | None = None) -> None:
    """Run :func:`~dcd_deploy.bench.latency.run_benchmark`, print its tables, write the files asked for."""
    from ..bench import latency, plot, report

    echo = echo or _Echo(to_stderr=False)
    _check_out_dir(json_path, markdown_path, plot_path, models=",".join(filter(None, [models, baseline])) or None)
    hw = (input_size, input_size) if isinstance(input_size, int) else tuple(input_size)
    check_memory(input_size=max(hw), batch=batch, what="the benchmark")
    if plot_path is not None:
        plot.require_matplotlib()  # fail before minutes of timing, not after
    if hw != (PAPER_INPUT_SIZE, PAPER_INPUT_SIZE):
        echo.progress(f"note: input {format_size(hw)}; the paper's times are for "
                      f"{PAPER_INPUT_SIZE}x{PAPER_INPUT_SIZE}")
    result = latency.run_benchmark(
        _csv(models) or latency.DEFAULT_MODELS, backends=backends, threads=threads, batch=batch,
        input_size=input_size, runs=runs, min_time=min_time, warmup=warmup, quick=quick, profile=profile,
        profile_runs=profile_runs, seed=seed, trust_checkpoint=trust_checkpoint, progress=echo.progress,
        baseline=baseline)
    echo("")
    for line in report.format_table(result):
        echo(line)
    if result.profiles:
        echo("")
        for line in report.format_profile_table(result):
            echo(line)
    _write_outputs(echo, json_path, result.to_dict(), [
        (markdown_path, lambda: report.to_markdown(result).encode("utf-8")),
        (plot_path, lambda: plot.render_latency_plot(result))])


def run_frontier_cli(*, json_path: Path | None, input_size: int, echo: _Echo, models: str | None,
                     backends: list[str] | None, threads: int, runs: int | None, min_time: float | None,
                     warmup: int | None, quick: bool, markdown_path: Path | None, plot_path: Path | None,
                     seed: int) -> None:
    """Run :func:`~dcd_deploy.bench.frontier.run_frontier`, print its table, write the files asked for."""
    from ..bench import frontier, frontier_report, plot

    _check_out_dir(json_path, markdown_path, plot_path, models=models)
    if backends is not None and len(backends) != 1:
        raise click.UsageError(f"--frontier times one backend, not {len(backends)}: e.g. --backends onnxruntime")
    if plot_path is not None:
        plot.require_matplotlib()  # fail before minutes of timing, not after
    result = frontier.run_frontier(
        models=_csv(models), backend=backends[0] if backends else frontier.DEFAULT_BACKEND, threads=threads,
        input_size=input_size, quick=quick, runs=runs, min_time=min_time, warmup=warmup, seed=seed,
        progress=echo.progress)
    echo("")
    for line in frontier_report.format_frontier_table(result):
        echo(line)
    _write_outputs(echo, json_path, result.to_dict(), [
        (markdown_path, lambda: frontier_report.to_markdown(result).encode("utf-8")),
        (plot_path, lambda: plot.render_frontier_plot(result))])


def format_complexity_table(checks: list[PaperCheck]) -> list[str]:
    """The complexity table, its notes and legend, as printable lines."""
    notes: dict[str, int] = {}
    lines = [_format_cells([h for h, _, _ in _COLUMNS]), "-" * _table_width()]
    previous_table = None
    for c in checks:
        p = c.paper
        if previous_table is not None and p.table != previous_table:
            lines.append("")
        previous_table = p.table
        status = c.status
        if p.note:
            status += f" [{notes.setdefault(p.note, len(notes) + 1)}]"
        lines.append(_format_cells([
            p.table, p.row, p.model, _CONVENTION_ABBREV.get(p.params_convention, "all"),
            p.params, f"{c.params_m:.2f}M", f"{c.params_dev_pct:+.1f}%",
            p.madds, f"{c.madds_m:.1f}M", c.madds_form, f"{c.madds_dev_pct:+.1f}%",
            f"{c.complexity.madds_latent / MILLION:.1f}M", f"{c.complexity.madds_weight / MILLION:.1f}M",
            f"{c.complexity.branch_pool_madds / MILLION:.2f}", f"{c.tolerance_pct:g}%", status,
        ]))
    misses = sum(c.status == STATUS_MISS for c in checks)
    lines += ["", f"{len(checks)} rows: {len(checks) - misses} ok, {misses} miss", ""]
    lines += [f"[{n}] {text}" for text, n in notes.items()]
    lines += [""] + _legend()
    return lines


def _format_cells(cells: list[str]) -> str:
    out = []
    for text, (_, width, align) in zip(cells, _COLUMNS):
        out.append(f"{text:{align}{width}}")
    return " ".join(out).rstrip()


def _table_width() -> int:
    return sum(w for _, w, _ in _COLUMNS) + len(_COLUMNS) - 1


def _legend() -> list[str]:
    tol = ", ".join(f"{kind} {pct:g}%" for kind, pct in TOLERANCE_PCT.items())
    return [
        "Legend:",
        "  P = params, M = MAdds (multiply-adds), in millions; paper cells as printed (G = 1000M).",
        "  conv. = params convention: all = every parameter; -cls = excluding the classifier",
        "    (the paper's ResNet figures; docs/design.md#counting-conventions).",
        "  M ours is in the form shown: min = per DCD layer the cheaper of its latent form",
        "    (as the layer's forward executes: W0 conv, Q conv, Φ, P conv, Λ scaling) and its",
        "    weight form (W(x) = ΛW0 + PΦQᵀ built per sample, then one conv), matching the",
        "    paper's Table 4 DCD figures and its min(O(C²), O(HWC)) remark (Section 3.3);",
        "    any = no DCD layer, every form is the same count. latent / weight = every DCD",
        "    layer in that form (the classifier, at 1x1 resolution, always latent).",
        "  pool = dynamic-branch pooling adds, counted in every M column (one add per pooled",
        "    element); the paper's figures seem to leave them out: subtract to compare.",
        "  Not counted anywhere: BatchNorm (folded), activations, max pooling, bias and",
        "    residual additions. DY-Conv/CondConv: K kernel aggregation + one conv + routing.",
        "  status: ok = params and MAdds within tolerance or equal at the paper's printed",
        "    precision; miss = outside it, see the row's note.",
        f"  tol = tolerance per kind: {tol}.",
        "  Conventions in full: dcd_deploy/bench/complexity.py.",
    ]
