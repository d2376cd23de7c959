"""The benchmark's PNGs (matplotlib, an optional extra: ``pip install 'dcd-deploy[plot]'``).

:func:`render_latency_plot` draws a :class:`~dcd_deploy.bench.latency.BenchResult`,
:func:`render_frontier_plot` a :class:`~dcd_deploy.bench.frontier.FrontierResult`; both
return PNG bytes for the caller to write atomically.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

from ..errors import DCDDeployError
from .frontier import FrontierResult
from .latency import BenchResult, LatencyRecord
from .paper import PAPER_LATENCY_SETUP
from .report import size_text

#: Message when ``--plot`` is asked for without matplotlib.
MATPLOTLIB_MISSING = (
    "--plot needs matplotlib, which is not installed: pip install matplotlib (or pip install 'dcd-deploy[plot]')"
)
# Short point labels of the frontier plot.
_SHORT = {"MobileNetV2": "MV2 ", "ResNet": ""}


def require_matplotlib():
    """Import matplotlib (Agg backend) or raise :class:`DCDDeployError` saying how to get it."""
    try:
        import matplotlib
    except ImportError:
        raise DCDDeployError(MATPLOTLIB_MISSING) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _short_model(model: str) -> str:
    """``mobilenetv2_035`` -> ``MV2 x0.35``, ``mobilenetv2_100`` -> ``MV2 x1.0``; other names as they are."""
    match = re.fullmatch(r"mobilenetv2_(\d{3})", model)
    if match is None:
        return model
    width = f"{int(match.group(1)) / 100:g}"
    return f"MV2 x{width if '.' in width else width + '.0'}"


def _plot_ms(ax, recs: Sequence[LatencyRecord], pairs: Sequence[str], backend: str) -> None:
    """One backend: our p50 bars (whisker to p90) per model pair and variant, each labelled
    with its ms, on this backend's own scale (the paper's conditions run 10x slower than a
    runtime: on a shared axis the runtimes' bars would be slivers). The paper's ms are not
    drawn: another CPU and PyTorch of 2020 on the same axis would read as a comparison."""
    variants = list(dict.fromkeys(r.variant for r in recs))
    width = 0.8 / max(1, len(variants))
    for j, variant in enumerate(variants):
        for i, model in enumerate(pairs):
            rec = next((r for r in recs if r.variant == variant and r.model == model and r.backend == backend), None)
            if rec is None:
                continue
            x = i + (j - (len(variants) - 1) / 2) * width
            ax.bar([x], [rec.p50_ms], width, color=f"C{j}", label=variant if i == 0 else None)
            ax.errorbar(
                [x],
                [rec.p50_ms],
                yerr=[[0], [rec.p90_ms - rec.p50_ms]],
                fmt="none",
                ecolor="black",
                capsize=3,
                linewidth=0.8,
            )
            ax.annotate(
                f"{rec.p50_ms:.1f}",
                (x, rec.p50_ms / 2),
                ha="center",
                va="center",
                fontsize=7,
                color="white",
                rotation=90,
            )
    ax.set_xticks(range(len(pairs)))
    ax.set_xticklabels([_short_model(m) for m in pairs], fontsize=7)
    ax.set_title(backend + ("\n(the paper's conditions)" if backend == "torch-paper" else ""), fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.05)


def _plot_ratios(rax, recs: Sequence[LatencyRecord], backends: Sequence[str]) -> None:
    """Our DCD/static ratios (95% CI) per backend and the paper's beside, on one y-scale."""
    groups = list(backends) + ["paper"]
    xs, ys, lo, hi = [], [], [], []
    for i, g in enumerate(groups):
        if g == "paper":
            rec = next((r for r in recs if r.paper_ratio), None)
            y, (a, b) = (rec.paper_ratio, (rec.paper_ratio, rec.paper_ratio)) if rec else (None, (0, 0))
        else:
            rec = next((r for r in recs if r.backend == g and r.ratio_to_static), None)
            y = rec.ratio_to_static if rec else None
            a, b = (rec.ratio_ci95 or (y, y)) if rec else (0, 0)
        if y is not None:
            xs.append(i)
            ys.append(y)
            lo.append(y - a)
            hi.append(b - y)
    if xs:
        bars = rax.bar(xs, ys, 0.5, color=["C2" if groups[x] != "paper" else "C7" for x in xs])
        rax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor="black", capsize=3)
        for bar, y, up in zip(bars, ys, hi):
            rax.annotate(
                f"{y:.2f}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height() + up),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
        rax.axhline(1.0, color="grey", linewidth=0.8)
        # a wide interval (a --quick run) must not flatten the bars: it is cut at twice the largest ratio
        rax.set_ylim(0, min(max(y + h for y, h in zip(ys, hi)) * 1.2, 2 * max(ys)))
    rax.set_xticks(range(len(groups)))
    rax.set_xticklabels([g if g != "paper" else "paper\n(EPYC 7551P)" for g in groups], fontsize=8)
    rax.set_ylabel("DCD / static (p50; 95% CI)")


def render_latency_plot(result: BenchResult) -> bytes:
    """PNG bytes. Top row: one panel per backend, each on its own ms scale, with every model
    pair's p50 bars (whisker to p90). Bottom row: per pair, the DCD/static ratios with their
    95% intervals on every backend beside the paper's ratio, on one scale (the ratio is the
    result). A ``--quick`` run is marked on the figure."""
    plt = require_matplotlib()
    pairs = list(dict.fromkeys(r.model for r in result.records))
    backends = list(dict.fromkeys(r.backend for r in result.records))
    fig = plt.figure(figsize=(max(8.0, 2.3 * len(backends), 5.0 * len(pairs)), 8.0), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1, 1])
    ms_axes = top.subplots(1, len(backends), squeeze=False)[0]
    for ax, backend in zip(ms_axes, backends):
        _plot_ms(ax, result.records, pairs, backend)
    ms_axes[0].set_ylabel("ms per batch (p50; whisker p90)\neach panel its own scale", fontsize=8)
    ms_axes[-1].legend(fontsize=7, loc="upper right")
    for ax, model in zip(bottom.subplots(1, len(pairs), squeeze=False)[0], pairs):
        _plot_ratios(ax, [r for r in result.records if r.model == model], backends)
        ax.set_title(f"{model}: DCD / static", fontsize=9)
    m = result.machine
    quick = result.settings.get("quick")
    fig.suptitle(
        ("--quick: A SMOKE TEST, NOT A MEASUREMENT\n" if quick else "")
        + f"dcd-bench: {m.cpu}, {m.threads} thread(s), batch {m.batch}, {size_text(m.input_size)}, "
        f"{m.date[:10]}; paper: {PAPER_LATENCY_SETUP}",
        fontsize=8,
        color="red" if quick else "black",
    )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def render_frontier_plot(result: FrontierResult) -> bytes:
    """PNG bytes: paper top-1 against measured p50 (log ms), one colour per family, each
    family's frontier drawn as a line, every point labelled."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(9.0, 6.0))
    timed = [r for r in result.records if r.p50_ms is not None]
    for k, family in enumerate(dict.fromkeys(r.family for r in timed)):
        pts = [r for r in timed if r.family == family]
        ax.scatter(
            [r.p50_ms for r in pts],
            [r.top1 for r in pts],
            color=f"C{k}",
            label=family,
            zorder=3,
            marker="o",
            facecolors=["none" if not r.on_frontier else f"C{k}" for r in pts],
        )
        front = sorted(result.frontier(family), key=lambda r: r.p50_ms)
        ax.plot(
            [r.p50_ms for r in front], [r.top1 for r in front], color=f"C{k}", linewidth=1.2, label=f"{family} frontier"
        )
        for r in pts:
            ax.annotate(
                _SHORT.get(family, "") + r.label,
                (r.p50_ms, r.top1),
                fontsize=7,
                xytext=(4, -3),
                textcoords="offset points",
            )
    ax.set_xscale("log")  # times span two orders of magnitude (MobileNetV2 x0.35 to ResNet-50)
    from matplotlib.ticker import LogLocator, ScalarFormatter

    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # 1, 2, 5, 10, 20, 50 ms ... read as numbers
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel(
        f"p50 ms per image, measured here ({result.settings['backend']}, {result.settings['threads']} thread(s))"
    )
    ax.set_ylabel("ImageNet top-1 % (the paper's Table 4, not measured here)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    m = result.machine
    quick = result.settings.get("quick")
    ax.set_title(
        ("--quick: A SMOKE TEST, NOT A MEASUREMENT\n" if quick else "")
        + f"accuracy-latency frontier on {result.settings['backend']}: {m.cpu}, {m.date[:10]}; "
        "filled = on the frontier",
        fontsize=9,
        color="red" if quick else "black",
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
