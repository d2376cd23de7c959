"""Printable forms of a :class:`~dcd_deploy.bench.latency.BenchResult`: terminal table,
Markdown, and a PNG of grouped bars (matplotlib, an optional extra), each written atomically.
"""

from __future__ import annotations

import io
import os
from typing import Sequence

from .._atomic import atomic_output
from ..errors import DCDDeployError
from .latency import BenchResult, LatencyRecord
from .paper import PAPER_LATENCY_SETUP
from .profile import GROUP_LABELS, GROUPS

#: Message when ``--plot`` is asked for without matplotlib.
MATPLOTLIB_MISSING = ("--plot needs matplotlib, which is not installed: pip install matplotlib "
                      "(or pip install 'dcd-deploy[plot]')")

_DASH = "-"
# (header, width, alignment) of each latency table column.
_COLUMNS = (
    ("model", 16, "<"), ("variant", 7, "<"), ("backend", 12, "<"), ("params M", 8, ">"),
    ("MAdds M", 8, ">"), ("p50 ms", 8, ">"), ("p90 ms", 8, ">"), ("1st ms", 8, ">"), ("runs", 5, ">"),
    ("DCD/static [95% CI]", 20, ">"), ("CPU ratio", 9, ">"), ("paper ms", 8, ">"), ("paper ratio", 11, ">"),
)


# -- cells --------------------------------------------------------------------------------
def _num(value: float | None, fmt: str) -> str:
    return _DASH if value is None else format(value, fmt)


def ratio_cell(r: LatencyRecord) -> str:
    """``1.95 [1.93-1.97]``, or a dash for a static model / no partner."""
    if r.ratio_to_static is None:
        return _DASH
    if r.ratio_ci95:
        lo, hi = r.ratio_ci95
        return f"{r.ratio_to_static:.2f} [{lo:.2f}-{hi:.2f}]"
    return f"{r.ratio_to_static:.2f}"


def _cells(r: LatencyRecord) -> list[str]:
    return [r.model, r.variant, r.backend, f"{r.params_m:.2f}", _num(r.madds_m, ".1f"), f"{r.p50_ms:.2f}",
            f"{r.p90_ms:.2f}", f"{r.first_run_ms:.1f}", str(r.n_runs), ratio_cell(r),
            _num(r.ratio_cpu, ".2f"), _num(r.paper_ms, ".0f"), _num(r.paper_ratio, ".3f")]


def _line(cells: Sequence[str]) -> str:
    return " ".join(f"{c:{a}{w}}" for c, (_, w, a) in zip(cells, _COLUMNS)).rstrip()


def _madds_note(result: BenchResult) -> str | None:
    forms = {r.madds_form for r in result.records}
    if "min" not in forms:
        return None
    return ("MAdds M: per image; a DCD model in the 'min' form (per DCD layer the cheaper of its latent "
            "and per-sample-weight forms, the paper's Table 4 convention, branch pooling adds included); "
            "eager torch runs the latent form: " + ", ".join(
                f"{r.name} {r.madds_latent_m:.1f}M" for r in _unique_models(result) if r.madds_form == "min"))


def _unique_models(result: BenchResult) -> list[LatencyRecord]:
    seen, out = set(), []
    for r in result.records:
        if r.name not in seen:
            seen.add(r.name)
            out.append(r)
    return out


def _load(m) -> str:
    return f", load {m.load_avg[0]:.2f} at start" if m.load_avg else ""


def header_lines(result: BenchResult) -> list[str]:
    m, s = result.machine, result.settings
    versions = f"torch {m.torch}, onnxruntime {m.onnxruntime or 'not installed'}"
    if m.openvino:
        versions += f", openvino {m.openvino}"
    lines = [
        f"dcd-bench latency, measured on this machine {m.date} (the ratio is the result; absolute times "
        "are a snapshot)",
        f"CPU {m.cpu}, {m.cores} cores ({m.cpus_usable} usable){_load(m)}; {versions}; dcd-deploy {m.dcd_deploy}",
        f"threads {m.threads} (torch inter-op {m.torch_interop_threads}), batch {m.batch}, input "
        f"{m.input_size}x{m.input_size}; per model and backend >= {s['runs']} runs and >= "
        f"{s['min_time_s']:g} s after {s['warmup']} warm-up runs, models interleaved"
        + (" (--quick: a smoke test, not a measurement)" if s.get("quick") else ""),
    ]
    busy = busy_warning(result)
    if busy:
        lines.append(busy)
    return lines


#: Wall p50 over CPU p50 above which a record counts as preempted.
PREEMPTED_RATIO = 1.05


