"""Printable forms of a :class:`~dcd_deploy.bench.latency.BenchResult`: terminal table and
Markdown, each written atomically (the PNG: :mod:`dcd_deploy.bench.plot`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .._atomic import atomic_output
from ..errors import DCDDeployError
from ._backends import PAPER_BACKEND
from ._backends import backend as backend_spec
from ._backends import legend_lines as legend_lines_of
from ._latency_result import BenchResult, LatencyRecord, paper_ms
from ._table import DASH, Column, markdown_table, number, text_table
from .paper import PAPER_LATENCY_SETUP
from .profile import GROUP_LABELS, GROUPS

# Each latency table column (the backend heads its section).
_COLUMNS = (
    Column("model", 16),
    Column("variant", 7),
    Column("params M", 8, ">"),
    Column("MAdds M", 8, ">"),
    Column("mean ms", 8, ">"),
    Column("p50 ms", 8, ">"),
    Column("p90 ms", 8, ">"),
    Column("1st ms", 7, ">"),
    Column("runs", 5, ">"),
    Column("DCD/static [95% CI]", 20, ">"),
    Column("mean ratio", 10, ">"),
    Column("CPU ratio", 9, ">"),
    Column("paper ms", 8, ">"),
    Column("paper ratio", 11, ">"),
)
# The Markdown table's columns (every record in one table, the backend a column).
_MD_COLUMNS = tuple(
    Column(h, 0, "<" if i < 3 else ">")
    for i, h in enumerate(
        (
            "model",
            "variant",
            "backend",
            "params (M)",
            "MAdds (M)",
            "p50 ms",
            "p90 ms",
            "mean ms",
            "min ms",
            "first ms",
            "runs",
            "DCD/static [95% CI]",
            "mean ratio",
            "CPU ratio",
            "p10 ratio",
            "paper ms",
            "paper ratio",
        )
    )
)


# -- cells --------------------------------------------------------------------------------
def _channels(m) -> str:
    """``, 1 channel`` / ``, 4 channels`` beside the input size; nothing for RGB."""
    c = getattr(m, "channels", 3)
    return "" if c == 3 else f", {c} channel{'s' if c != 1 else ''}"


def _input_text(m) -> str:
    """``224x224``, ``256x320, 1 channel``, or the given inputs' names and shapes."""
    given = getattr(m, "inputs", None)
    return f"given ({given})" if given else f"{size_text(m.input_size)}{_channels(m)}"


def size_text(input_size) -> str:
    """``224x224`` for a side, ``256x320`` for an ``[H, W]`` pair (the JSON's ``input_size``)."""
    h, w = (input_size, input_size) if isinstance(input_size, int) else input_size
    return f"{h}x{w}"


def ratio_cell(r: LatencyRecord) -> str:
    """``1.95 [1.93-1.97]``, or a dash for a static model / no partner."""
    if r.ratio_to_static is None:
        return DASH
    if r.ratio_ci95:
        lo, hi = r.ratio_ci95
        return f"{r.ratio_to_static:.2f} [{lo:.2f}-{hi:.2f}]"
    return f"{r.ratio_to_static:.2f}"


def _cells(r: LatencyRecord) -> list[str]:
    # The paper's ms only beside the paper's conditions: other backends are other machines' worth of speed.
    paper = number(r.paper_ms, ".0f") if r.backend == PAPER_BACKEND else DASH
    return [
        r.model,
        r.variant,
        f"{r.params_m:.2f}",
        number(r.madds_m, ".1f"),
        f"{r.mean_ms:.2f}",
        f"{r.p50_ms:.2f}",
        f"{r.p90_ms:.2f}",
        f"{r.first_run_ms:.1f}",
        str(r.n_runs),
        ratio_cell(r),
        number(r.ratio_mean, ".3f"),
        number(r.ratio_cpu, ".2f"),
        paper,
        number(r.paper_ratio, ".3f"),
    ]


