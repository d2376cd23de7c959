"""What the ``dcd-bench`` subcommands share: their common options (each subcommand takes
only the ones it uses, with its own defaults in its ``--help``), where the report goes,
and how the files asked for are written.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from .._limits import MAX_INPUT_SIZE, MAX_SEED, MAX_THREADS
from ..errors import DCDDeployError
from ._input_size import InputSize
from ._model_arg import model_inputs
from ._outputs import OutputPath, check_outputs, write_json_atomic

#: Smallest input side every zoo model can take (five stride-2 stages).
MIN_INPUT_SIZE = 32
#: Input side the paper's figures are for.
PAPER_INPUT_SIZE = 224
#: Every subcommand: -h as well as --help.
CONTEXT = {"help_option_names": ["-h", "--help"]}


def csv(value: str | None) -> list[str] | None:
    """``a,b`` -> ``["a", "b"]``; None stays None."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise click.BadParameter("expected a comma-separated list")
    return items


def _backends(ctx, param, value):
    items = csv(value)
    if items is None:
        return None
    from ..bench.latency import BACKENDS

    bad = [b for b in items if b not in BACKENDS]
    if bad:
        raise click.BadParameter(f"unknown backend {', '.join(bad)}; choose from {', '.join(BACKENDS)}")
    return items


def backends_option(*names: str, help: str):
    """``--backends B,...`` (checked against the latency backends before any work)."""
    return click.option(*names, "backends", default=None, callback=_backends, metavar="B,...", help=help)


#: What --models takes, for the subcommands that time any model.
ANY_MODEL = (
    "Zoo names, checkpoint paths, MODULE:FUNCTION (your model: a Python file or module and the function "
    "returning it; this runs that code) or ONNX files"
)


def models_option(help: str):
    return click.option("--models", default=None, metavar="A,B,...", help=help)


def quiet_option(fn):
    return click.option(
        "-q", "--quiet", is_flag=True, help="No progress lines on stderr (an error still prints its Error: line)."
    )(fn)


def input_size_option(*, square: bool):
    note = "square" if square else "or height x width (256x320)"
    return click.option(
        "--input-size",
        type=InputSize(MIN_INPUT_SIZE, MAX_INPUT_SIZE),
        default=str(PAPER_INPUT_SIZE),
        show_default=True,
        help=f"Input side (224), {note}, each {MIN_INPUT_SIZE}-{MAX_INPUT_SIZE}; the paper's figures are for 224.",
    )


def timing_options(*, runs: int, min_time: float, warmup: int):
    """``--threads --runs --min-time --warmup --quick``, with this subcommand's defaults in the help."""

    def apply(fn):
        fn = click.option("--quick", is_flag=True, help="A few runs only: a smoke test, not a measurement.")(fn)
        fn = click.option(
            "--warmup",
            type=click.IntRange(min=0),
            default=None,
            help=f"Warm-up runs dropped per model, after the first run. [default: {warmup}; --quick 1]",
        )(fn)
        fn = click.option(
            "--min-time",
            type=click.FloatRange(min=0.0),
            default=None,
            metavar="SECONDS",
            help=f"Minimum timed seconds per model. [default: {min_time:g}; --quick 0]",
        )(fn)
        fn = click.option(
            "--runs",
            type=click.IntRange(min=1),
            default=None,
            help=f"Minimum timed runs per model. [default: {runs}; --quick 5]",
        )(fn)
        return click.option(
            "--threads",
            type=click.IntRange(1, MAX_THREADS),
            default=1,
            show_default=True,
            help="Threads of every backend (torch intra/inter-op, ORT intra = inter).",
        )(fn)

    return apply


def seed_option(fn):
    return click.option(
        "--seed",
        type=click.IntRange(0, MAX_SEED),
        default=0,
        show_default=True,
        help="Pseudo-training seed of zoo models, the generators' seed while MODULE:FUNCTION "
        "builds its model, and the input's seed.",
    )(fn)


def trust_option(fn):
    return click.option(
        "--trust-checkpoint",
        is_flag=True,
        help="Allow checkpoints that need full unpickling (runs code from the file).",
    )(fn)


def json_option(fn):
    return click.option(
        "--json",
        "json_path",
        type=OutputPath(allow_dash=True),
        default=None,
        metavar="PATH",
        help="Also write the results as JSON to PATH (atomically; a symlink is written through "
        "to its target); '-': the JSON alone on stdout (the table goes to stderr).",
    )(fn)


def report_options(fn):
    """``--markdown`` and ``--plot``."""
    fn = click.option(
        "--plot",
        "plot_path",
        type=OutputPath(),
        default=None,
        metavar="PATH.png",
        help="Also draw the results to PATH (needs matplotlib, checked before any timing).",
    )(fn)
    return click.option(
        "--markdown",
        "markdown_path",
        type=OutputPath(),
        default=None,
        metavar="PATH",
        help="Also write the report as Markdown to PATH.",
    )(fn)


class Echo:
    """Where the report goes: stdout, or stderr when ``--json -`` claims stdout for the JSON."""

    def __init__(self, json_path: Path | None = None, *, quiet: bool = False):
        self.to_stderr = json_path is not None and str(json_path) == "-"
        self.quiet = quiet

    def __call__(self, line: str = "") -> None:
        click.echo(line, err=self.to_stderr)

    def progress(self, line: str) -> None:
        if not self.quiet:
            click.echo(line, err=True)


def write_json(path: Path, data) -> str | None:
    """Write ``data`` to ``path``, or to stdout alone for ``-``; the name written, for the report."""
    if str(path) == "-":
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return None
    write_json_atomic(path, data)
    return str(path)


def check_out_dir(*paths: Path | None, models: str | None = None, extra_inputs=()) -> None:
    """Refuse unwritable outputs, and outputs that are a --models file, one of ``extra_inputs``
    (--weights) or each other ('-' is stdout)."""
    files = [p for p in paths if p is not None and str(p) != "-"]
    for path in files:
        if not path.resolve().parent.is_dir():
            raise DCDDeployError(f"cannot write {path}: no directory {path.parent}")
    inputs = [f for spec in csv(models) or () for f in model_inputs(spec)]
    check_outputs(outputs=files, inputs=inputs + list(extra_inputs))


def write_outputs(echo: Echo, json_path: Path | None, document: dict, files) -> None:
    """Write the JSON document and each ``(path, render -> bytes)`` asked for, then say what was written."""
    from ..bench.report import write_bytes_atomic

    written = [] if json_path is None else [write_json(json_path, document)]
    for path, render in files:
        if path is not None:
            write_bytes_atomic(path, render())
            written.append(str(path))
    wrote(echo, written)


def wrote(echo: Echo, written: list[str | None]) -> None:
    names = [w for w in written if w]
    if names:
        echo(f"\nwrote {', '.join(names)}")
