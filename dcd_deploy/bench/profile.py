"""Where the time goes: ONNX Runtime's per-node profile, grouped by what each node does.

:func:`profile_onnx` runs an exported model with ``SessionOptions.enable_profiling``
and hands the trace to :func:`group_trace`, which maps every timed node back to the
exported graph and sums the per-node times into the groups below. Each node's time is
its median over the profiled runs (warm-up runs dropped), so one preempted run does not
move a group.

Groups (:data:`GROUPS`; "dynamic layer" = a DCD, DY-Conv or CondConv layer, found by
its branch weights ``<path>.fc1`` etc. in the exported graph):

==================  ================================================================
static_conv         Conv/Gemm/MatMul with constant weights outside dynamic layers, and
                    a dynamic layer's static product (the conv or FC reading ``.w0``;
                    DY-Conv/CondConv's stacked-kernel conv); activations or residual
                    adds ORT fused into such a conv count with it
dynamic_branch      in a dynamic layer: the pooling, the FCs (``.fc1``, ``.gate``,
                    ``.fc_scale``, ``.fc_phi``), their activations and the SE gate's
                    product, i.e. everything computed from the pooled features only
                    that does not touch W0, P or Q
latent_path         latent-form DCD layers: Q conv, Φ·z product, P conv (and R for the
                    depthwise/joint forms), with the reshapes feeding them
weight_build        weight-form DCD layers: forming W(x) = ΛW0 + PΦQᵀ per sample
                    (P·Φ, ·Qᵀ, Λ⊙W0, the bias) from the branch output
weight_apply        weight-form DCD layers: the per-sample product W(x)·x (the
                    counterpart of the static model's conv)
elementwise         Add/Mul/Clip/Relu/... not fused and not in the branch: residual adds,
                    Λ scaling of the W0 output, adding the dynamic part
layout_other        ORT's layout reorders (ReorderInput/ReorderOutput of its blocked
                    NCHWc convs), Transpose/Reshape/Flatten outside dynamic layers,
                    pooling outside dynamic layers, and every node that could not be
                    mapped (listed as ``unmapped``)
==================  ================================================================

Mapping a timed node to the exported graph: the exporter names nodes
``<module path>/<OpType>[_n]`` and outputs ``<node name>:0``; ORT keeps those names, or
names a fused node ``fused <name>`` or a blocked (NCHWc) conv ``<output tensor>_nchwc``
(the tensor being that of the last op fused in, e.g. the Clip after a Conv: the node
is then found by walking back to the producer of the event's op type). Nodes ORT
inserts (``ReorderOutput_token_12``) go to ``layout_other``. Shape ops inside a dynamic
layer (Reshape, Flatten, Unsqueeze, ...) take the group of the node that consumes
their output.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._timing import timed_ms

#: Group keys, in print order.
GROUPS = ("static_conv", "dynamic_branch", "latent_path", "weight_build", "weight_apply", "elementwise", "layout_other")
#: Printable group names.
GROUP_LABELS: Mapping[str, str] = {
    "static_conv": "static convs/FCs",
    "dynamic_branch": "dynamic branch",
    "latent_path": "latent path (Q, Φz, P)",
    "weight_build": "W(x) forming",
    "weight_apply": "W(x)·x product",
    "elementwise": "elementwise",
    "layout_other": "layout/other",
}

# Initializer hints (the part of an initializer's name after its layer's path).
BRANCH_HINTS = frozenset({"fc1", "gate", "fc_scale", "fc_phi", "fc_phi_b", "fc1_w", "fc1_b", "fc2_w", "fc2_b"})
STATIC_HINTS = frozenset({"w0", "b0", "weight", "kbias"})
LATENT_HINTS = frozenset({"q", "q_b", "p", "r"})
# Hints a per-sample weight is formed from (weight form).
_WEIGHT_SOURCE_HINTS = frozenset({"w0", "b0", "q", "q_b", "p", "r"})
# Hints that mark a dynamic layer.
_LAYER_MARKERS = frozenset({"fc1", "fc1_w", "fc_phi", "fc_scale", "gate"})

_POOL_OPS = frozenset({"AveragePool", "GlobalAveragePool", "ReduceMean", "ReduceSum"})
_PRODUCT_OPS = frozenset(
    {"Conv", "Gemm", "MatMul", "FusedConv", "FusedGemm", "FusedMatMul", "ConvTranspose", "NchwcConv"}
)
ELEMENTWISE_OPS = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Sum",
        "Clip",
        "Relu",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Softmax",
        "LeakyRelu",
        "PRelu",
        "Tanh",
        "Max",
        "Min",
        "Neg",
        "Abs",
        "Sqrt",
        "Pow",
    }
)
SHAPE_OPS = frozenset(
    {
        "Reshape",
        "Flatten",
        "Unsqueeze",
        "Squeeze",
        "Transpose",
        "Concat",
        "Split",
        "Slice",
        "Shape",
        "Gather",
        "Expand",
        "Identity",
        "Constant",
        "Cast",
    }
)
_KERNEL_SUFFIX = "_kernel_time"
_FUSED_PREFIX = "fused "
_NCHWC_SUFFIX = "_nchwc"
_UNIQUE_SUFFIX = re.compile(r"_\d+$")
# How far back a fused node's name may be from the node of its op type.
_FUSION_DEPTH = 3


@dataclass(frozen=True)
class NodeInfo:
    """One node of the exported graph (what :func:`group_trace` needs of it)."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    group: int = 1  # Conv's group attribute

    @property
    def path(self) -> str:
        """The module path the exporter named it after (``""`` if none)."""
        return self.name.rsplit("/", 1)[0] if "/" in self.name else ""