def _madds_note(result: BenchResult) -> str | None:
    forms = {r.madds_form for r in result.records}
    if "min" not in forms:
        return None
    return (
        "MAdds M: per image; a DCD model in the 'min' form (per DCD layer the cheaper of its latent "
        "and per-sample-weight forms, the paper's Table 4 convention, branch pooling adds included); "
        "eager torch runs the latent form: "
        + ", ".join(f"{r.name} {r.madds_latent_m:.1f}M" for r in _unique_models(result) if r.madds_form == "min")
    )


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
        f"{_input_text(m)}; per model and backend >= {s['runs']} runs and >= "
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
        return (
            f"warning: runs were preempted by other processes (wall p50 up to {100 * (worst - 1):.0f}% "
            f"over CPU p50; load {m.load_avg[0] if m.load_avg else '?'} on {m.cpus_usable} CPUs at "
            "start): a preemption lands in more runs of a longer model, so wall ratios read high; "
            "the CPU ratio leaves preemption out"
        )
    if loaded and not slow:
        return (
            f"warning: load {m.load_avg[0]:.2f} on {m.cpus_usable} CPUs at start: other processes "
            "compete for the CPUs; medians and ratios may read high (p10 ratio in JSON)"
        )
    return None


def legend_lines(result: BenchResult) -> list[str]:
    """The legend of the latency table (the backends in ``result`` only)."""
    lines = [
        "Legend:",
        "  p50 / p90 = median / 90th percentile of the timed runs, ms per batch; 1st = the first run (apart).",
        "  DCD/static = p50 of this variant / p50 of the static model of its pair on the same backend,",
        "    timed interleaved in this process; [a-b] = 95% interval, bootstrap over whole interleaved",
        "    rounds (per-round ratio quantiles and the p10 ratio in JSON); CPU ratio = the same with the",
        "    timing thread's CPU time (one thread only), which leaves out time it was preempted.",
        "  mean ratio = mean(DCD) / mean(static): the paper's protocol (it averaged 5,000 images).",
        "  backends:",
        *legend_lines_of(_backends(result)),
        f"  paper = Section 5.4: {PAPER_LATENCY_SETUP}; its ms are shown beside the paper's",
        "    conditions only, and even there compare ratios: another CPU and PyTorch of 2020.",
        "  params M = all parameters, millions.",
    ]
    note = _madds_note(result)
    if note:
        lines.append("  " + note)
    return lines


def _backends(result: BenchResult) -> list[str]:
    return list(dict.fromkeys(r.backend for r in result.records))


def _section_title(result: BenchResult, backend: str, step: int) -> str:
    """``step. backend: what it shows`` (with the run count of the paper's protocol)."""
    title = backend_spec(backend).title
    recs = [r for r in result.records if r.backend == backend]
    if backend == PAPER_BACKEND and recs:
        title += f"; mean of {min(r.n_runs for r in recs)}+ runs here, of 5,000 images in the paper"
        if not any(r.paper_conditions for r in recs):
            title += " (NOT at the paper's batch 1, 224x224)"
    return f"{step}. {backend}: {title}"


def format_table(result: BenchResult) -> list[str]:
    """Header, one section per backend (the paper's conditions first), the summary, notes
    and legend, as printable lines."""
    lines = header_lines(result)
    for step, backend in enumerate(_backends(result), 1):
        rows: list = []
        previous = None
        for r in (r for r in result.records if r.backend == backend):
            if previous is not None and r.model != previous:
                rows.append("")
            previous = r.model
            rows.append(_cells(r))
        lines += ["", _section_title(result, backend, step)] + text_table(_COLUMNS, rows)
    summary = summary_lines(result)
    if summary:
        lines += [""] + summary
    if result.notes:
        lines += [""] + [f"note: {n}" for n in result.notes]
    return lines + [""] + legend_lines(result)


def summary_lines(result: BenchResult) -> list[str]:
    """The story in a few lines: per pair and step, the static time, DCD's extra time and the ratio.

    The extra time of the DCD model (its dynamic branch: pooling, small FCs, per-sample
    products) shrinks less from step to step than the convolutions the static model is
    made of, so the ratio grows as the runtime gets faster.
    """
    backends = _backends(result)
    pairs = [(r.model, r.variant) for r in result.records if r.backend == backends[0] and r.ratio_to_static]
    if not pairs:
        return []
    has_paper = any(paper_ms(m, "static") for m, _ in pairs)
    columns = [Column("pair", 26)] + [Column(f"{i}. {b}", 26, ">") for i, b in enumerate(backends, 1)]
    columns += [Column("paper (EPYC 7551P)", 26, ">")] if has_paper else []
    rows = []
    for model, variant in pairs:
        row = [model + " " + variant]
        for b in backends:
            s, v = result.record(model, "static", b), result.record(model, variant, b)
            row.append(
                f"{s.p50_ms:.1f} + {v.p50_ms - s.p50_ms:.1f} = {v.ratio_to_static:.2f}"
                if s is not None and v is not None and v.ratio_to_static
                else DASH
            )
        ps, pv = paper_ms(model, "static"), paper_ms(model, variant)
        if has_paper:
            row.append(f"{ps:.0f} + {pv - ps:.0f} = {pv / ps:.3f}" if ps and pv else DASH)
        rows.append(row)
    return ["Summary: static p50 ms + DCD extra ms = ratio of medians, per step"] + text_table(
        columns, rows, rule=False
    )