def busy_warning(result: BenchResult) -> str | None:
    """A warning when other processes took the CPU from the benchmark."""
    m = result.machine
    slow = [r.p50_ms / r.cpu_p50_ms for r in result.records if r.cpu_p50_ms]
    worst = max(slow, default=1.0)
    loaded = bool(m.load_avg) and m.load_avg[0] + m.threads > m.cpus_usable
    if worst > PREEMPTED_RATIO:
        return (f"warning: runs were preempted by other processes (wall p50 up to {100 * (worst - 1):.0f}% "
                f"over CPU p50; load {m.load_avg[0] if m.load_avg else '?'} on {m.cpus_usable} CPUs at "
                "start): a preemption lands in more runs of a longer model, so wall ratios read high; "
                "the CPU ratio leaves preemption out")
    if loaded and not slow:
        return (f"warning: load {m.load_avg[0]:.2f} on {m.cpus_usable} CPUs at start: other processes "
                "compete for the CPUs; medians and ratios may read high (p10 ratio in JSON)")
    return None


def legend_lines(result: BenchResult) -> list[str]:
    lines = [
        "Legend:",
        "  p50 / p90 = median / 90th percentile of the timed runs, ms per batch; 1st = the first run (apart).",
        "  DCD/static = p50 of this variant / p50 of the static model of its pair on the same backend,",
        "    timed interleaved in this process; [a-b] = 95% interval, bootstrap over whole interleaved",
        "    rounds (per-round ratio quantiles and the p10 ratio in JSON); CPU ratio = the same with the",
        "    timing thread's CPU time (one thread only), which leaves out time it was preempted.",
        "  backends: torch = eager PyTorch, training form (as the paper timed); torch-deploy = the",
        "    to_deploy form (BNs folded, DCD layers per-layer latent/weight); onnxruntime = the file",
        "    export_onnx writes (strategy auto, standard mode, dynamic batch), one session per model.",
        f"  paper = Section 5.4: {PAPER_LATENCY_SETUP}; compare ratios, not ms.",
        "  params M = all parameters, millions.",
    ]
    note = _madds_note(result)
    if note:
        lines.append("  " + note)
    return lines


def format_table(result: BenchResult) -> list[str]:
    """Header, table, notes and legend as printable lines."""
    lines = header_lines(result) + ["", _line([h for h, _, _ in _COLUMNS]),
                                    "-" * (sum(w for _, w, _ in _COLUMNS) + len(_COLUMNS) - 1)]
    previous = None
    for r in result.records:
        if previous is not None and (r.model, r.backend) != previous:
            lines.append("")
        previous = (r.model, r.backend)
        lines.append(_line(_cells(r)))
    if result.notes:
        lines += [""] + [f"note: {n}" for n in result.notes]
    return lines + [""] + legend_lines(result)


# -- profile ------------------------------------------------------------------------------
def _profile_pairs(result: BenchResult):
    pairs: dict[str, list] = {}
    for p in result.profiles:
        pairs.setdefault(p.model, []).append(p)
    for model, profs in pairs.items():
        profs.sort(key=lambda p: p.variant != "static")
        yield model, profs


