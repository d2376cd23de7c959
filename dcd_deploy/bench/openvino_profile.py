"""``--profile`` for OpenVINO: per-node performance counters, grouped like the ORT profile.

OpenVINO's CPU plugin times every executed node of a request (``PERF_COUNT``); each
node's median over the profiled runs is summed per group of
:data:`~dcd_deploy.bench.profile.GROUPS`, by the node type the plugin reports:

* ``static_conv``: Convolution, GroupConvolution, FullyConnected, MatMul (constant
  weights; the plugin has fused BNs, activations and adds into them);
* the fused ``DCDPointwise`` nodes (``Reference`` in the plugin's terms): their time is
  split by the op's own phase timers (``DCD_DEPLOY_PROFILE=1``, read through
  :func:`dcd_deploy.openvino.kernel_profile`): pooling and the branch's products to
  ``dynamic_branch``, forming the per-sample (or latent) operand to ``weight_build``,
  the GEMM with its epilogue to ``weight_apply``;
* ``elementwise``: Eltwise, Subgraph (the plugin's fused elementwise chains),
  HardSigmoid, Multiply, Add, Clamp;
* ``layout_other``: everything else (Reorder, Transpose, pooling of the head, ...).

The profiled run's time (``wall_ms``) is the wall time of the same call the timed runs
time (:meth:`Runner.bind <dcd_deploy.runtimes.Runner.bind>`, the Python binding's own
work included), not the request's own ``latency``, which leaves that out: 0.3 ms per call
on a 224x224 MobileNetV2, 0.4 ms when the binding still copied the input and outputs
(AMD EPYC, 2026-11-27); set beside the timed runs it once made a profiled run look 1.6 ms
faster than the same model's timed runs.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict

import numpy as np

from ._timing import timed_ms
from .profile import GROUPS, GroupTime, TraceBreakdown

#: The nanosecond clock of the profiled runs (a module attribute: the tests replace it).
_clock = time.perf_counter_ns

STATIC_TYPES = frozenset({"Convolution", "GroupConvolution", "FullyConnected", "MatMul"})
ELEMENTWISE_TYPES = frozenset({"Eltwise", "Subgraph", "HardSigmoid", "Multiply", "Add", "Clamp"})
#: The plugin's node type of an extension op without a native implementation.
EXTENSION_TYPES = frozenset({"Reference", "DCDPointwise", "DCDConvEpilogue", "DCDDepthwise"})
#: Kernel phases (:data:`dcd_deploy.openvino.PROFILE_PHASES`) -> group.
PHASE_GROUPS = {"pool": "dynamic_branch", "branch": "dynamic_branch", "form": "weight_build", "gemm": "weight_apply"}


def profile_openvino(path, x, *, threads: int, runs: int, warmup: int) -> TraceBreakdown:
    """Profile ``path`` in OpenVINO (extension loaded if the file needs it).

    Args:
        path: an exported ONNX file.
        x: the input, with the batch to compile for (or one per input of the file, in its order).
        threads: OpenVINO's ``INFERENCE_NUM_THREADS``.
        runs: profiled runs (medians per node are taken over them).
        warmup: runs before, not counted.
    """
    from ..openvino import kernel_profile
    from ..runtimes import load_runner
    from ._runners import openvino_inputs

    shapes, feed = openvino_inputs(x)
    runner = load_runner("openvino", path, threads=threads, input_shapes=shapes, perf_counters=True)
    fused, request, call = runner.extension, runner.request, runner.bind(feed)
    previous = os.environ.get("DCD_DEPLOY_PROFILE")
    os.environ["DCD_DEPLOY_PROFILE"] = "1"
    try:
        for _ in range(warmup):
            call()
        if fused:
            kernel_profile(reset=True)
        per_node: dict[str, list[float]] = defaultdict(list)
        node_type: dict[str, str] = {}
        walls = []
        for _ in range(max(1, runs)):
            walls.append(timed_ms(call, _clock))
            for info in request.profiling_info:
                if info.status.name != "EXECUTED":
                    continue
                per_node[info.node_name].append(info.real_time.total_seconds() * 1e3)
                node_type[info.node_name] = info.node_type
        phases = kernel_profile(reset=True) if fused else {}
    finally:
        if previous is None:
            os.environ.pop("DCD_DEPLOY_PROFILE", None)
        else:
            os.environ["DCD_DEPLOY_PROFILE"] = previous
    return _group(per_node, node_type, phases, runs=max(1, runs), wall_ms=float(np.median(walls)))


def _group(per_node, node_type, phases, *, runs: int, wall_ms: float) -> TraceBreakdown:
    ms: dict[str, float] = dict.fromkeys(GROUPS, 0.0)
    ops: dict[str, dict[str, float]] = {g: defaultdict(float) for g in GROUPS}
    nodes: dict[str, int] = dict.fromkeys(GROUPS, 0)
    fused_ms, fused_nodes = 0.0, 0
    for name, times in per_node.items():
        t, kind = float(np.median(times)), node_type[name]
        if kind in EXTENSION_TYPES:
            fused_ms += t
            fused_nodes += 1
            continue
        group = (
            "static_conv" if kind in STATIC_TYPES else "elementwise" if kind in ELEMENTWISE_TYPES else "layout_other"
        )
        ms[group] += t
        ops[group][kind] += t
        nodes[group] += 1
    phase_total = sum(phases.get(p, 0.0) for p in PHASE_GROUPS)
    if fused_ms:
        for phase, group in PHASE_GROUPS.items():
            # the op's phases split its own node time (the plugin's counter includes its call)
            share = phases.get(phase, 0.0) / phase_total if phase_total else 1.0 / len(PHASE_GROUPS)
            ms[group] += fused_ms * share
            ops[group][f"DCDPointwise {phase}"] += fused_ms * share
        for group in set(PHASE_GROUPS.values()):
            nodes[group] += fused_nodes
    total = sum(ms.values())
    groups = {
        g: GroupTime(
            ms=ms[g],
            pct=100.0 * ms[g] / total if total else 0.0,
            nodes=nodes[g],
            ops=dict(sorted(ops[g].items(), key=lambda kv: -kv[1])),
        )
        for g in GROUPS
    }
    return TraceBreakdown(
        runs=runs,
        wall_ms=wall_ms,
        nodes_ms=total,
        groups=groups,
        layer_forms={"fused": fused_nodes} if fused_nodes else {},
    )