# -- profile ------------------------------------------------------------------------------
def _profile_pairs(result: BenchResult):
    pairs: dict[tuple[str, str], list] = {}
    for p in result.profiles:
        pairs.setdefault((p.backend, p.model), []).append(p)
    for (backend, model), profs in sorted(pairs.items(), key=lambda kv: kv[0][0] != PAPER_BACKEND):
        profs.sort(key=lambda p: p.variant != "static")
        yield backend, model, profs


_PROFILE_TITLES = {
    "torch-paper": "PyTorch profile under the paper's conditions (oneDNN off): each op group's median time "
    "over {runs} runs (ms per run, % of the op total)",
    "onnxruntime": "ONNX Runtime profile: each node's median time over {runs} runs, summed per group "
    "(ms per run, % of the node total)",
    "openvino-fused": "OpenVINO profile (fused kernels): each node's median time over {runs} runs from the "
    "CPU plugin's counters, summed per group; the DCDPointwise nodes split by the op's own "
    "phase timers (pooling + branch, forming the operand, GEMM + epilogue)",
}


def format_profile_table(result: BenchResult) -> list[str]:
    """The ``--profile`` breakdown: ms and % per group, per variant, and the difference."""
    if not result.profiles:
        return []
    runs = result.settings.get("profile_runs")
    lines: list[str] = []
    shown = None
    for backend, model, profs in _profile_pairs(result):
        if backend != shown:
            lines += [_PROFILE_TITLES.get(backend, backend).format(runs=runs), ""]
            shown = backend
        lines += _profile_block(result, model, profs) + [""]
    lines += [
        "Groups: static convs/FCs = convs and FCs with constant weights (a DCD layer's W0 included, with",
        "  activations/adds ORT fused into them); dynamic branch = pooling, FCs and gate of the DCD branch;",
        "  latent path = Q conv, Φ·z, P conv; W(x) forming / W(x)·x = the per-sample weight form of a layer;",
        "  elementwise = unfused Add/Mul/Clip; layout/other = ORT's reorders, shape ops, head pooling.",
        "  torch-paper: every top-level torch call timed and grouped by what it reads (the branch's",
        "  weights or outputs, w0, q/p/r, the formed W(x)); the timer's own cost per call is in the",
        "  profiled run, not in the groups (dcd_deploy/bench/torch_profile.py).",
        "  Runs: the node total omits ORT's dispatch between nodes (a few µs per node: it grows with the",
        "  node count); profiling adds its own cost per node; and a sum of per-node medians is not the",
        "  median of run times on a noisy machine. Compare groups with each other, static vs DCD.",
        "  Both run rows time the same call (the Python binding's own work included), but the",
        "  profiled runs go one model after another, not interleaved: between two models the machine",
        "  may have changed speed, so compare the profiled runs of two models only loosely.",
    ]
    return lines