class GraphIndex:
    """The exported graph, each node assigned to one of :data:`GROUPS`.

    Args:
        nodes: the graph's nodes in topological order (an ONNX graph's order).
        initializers: names of constant tensors, with their shapes where known.
        dynamic_layers: module paths of dynamic layers, added to those found from the
            initializer names.
    """

    def __init__(
        self,
        nodes: Iterable[NodeInfo],
        initializers: Mapping[str, Sequence[int]] | Iterable[str],
        dynamic_layers: Iterable[str] = (),
    ):
        self.nodes = list(nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self.producer = {o: n for n in self.nodes for o in n.outputs}
        if isinstance(initializers, Mapping):
            self.shapes = {k: tuple(v) for k, v in initializers.items()}
        else:
            self.shapes = {k: () for k in initializers}
        self.constants = set(self.shapes) | {o for n in self.nodes if n.op_type == "Constant" for o in n.outputs}
        found = {path for name in self.shapes for path, hint in [_split_hint(name)] if hint in _LAYER_MARKERS}
        self.dynamic_layers = frozenset(found | set(dynamic_layers))
        self.layer_forms: dict[str, str] = {}
        self.groups: dict[str, str] = {}
        self._assign()

    @classmethod
    def from_onnx(cls, model, dynamic_layers: Iterable[str] = ()) -> GraphIndex:
        """From an ``onnx.ModelProto`` or a path to an ``.onnx`` file."""
        import onnx

        if not isinstance(model, onnx.ModelProto):
            model = onnx.load(str(model), load_external_data=False)
        nodes = []
        for n in model.graph.node:
            group = next((a.i for a in n.attribute if a.name == "group"), 1)
            nodes.append(NodeInfo(n.name, n.op_type, tuple(n.input), tuple(n.output), int(group or 1)))
        inits = {t.name: tuple(t.dims) for t in model.graph.initializer}
        return cls(nodes, inits, dynamic_layers)

    # -- assignment ---------------------------------------------------------------
    def _hints(self, node: NodeInfo) -> set[str]:
        """Hints of the initializers ``node`` reads (``.w0`` -> ``w0``)."""
        out = set()
        for name in node.inputs:
            if name in self.shapes:
                out.add(_split_hint(name)[1])
        return out

    def _assign(self) -> None:
        full: dict[str, bool] = {}  # tensor depends on the layer's input at full resolution
        weighty: dict[str, bool] = {}  # small tensor formed from W0/P/Q (weight form)
        deferred: list[NodeInfo] = []
        info: dict[str, tuple[bool, bool, set[str]]] = {}
        for n in self.nodes:
            dyn = n.path in self.dynamic_layers
            hints = self._hints(n)
            acts = [i for i in n.inputs if i and i not in self.constants]

            def is_full(t: str, path: str = n.path) -> bool:
                p = self.producer.get(t)
                if p is None or p.path != path:  # the layer's input (or a graph input)
                    return True
                return full.get(t, True)

            # The branch works on pooled features: a pool or a branch FC ends full resolution.
            out_full = (
                (n.op_type not in _POOL_OPS and not hints & BRANCH_HINTS and any(is_full(t) for t in acts))
                if dyn
                else True
            )
            out_weighty = (
                dyn
                and not out_full
                and (bool(hints & _WEIGHT_SOURCE_HINTS) or any(weighty.get(t, False) for t in acts))
            )
            for o in n.outputs:
                full[o], weighty[o] = out_full, out_weighty
            info[n.name] = (out_full, out_weighty, hints)
        for path in self.dynamic_layers:
            self.layer_forms[path] = "latent"
        for n in self.nodes:
            out_full, _, hints = info[n.name]
            if n.path in self.dynamic_layers and not out_full and hints & {"w0"}:
                self.layer_forms[n.path] = "weight"  # W0 enters a per-sample weight
        for n in self.nodes:
            if n.op_type in SHAPE_OPS and n.path in self.dynamic_layers:
                deferred.append(n)
                continue
            self.groups[n.name] = self._classify(n, info, weighty)
        for n in deferred:
            self.groups[n.name] = self._follow(n, set())

    def _classify(self, n: NodeInfo, info, weighty) -> str:
        if n.path not in self.dynamic_layers:
            if n.op_type in _PRODUCT_OPS:
                return "static_conv"
            if n.op_type in ELEMENTWISE_OPS:
                return "elementwise"
            return "layout_other"
        out_full, out_weighty, hints = info[n.name]
        weight_form = self.layer_forms.get(n.path) == "weight"
        if n.op_type in _POOL_OPS or hints & BRANCH_HINTS:
            return "dynamic_branch"
        if not out_full:
            if out_weighty:
                return "weight_build" if weight_form else "latent_path"
            return "dynamic_branch"
        if hints & STATIC_HINTS:
            return "static_conv"
        if hints & LATENT_HINTS:
            return "latent_path"
        if n.op_type in _PRODUCT_OPS:
            small = [
                i
                for i in n.inputs
                if i
                and i not in self.constants
                and self.producer.get(i) is not None
                and self.producer[i].path == n.path
                and not info[self.producer[i].name][0]
            ]
            if weight_form and any(weighty.get(i, False) for i in small):
                return "weight_apply"
            return "latent_path"
        if n.op_type in ELEMENTWISE_OPS:
            return "elementwise"
        return "layout_other"

    def _follow(self, n: NodeInfo, seen: set[str]) -> str:
        """A shape op's group: its first in-layer consumer's, else its producer's."""
        seen.add(n.name)
        for other in self.nodes:
            if other.path == n.path and other.name not in seen and set(n.outputs) & set(other.inputs):
                if other.name in self.groups:
                    return self.groups[other.name]
                if other.op_type in SHAPE_OPS:
                    return self._follow(other, seen)
        for t in n.inputs:
            p = self.producer.get(t)
            if p is not None and p.path == n.path and p.name in self.groups:
                return self.groups[p.name]
        return "layout_other"

    # -- lookup -------------------------------------------------------------------
    def resolve(
        self, event_name: str, op_name: str | None = None, args: Mapping[str, Any] | None = None
    ) -> NodeInfo | None:
        """The exported node a profile event is for, or None if ORT made it up."""
        name = event_name[: -len(_KERNEL_SUFFIX)] if event_name.endswith(_KERNEL_SUFFIX) else event_name
        if name.startswith(_FUSED_PREFIX):
            name = name[len(_FUSED_PREFIX) :]
        if name in self.by_name:
            return self.by_name[name]
        tensor = name[: -len(_NCHWC_SUFFIX)] if name.endswith(_NCHWC_SUFFIX) else name
        node = self.producer.get(tensor)
        if node is None:
            return None
        if op_name and not _same_op(node.op_type, op_name):
            node = self._walk_back(node, op_name, args) or node
        return node

    def _walk_back(self, node: NodeInfo, op_name: str, args) -> NodeInfo | None:
        frontier, candidates = [node], []
        for _ in range(_FUSION_DEPTH):
            nxt = []
            for cur in frontier:
                for t in cur.inputs:
                    p = self.producer.get(t)
                    if p is None:
                        continue
                    (candidates if _same_op(p.op_type, op_name) else nxt).append(p)
            if candidates:
                break
            frontier = nxt
        if len(candidates) > 1 and args:
            in_ch = _event_in_channels(args)
            fitting = [c for c in candidates if in_ch is not None and self._conv_in_channels(c) == in_ch]
            if len(fitting) == 1:
                return fitting[0]
        return candidates[0] if candidates else None

    def _conv_in_channels(self, node: NodeInfo) -> int | None:
        shape = self.shapes.get(node.inputs[1]) if len(node.inputs) > 1 else None
        return shape[1] * node.group if shape and len(shape) > 1 else None

    def group_of(
        self, event_name: str, op_name: str | None = None, args: Mapping[str, Any] | None = None
    ) -> tuple[str, bool]:
        """``(group, mapped)`` of a profile event."""
        node = self.resolve(event_name, op_name, args)
        if node is None:
            return "layout_other", bool(op_name and op_name.startswith("Reorder"))
        return self.groups.get(node.name, "layout_other"), True


def _split_hint(initializer: str) -> tuple[str, str]:
    """``features.2.conv.0.fc_phi_1`` -> (``features.2.conv.0``, ``fc_phi``)."""
    path, _, hint = initializer.rpartition(".")
    if not path:
        return "", initializer
    return path, _UNIQUE_SUFFIX.sub("", hint)


def _same_op(graph_op: str, ort_op: str) -> bool:
    """ORT reports a fused Gemm as FusedGemm, a blocked conv as Conv, ..."""
    return graph_op == ort_op or ort_op in (f"Fused{graph_op}", f"Nchwc{graph_op}")


def _event_in_channels(args: Mapping[str, Any]) -> int | None:
    try:
        shape = next(iter(args["input_type_shape"][0].values()))
        return int(shape[1])
    except (KeyError, IndexError, StopIteration, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class GroupTime:
    """One group's share of a run.

    Attributes:
        ms: summed per-node median times, milliseconds per run.
        pct: share of the model's summed node time, percent.
        nodes: timed nodes in the group.
        ops: milliseconds per ORT op type within the group.
    """

    ms: float
    pct: float
    nodes: int
    ops: Mapping[str, float]

    def to_dict(self) -> dict:
        return {"ms": self.ms, "pct": self.pct, "nodes": self.nodes, "ops": dict(self.ops)}


#: The nanosecond clock of the profiled runs (a module attribute: the tests replace it).
_clock = time.perf_counter_ns


@dataclass
class TraceBreakdown:
    """What :func:`group_trace` makes of one trace.

    Attributes:
        runs: profiled runs kept (warm-up runs dropped).
        wall_ms: median time of those runs: :func:`group_trace` takes the trace's
            ``model_run`` (None if the trace has none); :func:`profile_onnx` the wall time
            of the call the timed runs time (the binding included), like the OpenVINO and
            PyTorch profiles.
        nodes_ms: the sum of every node's median time (the groups add up to it).
        groups: per key of :data:`GROUPS`, a :class:`GroupTime`.
        unmapped: names of timed nodes not found in the graph (ORT's own reorders aside).
        unmapped_ms: their time (included in ``layout_other``).
        layer_forms: dynamic layers per form seen in the graph, e.g. {"weight": 25, "latent": 9}.
    """

    runs: int
    wall_ms: float | None
    nodes_ms: float
    groups: dict[str, GroupTime]
    unmapped: list[str] = field(default_factory=list)
    unmapped_ms: float = 0.0
    layer_forms: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "runs": self.runs,
            "wall_ms": self.wall_ms,
            "nodes_ms": self.nodes_ms,
            "groups": {k: g.to_dict() for k, g in self.groups.items()},
            "unmapped": list(self.unmapped),
            "unmapped_ms": self.unmapped_ms,
            "layer_forms": dict(self.layer_forms),
        }


def load_trace(path) -> list[dict]:
    """The events of an ORT profile file (a JSON list, or a dict with ``traceEvents``)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return data.get("traceEvents", []) if isinstance(data, dict) else list(data)


def group_trace(events: Sequence[Mapping[str, Any]], index: GraphIndex, *, skip_runs: int = 0) -> TraceBreakdown:
    """Group a trace's per-node kernel times (see the module docstring).

    Args:
        events: the trace's events (``cat`` "Node" with ``name`` ``<node>_kernel_time``,
            ``dur`` in µs and ``args.op_name``; ``cat`` "Session" ``model_run`` per run).
        index: the exported graph.
        skip_runs: leading runs to drop (warm-up); kept if they are all there is.
    """
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"), key=lambda e: e["ts"]
    )
    kept = runs[skip_runs:] if len(runs) > skip_runs else runs
    starts = [r["ts"] for r in kept]
    n_runs = max(1, len(kept))
    per_node: dict[str, np.ndarray] = {}
    node_op: dict[str, tuple[str, Mapping]] = {}
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith(_KERNEL_SUFFIX):
            continue
        run = 0
        if kept:
            run = bisect.bisect_right(starts, e["ts"]) - 1
            if run < 0 or e["ts"] > kept[run]["ts"] + kept[run]["dur"]:
                continue  # before the kept runs (warm-up) or between runs
        arr = per_node.setdefault(e["name"], np.zeros(n_runs))
        arr[run] += float(e.get("dur", 0))
        node_op.setdefault(e["name"], (str(e.get("args", {}).get("op_name", "")), e.get("args", {})))
    sums: dict[str, float] = defaultdict(float)
    ops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, int] = defaultdict(int)
    unmapped, unmapped_ms = [], 0.0
    for name, durs in per_node.items():
        op, args = node_op[name]
        ms = float(np.median(durs)) / 1000.0
        group, mapped = index.group_of(name, op, args)
        if not mapped:
            unmapped.append(name[: -len(_KERNEL_SUFFIX)])
            unmapped_ms += ms
        sums[group] += ms
        ops[group][op or "?"] += ms
        counts[group] += 1
    total = sum(sums.values())
    groups = {
        g: GroupTime(
            ms=sums.get(g, 0.0),
            pct=100.0 * sums.get(g, 0.0) / total if total else 0.0,
            nodes=counts.get(g, 0),
            ops=dict(sorted(ops[g].items(), key=lambda kv: -kv[1])),
        )
        for g in GROUPS
    }
    wall = float(np.median([r["dur"] for r in kept])) / 1000.0 if kept else None
    forms: dict[str, int] = defaultdict(int)
    for form in index.layer_forms.values():
        forms[form] += 1
    return TraceBreakdown(
        runs=len(kept) if kept else 1,
        wall_ms=wall,
        nodes_ms=total,
        groups=groups,
        unmapped=sorted(unmapped),
        unmapped_ms=unmapped_ms,
        layer_forms=dict(forms),
    )


def profile_onnx(
    path, x, *, threads: int, runs: int, warmup: int, trace_dir, dynamic_layers: Iterable[str] = ()
) -> TraceBreakdown:
    """Profile one ``.onnx`` file with ONNX Runtime and group its trace.

    Args:
        path: the exported model.
        x: the input array (made before profiling), or one per input of the file, in its order.
        threads: ONNX Runtime's threads (the session is the benchmark's otherwise:
            :mod:`dcd_deploy.runtimes`, sequential, all graph optimisations).
        runs: profiled runs kept; ``warmup`` more run first and are dropped.
        trace_dir: directory for ORT's trace file (removed after reading).
        dynamic_layers: module paths of dynamic layers, if known beyond the graph's names.
    """
    from ..runtimes import load_runner
    from ._runners import ort_feed

    runner = load_runner("onnxruntime", path, threads=threads, optimization="all", profile_dir=trace_dir)
    call = runner.bind(ort_feed(runner, x))
    walls = []
    for i in range(warmup + runs):
        ms = timed_ms(call, _clock)
        if i >= warmup:
            walls.append(ms)
    trace_path = runner.end_profiling()
    try:
        events = load_trace(trace_path)
    finally:
        trace_path.unlink(missing_ok=True)
    breakdown = group_trace(events, GraphIndex.from_onnx(path, dynamic_layers), skip_runs=warmup)
    # the run's time as the timed runs see it (the trace's model_run leaves out the binding)
    return dataclasses.replace(breakdown, wall_ms=float(np.median(walls)) if walls else breakdown.wall_ms)
