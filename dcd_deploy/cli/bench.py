"""``dcd-bench``: our models beside the paper's figures.

``dcd-bench --complexity`` counts the parameters and MAdds of every model in Tables 1-4
(:func:`dcd_deploy.bench.complexity.compare_with_paper`) and prints them beside the
paper's cells; ``--json PATH`` also writes one record per paper row. Without
``--complexity`` the command will run the latency benchmark (:func:`run_latency`).
"""

from __future__ import annotations

from pathlib import Path

import click

from ..bench.complexity import (
    DEFAULT_INPUT_SIZE, MILLION, STATUS_MISS, TOLERANCE_PCT, PaperCheck, compare_with_paper,
)
from ..bench.paper import PARAMS_EXCL_CLASSIFIER
from ..errors import DCDDeployError
from ._common import run_cli, write_json_atomic

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


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--complexity", is_flag=True,
              help="Count params and MAdds of every model in the paper's Tables 1-4 and "
                   "compare them with the paper's cells.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="PATH", help="Also write the results as JSON to PATH (atomically).")
@click.option("--input-size", type=click.IntRange(min=MIN_INPUT_SIZE), default=DEFAULT_INPUT_SIZE,
              show_default=True, help="Side of the square input; the paper's figures are for 224.")
@run_cli
def main(complexity: bool, json_path: Path | None, input_size: int) -> None:
    """Benchmark the model zoo against the paper (ICLR 2021, Tables 1-4)."""
    if complexity:
        run_complexity(json_path=json_path, input_size=input_size)
    else:
        run_latency(json_path=json_path, input_size=input_size)


def run_complexity(*, json_path: Path | None, input_size: int) -> None:
    """Count, print the table with its legend, and write JSON if asked."""
    if json_path is not None and not json_path.resolve().parent.is_dir():
        raise DCDDeployError(f"cannot write {json_path}: no directory {json_path.parent}")
    checks = compare_with_paper(input_size=input_size)
    if input_size != PAPER_INPUT_SIZE:
        click.echo(f"note: counted at {input_size}x{input_size}; the paper's figures are for "
                   f"{PAPER_INPUT_SIZE}x{PAPER_INPUT_SIZE}, so deviations are not meaningful\n")
    for line in format_complexity_table(checks):
        click.echo(line)
    if json_path is not None:
        write_json_atomic(json_path, [c.to_record() for c in checks])
        click.echo(f"\nwrote {len(checks)} records to {json_path}")


def run_latency(*, json_path: Path | None, input_size: int) -> None:
    """The latency mode, still to come.

    To plug it in: replace this body with the measurement (a library function returning
    data, e.g. in ``dcd_deploy.bench.latency``), print its table beside
    :data:`dcd_deploy.bench.paper.PAPER_LATENCY_MS` and write ``json_path`` with
    :func:`write_json_atomic`; add its own options (``--threads``, ...) to :func:`main`.
    """
    raise click.UsageError("latency benchmark not available yet; run `dcd-bench --complexity`")


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
        "    (the paper's ResNet figures; DESIGN.md section 5).",
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