def _profile_block(result: BenchResult, model: str, profs: Sequence) -> list[str]:
    """One model's profile table: a row per group (ms, % per variant; each variant's
    difference to the static model), its top ops under it, then each run's notes."""
    static = profs[0] if profs[0].variant == "static" else None
    others = [p for p in profs if p is not static]
    columns = [Column("model", 16), Column("group", 24)]
    columns += [c for p in profs for c in (Column(p.variant + " ms", 10, ">"), Column("%", 6, ">"))]
    columns += [Column(p.variant + "-static", 13, ">") for p in others] if static is not None else []
    rows: list = []
    for i, (label, ms, pct, key) in enumerate(_profile_rows(result, profs)):
        cells = [model if i == 0 else "", label]
        for v, pc in zip(ms, pct):
            cells += [number(v, ".2f"), number(pc, ".1f") + ("%" if pc is not None else "")]
        if static is not None:
            cells += [
                number(None if ms[j] is None or ms[0] is None else ms[j] - ms[0], "+.2f")
                for j, p in enumerate(profs)
                if p is not static
            ]
        rows.append(cells)
        for p in others if key is not None else []:
            ops = p.breakdown.groups[key].ops
            if key != "static_conv" and len(ops) > 1 and p.breakdown.groups[key].ms > 0:
                top = ", ".join(f"{op} {v:.2f}" for op, v in list(ops.items())[:5])
                rows.append(f"{'':<16}   {p.variant} by op: {top}")
    for p in profs:
        b = p.breakdown
        forms = ", ".join(f"{n} {f}" for f, n in sorted(b.layer_forms.items()))
        extra = f"; dynamic layers: {forms}" if forms else ""
        unm = (
            (
                f"; {len(b.unmapped)} unmapped nodes ({b.unmapped_ms:.2f} ms, in layout/other): "
                f"{', '.join(b.unmapped[:3])}{' ...' if len(b.unmapped) > 3 else ''}"
            )
            if b.unmapped
            else ""
        )
        rows.append(f"{'':<16} {p.name}: {b.runs} runs{extra}{unm}")
    return text_table(columns, rows)


def _profile_rows(result: BenchResult, profs: Sequence) -> list[tuple]:
    """``(label, ms per variant, % per variant, group key or None)`` of each row."""
    rows = [
        (GROUP_LABELS[g], [p.breakdown.groups[g].ms for p in profs], [p.breakdown.groups[g].pct for p in profs], g)
        for g in GROUPS
    ]
    rows.append(("nodes total", [p.breakdown.nodes_ms for p in profs], [100.0] * len(profs), None))
    rows.append(("run, profiled (median)", [p.breakdown.wall_ms for p in profs], [None] * len(profs), None))
    timed = [result.record(p.model, p.variant, p.backend) for p in profs]
    if all(r is not None for r in timed):
        rows.append(("run, not profiled (p50)", [r.p50_ms for r in timed], [None] * len(profs), None))
    return rows


# -- markdown -----------------------------------------------------------------------------
def to_markdown(result: BenchResult) -> str:
    """The report as Markdown (header, latency table, notes, legend, profile)."""
    m = result.machine
    out = ["# dcd-bench latency", ""]
    out += [
        f"- measured on this machine, {m.date}",
        f"- CPU: {m.cpu}, {m.cores} cores ({m.cpus_usable} usable){_load(m)}",
        f"- torch {m.torch}, onnxruntime {m.onnxruntime or 'not installed'}"
        + (f", openvino {m.openvino}" if m.openvino else "")
        + f", dcd-deploy {m.dcd_deploy}",
        f"- threads {m.threads}, batch {m.batch}, input {_input_text(m)}",
        f"- per model and backend: >= {result.settings['runs']} runs and >= "
        f"{result.settings['min_time_s']:g} s, {result.settings['warmup']} warm-up runs, interleaved"
        + (" (--quick: not a measurement)" if result.settings.get("quick") else ""),
    ]
    busy = busy_warning(result)
    out += ([f"- {busy}"] if busy else []) + [""]
    out += markdown_table(
        _MD_COLUMNS,
        [
            [
                r.model,
                r.variant,
                r.backend,
                f"{r.params_m:.2f}",
                number(r.madds_m, ".1f"),
                f"{r.p50_ms:.2f}",
                f"{r.p90_ms:.2f}",
                f"{r.mean_ms:.2f}",
                f"{r.min_ms:.2f}",
                f"{r.first_run_ms:.1f}",
                str(r.n_runs),
                ratio_cell(r),
                number(r.ratio_mean, ".3f"),
                number(r.ratio_cpu, ".2f"),
                number(r.ratio_p10, ".2f"),
                number(r.paper_ms, ".0f") if r.backend == PAPER_BACKEND else DASH,
                number(r.paper_ratio, ".3f"),
            ]
            for r in result.records
        ],
    )
    summary = summary_lines(result)
    if summary:
        out += ["", "```", *summary, "```"]
    if result.notes:
        out += [""] + [f"- note: {n}" for n in result.notes]
    out += ["", *[line.replace("Legend:", "**Legend**") for line in legend_lines(result)]]
    prof = format_profile_table(result)
    if prof:
        out += ["", "## Profile (where the time goes)", "", "```", *prof, "```"]
    return "\n".join(out).rstrip() + "\n"


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
