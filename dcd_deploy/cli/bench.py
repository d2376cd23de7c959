"""``dcd-bench``: our models beside the paper's figures, one subcommand per question.

- ``dcd-bench latency``: static vs DCD MobileNetV2 x0.5 and x1.0, one thread, batch 1,
  224x224, on every backend (:func:`dcd_deploy.bench.latency.run_benchmark`), the
  paper's conditions first.
- ``dcd-bench frontier``: every model of the paper's Table 4 timed on one backend, each
  family's accuracy-latency frontier marked (:mod:`dcd_deploy.bench.frontier`).
- ``dcd-bench floor``: each DCD model's dynamic branch alone (and with ``W(x)`` formed)
  beside the static model and the full export (:mod:`dcd_deploy.bench.floor`).
- ``dcd-bench complexity``: the parameters and MAdds of every model in Tables 1-4 beside
  the paper's cells (:func:`dcd_deploy.bench.complexity.compare_with_paper`).
- ``dcd-bench summary``: the story of latency and frontier JSON files in a few lines
  (:mod:`dcd_deploy.bench.summary`).

Progress lines go to stderr, tables to stdout. The flags of release 0.1 (``--frontier``,
``--floor``, ``--complexity``, and no subcommand for latency) still work, with a
deprecation note on stderr. Everything is measured by the library; this module only
parses options and prints.
"""

from __future__ import annotations

from pathlib import Path

import click

from .._limits import MAX_BATCH, check_memory
from .._version import __version__
from ._bench_options import (
    ANY_MODEL,
    CONTEXT,
    PAPER_INPUT_SIZE,
    Echo,
    backends_option,
    check_out_dir,
    csv,
    input_size_option,
    json_option,
    models_option,
    quiet_option,
    report_options,
    seed_option,
    timing_options,
    trust_option,
    write_json,
    write_outputs,
    wrote,
)
from ._input_set import largest_side
from ._input_size import api_size, channels_option, format_size
from ._model_arg import file_option, weights_key_option
from ._outputs import OutputPath
from ._run import run_cli

#: Old mode flag -> the subcommand it stands for (deprecated aliases, kept for a release).
LEGACY_FLAGS = {"--complexity": "complexity", "--floor": "floor", "--frontier": "frontier"}
#: What the group itself takes before a subcommand.
_GROUP_ARGS = ("-h", "--help", "--version", "--list-models")


def legacy_args(args: list[str], commands) -> tuple[list[str], str | None]:
    """The 0.1 spelling rewritten as a subcommand call, and the deprecation note to print.

    ``dcd-bench --frontier --quick`` -> ``dcd-bench frontier --quick``; options without a
    mode flag (or none at all) -> ``dcd-bench latency ...``. A call that starts with a
    subcommand or a group option is returned unchanged, with no note.
    """
    if args and (args[0] in commands or args[0] in _GROUP_ARGS):
        return args, None
    flags = [f for f in LEGACY_FLAGS if f in args]
    if len(flags) > 1:
        raise click.UsageError(f"{' and '.join(flags)} are separate runs")
    if not flags:
        return ["latency", *args], (
            "note: 'dcd-bench [options]' without a subcommand is deprecated; use 'dcd-bench latency [options]'"
        )
    name = LEGACY_FLAGS[flags[0]]
    rest = [a for a in args if a != flags[0]]
    return [name, *rest], f"note: 'dcd-bench {flags[0]}' is deprecated; use 'dcd-bench {name}'"


class _Bench(click.Group):
    """A group that also understands the 0.1 mode flags (see :func:`legacy_args`)."""

    def parse_args(self, ctx, args):
        if not ctx.resilient_parsing:
            args, note = legacy_args(list(args), self.commands)
            if note:
                click.echo(note, err=True)
        return super().parse_args(ctx, args)


