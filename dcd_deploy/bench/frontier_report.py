"""Printable forms of a :class:`~dcd_deploy.bench.frontier.FrontierResult`: terminal table
and Markdown (the PNG: :mod:`dcd_deploy.bench.plot`).
"""

from __future__ import annotations

from typing import Sequence

from .frontier import SOURCES, FrontierRecord, FrontierResult

_DASH = "-"
# (header, width, alignment) of each frontier table column.
_COLUMNS = (
    ("model", 25, "<"), ("paper row", 18, "<"), ("family", 11, "<"), ("variant", 8, "<"),
    ("top-1 %", 7, ">"), ("p50 ms", 8, ">"), ("p90 ms", 8, ">"), ("runs", 5, ">"), ("frontier", 8, "<"),
)
#: Marker of a row on its family's frontier.
ON = "*"


def _cells(r: FrontierRecord) -> list[str]:
    ms = (lambda v: _DASH if v is None else f"{v:.2f}")
    frontier = ON if r.on_frontier else ("not built" if r.status != "ok" else "")
    return [r.name, r.label, r.family, r.variant, f"{r.top1:.1f}", ms(r.p50_ms), ms(r.p90_ms),
            _DASH if r.n_runs is None else str(r.n_runs), frontier]


def _line(cells: Sequence[str]) -> str:
    return " ".join(f"{c:{a}{w}}" for c, (_, w, a) in zip(cells, _COLUMNS)).rstrip()


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
            lines.append(f"{family} frontier: " + " -> ".join(
                f"{r.label} ({r.p50_ms:.1f} ms, {r.top1:.1f}%)" for r in front))
    return lines


def coverage_lines(result: FrontierResult) -> list[str]:
    """``openvino-fused``: how many DCD layers of each DCD model ran as the fused op."""
    recs = [r for r in result.records if r.dcd_layers]
    if not recs:
        return []
    return ["DCD layers run by the fused op (the others, and static models, as OpenVINO's standard ops): "
            + ", ".join(f"{r.label} {r.fused_nodes}/{r.dcd_layers}" for r in recs)]


def format_frontier_table(result: FrontierResult) -> list[str]:
    """Header, the rows sorted by latency, each family's frontier, notes and the rule."""
    lines = header_lines(result) + ["", _line([h for h, _, _ in _COLUMNS]),
                                     "-" * (sum(w for _, w, _ in _COLUMNS) + len(_COLUMNS) - 1)]
    lines += [_line(_cells(r)) for r in result.records]
    lines += [""] + frontier_summary(result) + coverage_lines(result)
    lines += [f"not built: {r.name}: {r.reason}" for r in result.records if r.status != "ok"]
    lines += [f"note: {n}" for n in result.notes]
    lines += ["", f"{ON} = on its family's accuracy-latency frontier: no other model of the family is at least "
              "as fast (p50) and at least as accurate (top-1), and strictly better in one.",
              "Weights are pseudo-trained (latency does not depend on them); accuracy was not measured here."]
    return lines


def to_markdown(result: FrontierResult) -> str:
    """The frontier as Markdown."""
    m, s = result.machine, result.settings
    out = ["# dcd-bench frontier", "",
           f"- measured on this machine, {m.date}; CPU: {m.cpu}",
           f"- backend {s['backend']}, threads {s['threads']}, batch 1, input {s['input_size']}x{s['input_size']}"
           + (" (--quick: not a measurement)" if s.get("quick") else ""),
           f"- top-1: {SOURCES['top1']}", f"- ms: {SOURCES['p50_ms']}", "",
           "| " + " | ".join(h for h, _, _ in _COLUMNS) + " |",
           "|" + "|".join("---:" if a == ">" else "---" for _, _, a in _COLUMNS) + "|"]
    out += ["| " + " | ".join(_cells(r)) + " |" for r in result.records]
    out += [""] + [f"- {line}" for line in frontier_summary(result) + coverage_lines(result)]
    out += [f"- not built: {r.name}: {r.reason}" for r in result.records if r.status != "ok"]
    out += ["", f"{ON} = on its family's frontier: no other model of the family is at least as fast and at "
            "least as accurate, and strictly better in one."]
    return "\n".join(out) + "\n"
