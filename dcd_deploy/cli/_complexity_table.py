"""The ``dcd-bench complexity`` table: every Params/MAdds cell of the paper's Tables 1-4
beside ours, with its notes and legend."""

from __future__ import annotations

from ..bench.complexity import MILLION, STATUS_MISS, TOLERANCE_PCT, PaperCheck
from ..bench.paper import PARAMS_EXCL_CLASSIFIER

# Table layout; legend: (header, width, alignment) of each column of the complexity table.
_COLUMNS = (
    ("tbl", 3, "<"),
    ("row", 17, "<"),
    ("model", 24, "<"),
    ("conv.", 5, "<"),
    ("P paper", 7, ">"),
    ("P ours", 7, ">"),
    ("dev", 6, ">"),
    ("M paper", 7, ">"),
    ("M ours", 8, ">"),
    ("form", 4, "<"),
    ("dev", 6, ">"),
    ("latent", 8, ">"),
    ("weight", 8, ">"),
    ("pool", 5, ">"),
    ("tol", 4, ">"),
    ("status", 10, "<"),
)
_CONVENTION_ABBREV = {PARAMS_EXCL_CLASSIFIER: "-cls"}


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
        lines.append(
            _format_cells(
                [
                    p.table,
                    p.row,
                    p.model,
                    _CONVENTION_ABBREV.get(p.params_convention, "all"),
                    p.params,
                    f"{c.params_m:.2f}M",
                    f"{c.params_dev_pct:+.1f}%",
                    p.madds,
                    f"{c.madds_m:.1f}M",
                    c.madds_form,
                    f"{c.madds_dev_pct:+.1f}%",
                    f"{c.complexity.madds_latent / MILLION:.1f}M",
                    f"{c.complexity.madds_weight / MILLION:.1f}M",
                    f"{c.complexity.branch_pool_madds / MILLION:.2f}",
                    f"{c.tolerance_pct:g}%",
                    status,
                ]
            )
        )
    misses = sum(c.status == STATUS_MISS for c in checks)
    lines += ["", f"{len(checks)} rows: {len(checks) - misses} ok, {misses} miss", ""]
    lines += [f"[{n}] {text}" for text, n in notes.items()]
    lines += [""] + _legend()
    return lines


def complexity_summary(checks: list[PaperCheck]) -> list[str]:
    """The table in a few lines: per paper table, its rows and how many are within tolerance."""
    lines = []
    for table in dict.fromkeys(c.paper.table for c in checks):
        rows = [c for c in checks if c.paper.table == table]
        misses = [c.paper.row for c in rows if c.status == STATUS_MISS]
        lines.append(
            f"Table {table}: {len(rows)} rows, {len(rows) - len(misses)} within tolerance of the paper's "
            "params and MAdds" + (f"; miss: {', '.join(misses)}" if misses else "")
        )
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