class _Subcommand(click.Command):
    """An option another subcommand takes is a usage error that names which ones do."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            group = ctx.parent.command if ctx.parent is not None else None
            takers = [
                n for n, c in getattr(group, "commands", {}).items() if any(exc.option_name in p.opts for p in c.params)
            ]
            if not takers:
                raise
            names = ", ".join(takers[:-1]) + " and " + takers[-1] if len(takers) > 1 else takers[0]
            raise click.UsageError(
                f"dcd-bench {self.name} does not take {exc.option_name} (it applies to dcd-bench {names})", ctx
            ) from None


def _list_models(ctx, param, value):
    if value and not ctx.resilient_parsing:
        for line in format_model_list():
            click.echo(line)
        ctx.exit()


def format_model_list() -> list[str]:
    """Every zoo name with its parameter count (all parameters, 1000 classes), as lines."""
    import torch

    from .._meta import FastMeta
    from ..bench.complexity import MILLION
    from ..models import create_model, list_models

    lines = [f"{'model':<26} {'params M':>8}", "-" * 35]
    for name in list_models():
        with torch.device("meta"), FastMeta():  # shapes only: the CondConv ResNet-50 alone would take 0.7 GB
            model = create_model(name)
        lines.append(f"{name:<26} {sum(p.numel() for p in model.parameters()) / MILLION:>8.2f}")
    return lines + [
        "",
        "X: static; X_dcd: DCD (the authors' release layers); X_dyconv: DY-Conv (K = 4);",
        "X_condconv: CondConv (K = 8). Params count every parameter, classifier included.",
    ]


@click.group(cls=_Bench, context_settings=CONTEXT)
@click.version_option(__version__, "--version", prog_name="dcd-bench")
@click.option(
    "--list-models",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=_list_models,
    help="Print the model zoo with parameter counts and exit.",
)
def main() -> None:
    """Benchmark the model zoo against the paper (ICLR 2021): latency, frontier, floor, complexity.

    Each subcommand takes --help. The flags of release 0.1 (dcd-bench --frontier, --floor,
    --complexity; options alone for latency) still work, with a deprecation note.
    """


def _square(input_size: tuple[int, int], command: str) -> int:
    if input_size[0] != input_size[1]:
        raise click.UsageError(f"dcd-bench {command} takes a square --input-size, not {format_size(input_size)}")
    return input_size[0]


@main.command(cls=_Subcommand, context_settings=CONTEXT)
@models_option(
    ANY_MODEL + "; X and X_dcd are paired as static vs DCD, a checkpoint by the architecture it "
    "holds, your model with dcd_deploy.to_static() of it, a file with --baseline. [default: "
    "mobilenetv2_050,mobilenetv2_050_dcd,mobilenetv2_100,mobilenetv2_100_dcd]"
)
@click.option(
    "--baseline",
    default=None,
    metavar="MODEL",
    help="The static partner of the one model in --models, of the same kind (an ONNX file for a "
    "file: --models net.onnx --baseline net_static.onnx), instead of its zoo partner or "
    "to_static() of it.",
)
@backends_option(
    "--backends",
    help=(
        "Some of torch-paper, torch, torch-deploy, onnxruntime, openvino, openvino-fused (the last two if "
        "openvino is installed; openvino-fused builds the extension). [default: torch-paper,torch-deploy,"
        "onnxruntime,openvino,openvino-fused (torch-paper with --threads 1 only, OpenVINO if installed)]"
    ),
)
@click.option("--batch", type=click.IntRange(1, MAX_BATCH), default=1, show_default=True, help="Images per run.")
@input_size_option(square=False)
@channels_option("An ONNX file's own channel count wins.")
@timing_options(runs=50, min_time=5, warmup=5)
@click.option(
    "--profile",
    is_flag=True,
    help="Also break each model's time down by part: ONNX Runtime's per-node profile, and "
    "PyTorch's per-op profile under the paper's conditions.",
)
@click.option(
    "--profile-runs", type=click.IntRange(min=1), default=None, help="Profiled runs per model. [default: 50; --quick 3]"
)
@file_option(
    "--weights",
    help="State dict (or checkpoint) loaded into the one model of --models that MODULE:FUNCTION or a "
    "zoo name builds: read weights-only like any checkpoint, strictly, 'module.' prefixes dropped; "
    "its static counterpart is made from the loaded model.",
)
@weights_key_option
@file_option(
    "--inputs",
    "inputs_path",
    help="Time a model of several inputs (or of one that is no image) on these: a .npz, or a .pt "
    "dict, list or tuple, one array per forward argument or ONNX file input (by name, else in order), axis 0 the "
    "batch (the first --batch samples are timed), instead of synthetic images of --input-size.",
)
@json_option
@report_options
@seed_option
@trust_option
@quiet_option
@run_cli
def latency(json_path: Path | None, quiet: bool, **options) -> None:
    """Static vs DCD on every backend, the paper's conditions first (one thread: the paper's comparison)."""
    run_latency(json_path=json_path, echo=Echo(json_path, quiet=quiet), **options)


def run_latency(
    *,
    json_path: Path | None,
    input_size,
    echo: Echo,
    models: str | None,
    baseline: str | None,
    batch: int,
    markdown_path: Path | None,
    weights: Path | None = None,
    plot_path: Path | None,
    inputs_path: Path | None = None,
    **options,
) -> None:
    """Run :func:`~dcd_deploy.bench.latency.run_benchmark`, print its tables, write the files asked for."""
    from ..bench import latency, plot, report

    check_out_dir(
        json_path,
        markdown_path,
        plot_path,
        models=",".join(filter(None, [models, baseline])) or None,
        extra_inputs=[p for p in (weights, inputs_path) if p is not None],
    )
    given = None if inputs_path is None else _given_inputs(inputs_path)
    side = max(input_size) if given is None else largest_side(given.values())
    check_memory(input_size=side, batch=batch, what="the benchmark")
    if plot_path is not None:
        plot.require_matplotlib()  # fail before minutes of timing, not after
    if given is None and input_size != (PAPER_INPUT_SIZE, PAPER_INPUT_SIZE):
        echo.progress(
            f"note: input {format_size(input_size)}; the paper's times are for {PAPER_INPUT_SIZE}x{PAPER_INPUT_SIZE}"
        )
    result = latency.run_benchmark(
        csv(models) or latency.DEFAULT_MODELS,
        batch=batch,
        input_size=api_size(input_size),
        progress=echo.progress,
        baseline=baseline,
        weights=weights,
        inputs=given,
        **options,
    )
    echo("")
    for line in report.format_table(result) + ([""] + report.format_profile_table(result) if result.profiles else []):
        echo(line)
    write_outputs(
        echo,
        json_path,
        result.to_dict(),
        [
            (markdown_path, lambda: report.to_markdown(result).encode("utf-8")),
            (plot_path, lambda: plot.render_latency_plot(result)),
        ],
    )


def _given_inputs(path: Path) -> dict:
    """``--inputs FILE`` of ``latency``: its arrays by name (or position), the image options
    refused beside it."""
    from ..errors import UnsupportedInputError
    from ..inputs import read_input_set

    given = read_input_set(path)
    if given is None:
        raise UnsupportedInputError(
            f"inputs file {path} holds one tensor; dcd-bench --inputs takes one array per input "
            "(a .npz, or a .pt dict, list or tuple); images are made at --input-size"
        )
    ctx = click.get_current_context()
    named = [
        f"--{p.replace('_', '-')}"
        for p in ("input_size", "channels")
        if ctx.get_parameter_source(p) not in (None, click.core.ParameterSource.DEFAULT)
    ]
    if named:
        raise click.UsageError(
            f"{', '.join(named)} describe{'s' if len(named) == 1 else ''} synthetic images; {path} gives "
            "every input's shape and values"
        )
    return dict(zip(given.names, given.tensors)) if given.names else dict(enumerate(given.tensors))


@main.command(cls=_Subcommand, context_settings=CONTEXT)
@models_option("Zoo names of Table 4's rows. [default: all 19]")
@backends_option(
    "--backend",
    "--backends",
    help=(
        "The one backend to time: torch-paper, torch, torch-deploy, onnxruntime, openvino, openvino-fused "
        "(the fastest, with the fused DCD kernels). [default: onnxruntime]"
    ),
)
@input_size_option(square=True)
@timing_options(runs=20, min_time=2, warmup=2)
@json_option
@report_options
@seed_option
@quiet_option
@run_cli
def frontier(
    json_path: Path | None,
    markdown_path: Path | None,
    plot_path: Path | None,
    models: str | None,
    backends: list[str] | None,
    input_size,
    quiet: bool,
    **options,
) -> None:
    """Table 4's models timed on one backend beside the paper's top-1: each family's accuracy-latency frontier."""
    from ..bench import frontier as bench_frontier
    from ..bench import frontier_report, plot

    echo = Echo(json_path, quiet=quiet)
    check_out_dir(json_path, markdown_path, plot_path, models=models)
    if backends is not None and len(backends) != 1:
        raise click.UsageError(f"dcd-bench frontier times one backend, not {len(backends)}: e.g. --backend onnxruntime")
    if plot_path is not None:
        plot.require_matplotlib()  # fail before minutes of timing, not after
    result = bench_frontier.run_frontier(
        models=csv(models),
        backend=backends[0] if backends else bench_frontier.DEFAULT_BACKEND,
        input_size=_square(input_size, "frontier"),
        progress=echo.progress,
        **options,
    )
    echo("")
    for line in frontier_report.format_frontier_table(result):
        echo(line)
    write_outputs(
        echo,
        json_path,
        result.to_dict(),
        [
            (markdown_path, lambda: frontier_report.to_markdown(result).encode("utf-8")),
            (plot_path, lambda: plot.render_frontier_plot(result)),
        ],
    )