def format_profile_table(result: BenchResult) -> list[str]:
    """The ``--profile`` breakdown: ms and % per group, per variant, and the difference."""
    if not result.profiles:
        return []
    runs = result.settings.get("profile_runs")
    lines = [f"ONNX Runtime profile: each node's median time over {runs} runs, summed per group "
             "(ms per run, % of the node total)", ""]
    for model, profs in _profile_pairs(result):
        static = profs[0] if profs[0].variant == "static" else None
        others = [p for p in profs if p is not static]
        head = f"{'model':<16} {'group':<24}" + "".join(f" {p.variant + ' ms':>10} {'%':>6}" for p in profs)
        if static is not None:
            head += "".join(f" {p.variant + '-static':>13}" for p in others)
        lines += [head, "-" * len(head)]
        rows = [(GROUP_LABELS[g], [p.breakdown.groups[g].ms for p in profs],
                 [p.breakdown.groups[g].pct for p in profs], g) for g in GROUPS]
        rows.append(("nodes total", [p.breakdown.nodes_ms for p in profs], [100.0] * len(profs), None))
        rows.append(("run, profiled (median)", [p.breakdown.wall_ms for p in profs], [None] * len(profs), None))
        timed = [result.record(p.model, p.variant, "onnxruntime") for p in profs]
        if all(r is not None for r in timed):
            rows.append(("run, not profiled (p50)", [r.p50_ms for r in timed], [None] * len(profs), None))
        for i, (label, ms, pct, key) in enumerate(rows):
            cells = f"{model if i == 0 else '':<16} {label:<24}"
            for v, pc in zip(ms, pct):
                cells += f" {_num(v, '.2f'):>10} {_num(pc, '.1f') + ('%' if pc is not None else ''):>6}"
            if static is not None:
                for j, p in enumerate(profs):
                    if p is static:
                        continue
                    d = None if ms[j] is None or ms[0] is None else ms[j] - ms[0]
                    cells += f" {_num(d, '+.2f'):>13}"
            lines.append(cells.rstrip())
            if key is not None:
                for p in others:
                    ops = p.breakdown.groups[key].ops
                    if key != "static_conv" and len(ops) > 1 and p.breakdown.groups[key].ms > 0:
                        top = ", ".join(f"{op} {v:.2f}" for op, v in list(ops.items())[:5])
                        lines.append(f"{'':<16}   {p.variant} by op: {top}")
        for p in profs:
            b = p.breakdown
            forms = ", ".join(f"{n} {f}" for f, n in sorted(b.layer_forms.items()))
            extra = f"; dynamic layers: {forms}" if forms else ""
            unm = (f"; {len(b.unmapped)} unmapped nodes ({b.unmapped_ms:.2f} ms, in layout/other): "
                   f"{', '.join(b.unmapped[:3])}{' ...' if len(b.unmapped) > 3 else ''}") if b.unmapped else ""
            lines.append(f"{'':<16} {p.name}: {b.runs} runs{extra}{unm}")
        lines.append("")
    lines += [
        "Groups: static convs/FCs = convs and FCs with constant weights (a DCD layer's W0 included, with",
        "  activations/adds ORT fused into them); dynamic branch = pooling, FCs and gate of the DCD branch;",
        "  latent path = Q conv, Φ·z, P conv; W(x) forming / W(x)·x = the per-sample weight form of a layer;",
        "  elementwise = unfused Add/Mul/Clip; layout/other = ORT's reorders, shape ops, head pooling.",
        "  Runs: the node total omits ORT's dispatch between nodes (a few µs per node: it grows with the",
        "  node count); profiling adds its own cost per node; and a sum of per-node medians is not the",
        "  median of run times on a noisy machine. Compare groups with each other, static vs DCD.",
    ]
    return lines


# -- markdown -----------------------------------------------------------------------------
def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def to_markdown(result: BenchResult) -> str:
    """The report as Markdown (header, latency table, notes, legend, profile)."""
    m = result.machine
    out = ["# dcd-bench latency", ""]
    out += [f"- measured on this machine, {m.date}",
            f"- CPU: {m.cpu}, {m.cores} cores ({m.cpus_usable} usable){_load(m)}",
            f"- torch {m.torch}, onnxruntime {m.onnxruntime or 'not installed'}"
            + (f", openvino {m.openvino}" if m.openvino else "") + f", dcd-deploy {m.dcd_deploy}",
            f"- threads {m.threads}, batch {m.batch}, input {m.input_size}x{m.input_size}",
            f"- per model and backend: >= {result.settings['runs']} runs and >= "
            f"{result.settings['min_time_s']:g} s, {result.settings['warmup']} warm-up runs, interleaved"
            + (" (--quick: not a measurement)" if result.settings.get("quick") else "")]
    busy = busy_warning(result)
    out += ([f"- {busy}"] if busy else []) + [""]
    heads = ["model", "variant", "backend", "params (M)", "MAdds (M)", "p50 ms", "p90 ms", "mean ms",
             "min ms", "first ms", "runs", "DCD/static [95% CI]", "CPU ratio", "p10 ratio", "paper ms", "paper ratio"]
    out += [_md_row(heads), "|" + "|".join("---" if i < 3 else "---:" for i in range(len(heads))) + "|"]
    for r in result.records:
        out.append(_md_row([r.model, r.variant, r.backend, f"{r.params_m:.2f}", _num(r.madds_m, ".1f"),
                            f"{r.p50_ms:.2f}", f"{r.p90_ms:.2f}", f"{r.mean_ms:.2f}", f"{r.min_ms:.2f}",
                            f"{r.first_run_ms:.1f}", str(r.n_runs), ratio_cell(r), _num(r.ratio_cpu, ".2f"),
                            _num(r.ratio_p10, ".2f"),
                            _num(r.paper_ms, ".0f"), _num(r.paper_ratio, ".3f")]))
    if result.notes:
        out += [""] + [f"- note: {n}" for n in result.notes]
    out += ["", *[line.replace("Legend:", "**Legend**") for line in legend_lines(result)]]
    prof = format_profile_table(result)
    if prof:
        out += ["", "## ONNX Runtime profile", "", "```", *prof, "```"]
    return "\n".join(out).rstrip() + "\n"


