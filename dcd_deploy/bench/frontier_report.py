"""Printable forms of a :class:`~dcd_deploy.bench.frontier.FrontierResult`: terminal table,
Markdown and a PNG (top-1 against ms, each family's frontier drawn; matplotlib, optional).
"""

from __future__ import annotations

import io
from ._table import Column, markdown_table, number, text_table
from .frontier import SOURCES, FrontierRecord, FrontierResult

# Each frontier table column.
_COLUMNS = (
    Column("model", 25), Column("paper row", 18), Column("family", 11), Column("variant", 8),
    Column("top-1 %", 7, ">"), Column("p50 ms", 8, ">"), Column("p90 ms", 8, ">"), Column("runs", 5, ">"),
    Column("frontier", 8),
)
#: Marker of a row on its family's frontier.
ON = "*"
# Short point labels of the plot.
_SHORT = {"MobileNetV2": "MV2 ", "ResNet": ""}


def _cells(r: FrontierRecord) -> list[str]:
    frontier = ON if r.on_frontier else ("not built" if r.status != "ok" else "")
    return [r.name, r.label, r.family, r.variant, f"{r.top1:.1f}", number(r.p50_ms, ".2f"),
            number(r.p90_ms, ".2f"), number(r.n_runs, "d"), frontier]


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
    lines = header_lines(result) + [""] + text_table(_COLUMNS, [_cells(r) for r in result.records])
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
           f"- top-1: {SOURCES['top1']}", f"- ms: {SOURCES['p50_ms']}", ""]
    out += markdown_table(_COLUMNS, [_cells(r) for r in result.records])
    out += [""] + [f"- {line}" for line in frontier_summary(result) + coverage_lines(result)]
    out += [f"- not built: {r.name}: {r.reason}" for r in result.records if r.status != "ok"]
    out += ["", f"{ON} = on its family's frontier: no other model of the family is at least as fast and at "
            "least as accurate, and strictly better in one."]
    return "\n".join(out) + "\n"


def render_plot(result: FrontierResult) -> bytes:
    """PNG bytes: paper top-1 against measured p50 (log ms), one colour per family, each
    family's frontier drawn as a line, every point labelled."""
    from .report import require_matplotlib

    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(9.0, 6.0))
    timed = [r for r in result.records if r.p50_ms is not None]
    for k, family in enumerate(dict.fromkeys(r.family for r in timed)):
        pts = [r for r in timed if r.family == family]
        ax.scatter([r.p50_ms for r in pts], [r.top1 for r in pts], color=f"C{k}", label=family, zorder=3,
                   marker="o", facecolors=["none" if not r.on_frontier else f"C{k}" for r in pts])
        front = sorted(result.frontier(family), key=lambda r: r.p50_ms)
        ax.plot([r.p50_ms for r in front], [r.top1 for r in front], color=f"C{k}", linewidth=1.2,
                label=f"{family} frontier")
        for r in pts:
            ax.annotate(_SHORT.get(family, "") + r.label, (r.p50_ms, r.top1), fontsize=7,
                        xytext=(4, -3), textcoords="offset points")
    ax.set_xscale("log")  # times span two orders of magnitude (MobileNetV2 x0.35 to ResNet-50)
    ax.set_xlabel(f"p50 ms per image, measured here ({result.settings['backend']}, "
                  f"{result.settings['threads']} thread(s))")
    ax.set_ylabel("ImageNet top-1 % (the paper's Table 4, not measured here)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    m = result.machine
    quick = result.settings.get("quick")
    ax.set_title(("--quick: A SMOKE TEST, NOT A MEASUREMENT\n" if quick else "")
                 + f"accuracy-latency frontier: {m.cpu}, {m.date[:10]}; filled = on the frontier",
                 fontsize=9, color="red" if quick else "black")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