@main.command(cls=_Subcommand, context_settings=CONTEXT)
@models_option("DCD models: zoo names or checkpoints. [default: mobilenetv2_050_dcd,mobilenetv2_100_dcd,resnet18_dcd]")
@input_size_option(square=True)
@timing_options(runs=50, min_time=5, warmup=5)
@json_option
@seed_option
@trust_option
@quiet_option
@run_cli
def floor(json_path: Path | None, models: str | None, input_size, quiet: bool, **options) -> None:
    """Each DCD model's dynamic branch alone and with W(x) formed, beside the static model and the
    full export (ONNX Runtime): how close to static any deployment can get here."""
    import tempfile

    from ..bench import floor as bench_floor

    echo = Echo(json_path, quiet=quiet)
    check_out_dir(json_path, models=models)
    size = _square(input_size, "floor")
    check_memory(input_size=size, batch=1, what="the floor benchmark")
    with tempfile.TemporaryDirectory(prefix="dcd-floor-") as tmp:
        result = bench_floor.run_floor(
            csv(models) or bench_floor.DEFAULT_FLOOR_MODELS,
            input_size=size,
            workdir=Path(tmp),
            progress=echo.progress,
            **options,
        )
    echo("")
    for line in bench_floor.format_floor_table(result):
        echo(line)
    if json_path is not None:
        wrote(echo, [write_json(json_path, result.to_dict())])


