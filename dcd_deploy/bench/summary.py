"""The benchmark's story in a few lines, read from the JSON documents it wrote.

Three questions, each answered from the documents alone (``dcd-bench summary out/``, the
last step of ``make demo``):

1. Is the paper's ratio reproduced? DCD/static on the ``torch-paper`` backend (eager
   PyTorch, deploy form, oneDNN off, one thread) beside the paper's 1.143 (x0.5) and
   1.116 (x1.0), from a latency document (``dcd-bench.latency/*``).
2. Which deployment of the DCD model is the fastest here, and what is its DCD/static
   ratio, beside the best ratio of the standard-op runtimes.
3. Where does DCD pay off? From a frontier document (``dcd-bench.frontier/*``): the DCD
   models on their family's accuracy-latency frontier, and for each one that is not, the
   model that is both faster and at least as accurate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ..errors import DCDDeployError

#: Schema prefix -> the key :func:`load_documents` files a document under.
KINDS = {"dcd-bench.latency/": "latency", "dcd-bench.frontier/": "frontier"}
#: Wall p50 over CPU p50 above which a run counts as preempted (as the latency report's warning).
PREEMPTED = 1.05
#: How the paper names the other dynamic convolutions of Table 4.
_VARIANT_NAMES = {"dyconv": "DY-Conv", "condconv": "CondConv"}
#: Backends that run the exported file with standard ops only (the fused kernels' baseline).
STANDARD_RUNTIMES = ("onnxruntime", "openvino")


def load_documents(paths: Iterable[Path]) -> dict[str, dict]:
    """The latency and frontier documents among ``paths`` (a directory: every ``*.json`` in it).

    A file named on its own must be one of them; in a directory, other JSON files are skipped.

    Raises:
        DCDDeployError: a file that is not JSON, or a named file of another kind.
    """
    docs: dict[str, dict] = {}
    for path in paths:
        files, named = (sorted(path.glob("*.json")), False) if path.is_dir() else ([path], True)
        for file in files:
            try:
                doc = json.loads(file.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise DCDDeployError(f"{file}: not a JSON document ({exc})") from None
            schema = doc.get("schema", "") if isinstance(doc, dict) else ""
            kind = next((k for prefix, k in KINDS.items() if str(schema).startswith(prefix)), None)
            if kind is not None:
                docs[kind] = doc
            elif named:
                raise DCDDeployError(f"{file}: not a dcd-bench latency or frontier document (schema {schema!r})")
    if not docs:
        raise DCDDeployError("no dcd-bench latency or frontier JSON found in " + ", ".join(map(str, paths)))
    return docs


def story_lines(docs: dict[str, dict]) -> list[str]:
    """The summary: a title, then the answers the documents hold (see the module docstring)."""
    lines = ["Summary"]
    latency = docs.get("latency")
    if latency is not None:
        lines += paper_lines(latency) + fastest_lines(latency) + preempted_lines(latency)
    if docs.get("frontier") is not None:
        lines += payoff_lines(docs["frontier"])
    return lines


def _pairs(records: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["model"] for r in records if r.get("ratio_to_static")))


def _ratio(r: dict) -> str:
    ci = r.get("ratio_ci95")
    return f"{r['ratio_to_static']:.2f}" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")


def paper_lines(doc: dict) -> list[str]:
    """DCD/static under the paper's conditions beside the paper's ratio, per pair."""
    recs = [r for r in doc["records"] if r["backend"] == "torch-paper" and r.get("ratio_to_static")]
    if not recs:
        return ["- the paper's ratio: not measured (no torch-paper backend in this run)"]
    cells = [
        f"    {r['model']} {r['variant']}: {_ratio(r)}"
        + (f" (CPU time {r['ratio_cpu']:.2f})" if r.get("ratio_cpu") else "")
        + (f", the paper {r['paper_ratio']:.3f}" if r.get("paper_ratio") else "")
        for r in recs
    ]
    where = (
        "the paper's conditions" if all(r.get("paper_conditions") for r in recs) else "NOT the paper's batch 1, 224x224"
    )
    return [f"- the paper's ratio, DCD/static p50 [95% CI] ({where}: eager PyTorch, oneDNN off, 1 thread):"] + cells


def fastest_lines(doc: dict) -> list[str]:
    """Per pair: the backend where the DCD model is fastest, its ms and ratio, and the best
    ratio of the standard-op runtimes beside it."""
    records = doc["records"]
    lines = ["- the fastest DCD deployment, per pair (DCD/static p50 [95% CI]):"]
    for model in _pairs(records):
        dcd = [r for r in records if r["model"] == model and r.get("ratio_to_static")]
        best = min(dcd, key=lambda r: r["p50_ms"])
        static = next(
            (
                r
                for r in records
                if r["model"] == model and r["variant"] == "static" and r["backend"] == best["backend"]
            ),
            None,
        )
        line = (
            f"    {model} {best['variant']}: {best['backend']} {best['p50_ms']:.2f} ms"
            + (f" vs static {static['p50_ms']:.2f} ms" if static else "")
            + f" = {_ratio(best)}"
        )
        standard = [r for r in dcd if r["backend"] in STANDARD_RUNTIMES and r is not best]
        if standard:
            s = min(standard, key=lambda r: r["ratio_to_static"])
            line += f"; standard ops at best {s['ratio_to_static']:.2f} ({s['backend']})"
        lines.append(line)
    return lines if len(lines) > 1 else []


def payoff_lines(doc: dict) -> list[str]:
    """Per family: the DCD models on its frontier, and what beats each one that is not."""
    backend = doc.get("settings", {}).get("backend", "?")
    timed = [r for r in doc["records"] if r.get("p50_ms") is not None]
    lines = [f"- where DCD pays off: the accuracy-latency frontier of Table 4 on {backend} (ms, the paper's top-1):"]
    for family in dict.fromkeys(r["family"] for r in timed):
        members = [r for r in timed if r["family"] == family]
        dcd = [r for r in members if r["variant"] == "dcd"]
        if not dcd:
            continue
        on = [f"{r['label']} ({r['p50_ms']:.1f} ms, {r['top1']:.1f}%)" for r in dcd if r["on_frontier"]]
        off = []
        for r in (r for r in dcd if not r["on_frontier"]):
            better = [o for o in members if o is not r and o["p50_ms"] <= r["p50_ms"] and o["top1"] >= r["top1"]]
            by = min(better, key=lambda o: o["p50_ms"], default=None)
            off.append(
                f"{r['label']} ({r['p50_ms']:.1f} ms, {r['top1']:.1f}%"
                + (f"; {by['label']} is {by['p50_ms']:.1f} ms, {by['top1']:.1f}%)" if by else ")")
            )
        beaten = []
        for r in (r for r in members if r["variant"] == "static" and not r["on_frontier"]):
            by = min(
                (d for d in dcd if d["p50_ms"] <= r["p50_ms"] and d["top1"] >= r["top1"]),
                key=lambda d: d["p50_ms"],
                default=None,
            )
            if by is not None:
                beaten.append(f"{by['label']} beats {r['label']} ({r['p50_ms']:.1f} ms, {r['top1']:.1f}%)")
        others = sorted({r["variant"] for r in members if r["variant"] not in ("static", "dcd")})
        others_on = [r["label"] for r in members if r["variant"] in others and r["on_frontier"]]
        text = f"    {family}: DCD on the frontier: {', '.join(on) or 'none'}"
        text += f"; off it: {', '.join(off)}" if off else ""
        text += f"; {', '.join(beaten)}" if beaten else ""
        if others:
            names = " and ".join(_VARIANT_NAMES.get(v, v) for v in others)
            text += f"; {names} on it: {', '.join(others_on) or 'none'}"
        lines.append(text)
    return lines if len(lines) > 1 else []


def preempted_lines(doc: dict) -> list[str]:
    """A warning when other processes took the CPU from the timed runs (wall p50 well over
    the thread's CPU p50): wall ratios then read high, the CPU-time ratio less so."""
    slow = [r["p50_ms"] / r["cpu_p50_ms"] for r in doc["records"] if r.get("cpu_p50_ms")]
    worst = max(slow, default=1.0)
    if worst <= PREEMPTED:
        return []
    return [
        f"- warning: other processes took the CPU during the timing (wall p50 up to {100 * (worst - 1):.0f}% "
        "over CPU p50): ratios read high; compare the CPU-time ratios, or rerun on a quiet machine"
    ]