# -- plot ---------------------------------------------------------------------------------
def require_matplotlib():
    """Import matplotlib (Agg backend) or raise :class:`DCDDeployError` saying how to get it."""
    try:
        import matplotlib
    except ImportError:
        raise DCDDeployError(MATPLOTLIB_MISSING) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def render_plot(result: BenchResult) -> bytes:
    """PNG bytes: per model pair, grouped latency bars (p50, whisker to p90) per backend with
    the paper's beside (top row), and the DCD/static ratios with their 95% intervals beside
    the paper's ratio (bottom row)."""
    plt = require_matplotlib()
    pairs = list(dict.fromkeys(r.model for r in result.records))
    backends = list(dict.fromkeys(r.backend for r in result.records))
    fig, axes = plt.subplots(2, len(pairs), figsize=(max(6.0, 5.5 * len(pairs)), 8.0), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    for col, model in enumerate(pairs):
        ax, rax = axes[0][col], axes[1][col]
        recs = [r for r in result.records if r.model == model]
        variants = list(dict.fromkeys(r.variant for r in recs))
        paper = {r.variant: r.paper_ms for r in recs if r.paper_ms is not None}
        groups = list(backends) + (["paper"] if paper else [])
        ticks = [g if g != "paper" else "paper\n(EPYC 7551P)" for g in groups]
        width = 0.8 / max(1, len(variants))
        for j, variant in enumerate(variants):
            for i, g in enumerate(groups):
                x = i + (j - (len(variants) - 1) / 2) * width
                if g == "paper":
                    if variant not in paper:
                        continue
                    y, top = paper[variant], None
                else:
                    rec = next((r for r in recs if r.variant == variant and r.backend == g), None)
                    if rec is None:
                        continue
                    y, top = rec.p50_ms, rec.p90_ms
                ax.bar([x], [y], width, color=f"C{j}", label=variant if i == 0 else None)
                if top is not None:
                    ax.errorbar([x], [y], yerr=[[0], [top - y]], fmt="none", ecolor="black", capsize=3)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(ticks, fontsize=8)
        ax.set_title(model)
        ax.set_ylabel("ms per batch (p50; whisker p90)")
        ax.legend(fontsize=8)
        # Ratios: the result.
        xs, ys, lo, hi, labels = [], [], [], [], []
        for i, g in enumerate(groups):
            if g == "paper":
                rec = next((r for r in recs if r.paper_ratio), None)
                if rec is None:
                    continue
                y, (a, b) = rec.paper_ratio, (rec.paper_ratio, rec.paper_ratio)
            else:
                rec = next((r for r in recs if r.backend == g and r.ratio_to_static), None)
                if rec is None:
                    continue
                y = rec.ratio_to_static
                a, b = rec.ratio_ci95 or (y, y)
            xs.append(i)
            ys.append(y)
            lo.append(y - a)
            hi.append(b - y)
            labels.append(f"{y:.2f}")
        if xs:
            bars = rax.bar(xs, ys, 0.5, color=["C2" if groups[x] != "paper" else "C7" for x in xs])
            rax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor="black", capsize=3)
            for bar, label, up in zip(bars, labels, hi):
                rax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height() + up),
                             ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
            rax.axhline(1.0, color="grey", linewidth=0.8)
            rax.set_ylim(0, max(y + h for y, h in zip(ys, hi)) * 1.2)
        rax.set_xticks(range(len(groups)))
        rax.set_xticklabels(ticks, fontsize=8)
        rax.set_ylabel("DCD / static (p50; 95% CI)")
    m = result.machine
    fig.suptitle(f"dcd-bench: {m.cpu}, {m.threads} thread(s), batch {m.batch}, {m.input_size}x{m.input_size}, "
                 f"{m.date[:10]}; paper: {PAPER_LATENCY_SETUP}", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


# -- files --------------------------------------------------------------------------------
def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, with :func:`~dcd_deploy._atomic.atomic_output`'s
    guarantees (only a regular file is replaced, symlinks are written through, an existing
    file keeps its mode).

    Raises:
        DCDDeployError: the file cannot be written.
    """
    with atomic_output(path) as tmp:
        try:
            tmp.write_bytes(data)
        except OSError as exc:
            raise DCDDeployError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_markdown(result: BenchResult, path: str | os.PathLike) -> None:
    write_text_atomic(path, to_markdown(result))


def write_plot(result: BenchResult, path: str | os.PathLike) -> None:
    write_bytes_atomic(path, render_plot(result))
