"""Printable forms of a :class:`~dcd_deploy.bench.frontier.FrontierResult`: terminal table
and Markdown (the PNG: :mod:`dcd_deploy.bench.plot`).
"""

from __future__ import annotations

from ._table import Column, markdown_table, number, text_table
from .frontier import SOURCES, FrontierRecord, FrontierResult

# Each frontier table column.
_COLUMNS = (
    Column("model", 25),
    Column("paper row", 18),
    Column("family", 11),
    Column("variant", 8),
    Column("top-1 %", 7, ">"),
    Column("p50 ms", 8, ">"),
    Column("p90 ms", 8, ">"),
    Column("runs", 5, ">"),
    Column("frontier", 8),
)
#: Marker of a row on its family's frontier.
ON = "*"


def _cells(r: FrontierRecord) -> list[str]:
    frontier = ON if r.on_frontier else ("not built" if r.status != "ok" else "")
    return [
        r.name,
        r.label,
        r.family,
        r.variant,
        f"{r.top1:.1f}",
        number(r.p50_ms, ".2f"),
        number(r.p90_ms, ".2f"),
        number(r.n_runs, "d"),
        frontier,
    ]


def header_lines(result: FrontierResult) -> list[str]:
    m, s = result.machine, result.settings
    return [
        f"dcd-bench frontier: the paper's Table 4, accuracy against latency measured on this machine {m.date}",
        f"CPU {m.cpu}, {m.cores} cores; backend {s['backend']}, threads {s['threads']}, batch 1, input "
        f"{s['input_size']}x{s['input_size']}; >= {s['runs']} runs and >= {s['min_time_s']:g} s per model, "
        f"interleaved" + (" (--quick: a smoke test, not a measurement)" if s.get("quick") else ""),
        f"top-1: {SOURCES['top1']}; ms: {SOURCES['p50_ms']}",
    ]


def frontier_summary(result: FrontierResult) -> list[str]:
    """One line per family: its frontier, fastest first."""
    lines = []
    for family in dict.fromkeys(r.family for r in result.records):
        front = result.frontier(family)
        if front:
            lines.append(
                f"{family} frontier: " + " -> ".join(f"{r.label} ({r.p50_ms:.1f} ms, {r.top1:.1f}%)" for r in front)
            )
    return lines


def coverage_lines(result: FrontierResult) -> list[str]:
    """``openvino-fused``: how many DCD layers of each DCD model ran as the fused op."""
    recs = [r for r in result.records if r.dcd_layers]
    if not recs:
        return []
    return [
        "DCD layers run by the fused op (the others, and static models, as OpenVINO's standard ops): "
        + ", ".join(f"{r.label} {r.fused_nodes}/{r.dcd_layers}" for r in recs)
    ]


def format_frontier_table(result: FrontierResult) -> list[str]:
    """Header, the rows sorted by latency, each family's frontier, notes and the rule."""
    lines = header_lines(result) + [""] + text_table(_COLUMNS, [_cells(r) for r in result.records])
    lines += [""] + frontier_summary(result) + coverage_lines(result)
    lines += [f"not built: {r.name}: {r.reason}" for r in result.records if r.status != "ok"]
    lines += [f"note: {n}" for n in result.notes]
    lines += [
        "",
        f"{ON} = on its family's accuracy-latency frontier: no other model of the family is at least "
        "as fast (p50) and at least as accurate (top-1), and strictly better in one.",
        "Weights are pseudo-trained (latency does not depend on them); accuracy was not measured here.",
    ]
    return lines


def to_markdown(result: FrontierResult) -> str:
    """The frontier as Markdown."""
    m, s = result.machine, result.settings
    out = [
        "# dcd-bench frontier",
        "",
        f"- measured on this machine, {m.date}; CPU: {m.cpu}",
        f"- backend {s['backend']}, threads {s['threads']}, batch 1, input {s['input_size']}x{s['input_size']}"
        + (" (--quick: not a measurement)" if s.get("quick") else ""),
        f"- top-1: {SOURCES['top1']}",
        f"- ms: {SOURCES['p50_ms']}",
        "",
    ]
    out += markdown_table(_COLUMNS, [_cells(r) for r in result.records])
    out += [""] + [f"- {line}" for line in frontier_summary(result) + coverage_lines(result)]
    out += [f"- not built: {r.name}: {r.reason}" for r in result.records if r.status != "ok"]
    out += [
        "",
        f"{ON} = on its family's frontier: no other model of the family is at least as fast and at "
        "least as accurate, and strictly better in one.",
    ]
    return "\n".join(out) + "\n"