@main.command(cls=_Subcommand, context_settings=CONTEXT)
@input_size_option(square=True)
@json_option
@click.option(
    "--markdown",
    "markdown_path",
    type=OutputPath(),
    default=None,
    metavar="PATH",
    help="Write the table to PATH instead of the terminal (which gets one line per table and where the table went).",
)
@quiet_option
@run_cli
def complexity(json_path: Path | None, input_size, markdown_path: Path | None, quiet: bool) -> None:
    """Count params and MAdds of every model in the paper's Tables 1-4 beside the paper's cells (no timing)."""
    run_complexity(
        json_path=json_path,
        input_size=_square(input_size, "complexity"),
        markdown_path=markdown_path,
        echo=Echo(json_path, quiet=quiet),
    )


def run_complexity(*, json_path: Path | None, input_size: int, markdown_path: Path | None, echo: Echo) -> None:
    """Count, print the table with its legend (or its summary and the file it went to), write JSON if asked."""
    from ..bench.complexity import compare_with_paper, complexity_document
    from ..bench.report import write_bytes_atomic
    from ._complexity_table import complexity_summary, format_complexity_table

    check_out_dir(json_path, markdown_path)
    checks = compare_with_paper(input_size=input_size, progress=echo.progress)
    if input_size != PAPER_INPUT_SIZE:
        echo(
            f"note: counted at {input_size}x{input_size}; the paper's figures are for "
            f"{PAPER_INPUT_SIZE}x{PAPER_INPUT_SIZE}, so deviations are not meaningful\n"
        )
    table = format_complexity_table(checks)
    if markdown_path is None:
        for line in table:
            echo(line)
    else:
        write_bytes_atomic(markdown_path, ("\n".join(["```", *table, "```"]) + "\n").encode("utf-8"))
        for line in complexity_summary(checks) + [f"(the table, its notes and legend: {markdown_path})"]:
            echo(line)
    if json_path is not None:
        name = write_json(json_path, complexity_document(checks, input_size=input_size))
        if name:
            echo(f"\nwrote {len(checks)} records to {name}")


@main.command(cls=_Subcommand, context_settings=CONTEXT)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path), metavar="JSON|DIR...")
@run_cli
def summary(paths: tuple[Path, ...]) -> None:
    """The story of latency and frontier JSON files in a few lines: the paper's ratio reproduced,
    the fastest deployment and its DCD/static ratio, where DCD pays off (a DIR: every *.json in it)."""
    from ..bench.summary import load_documents, story_lines

    for line in story_lines(load_documents(paths)):
        click.echo(line)
