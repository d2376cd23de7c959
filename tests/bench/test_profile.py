"""Profile grouping: a hand-written graph and ORT trace, and one real exported model."""

from __future__ import annotations

import json

import pytest

from dcd_deploy.bench.profile import GROUP_LABELS, GROUPS, GraphIndex, NodeInfo, group_trace, load_trace

WARMUP_US = 99_999  # durations of the dropped warm-up run: must never show


def _n(name, op, *inputs):
    return NodeInfo(name, op, tuple(inputs), (f"{name}:0",))


# A static stem, a latent-form DCD layer "blk.dcd" (SE gate), a weight-form DCD layer
# "blk.w" (ReLU branch) and a static head, named the way the exporter names them.
NODES = [
    _n("stem.0/Conv", "Conv", "input", "stem.0.weight", "stem.0.bias"),
    _n("stem.2/Clip", "Clip", "stem.0/Conv:0", "stem.2.min", "stem.2.max"),
    _n("blk.dcd/ReduceMean", "ReduceMean", "stem.2/Clip:0"),
    _n("blk.dcd/Gemm", "Gemm", "blk.dcd/ReduceMean:0", "blk.dcd.fc1"),
    _n("blk.dcd/Gemm_1", "Gemm", "blk.dcd/Gemm:0", "blk.dcd.gate"),
    _n("blk.dcd/HardSigmoid", "HardSigmoid", "blk.dcd/Gemm_1:0"),
    _n("blk.dcd/Mul", "Mul", "blk.dcd/Gemm:0", "blk.dcd/HardSigmoid:0"),
    _n("blk.dcd/Gemm_2", "Gemm", "blk.dcd/Mul:0", "blk.dcd.fc_scale"),
    _n("blk.dcd/HardSigmoid_1", "HardSigmoid", "blk.dcd/Gemm_2:0"),
    _n("blk.dcd/Conv", "Conv", "stem.2/Clip:0", "blk.dcd.w0"),
    _n("blk.dcd/Unsqueeze", "Unsqueeze", "blk.dcd/HardSigmoid_1:0", "blk.dcd.axes"),
    _n("blk.dcd/Mul_1", "Mul", "blk.dcd/Conv:0", "blk.dcd/Unsqueeze:0"),
    _n("blk.dcd/Gemm_3", "Gemm", "blk.dcd/Mul:0", "blk.dcd.fc_phi", "blk.dcd.fc_phi_b"),
    _n("blk.dcd/Conv_1", "Conv", "stem.2/Clip:0", "blk.dcd.q", "blk.dcd.q_b"),
    _n("blk.dcd/Reshape", "Reshape", "blk.dcd/Conv_1:0", "blk.dcd.z_shape"),
    _n("blk.dcd/Reshape_1", "Reshape", "blk.dcd/Gemm_3:0", "blk.dcd.phi_shape"),
    _n("blk.dcd/MatMul", "MatMul", "blk.dcd/Reshape_1:0", "blk.dcd/Reshape:0"),
    _n("blk.dcd/Reshape_2", "Reshape", "blk.dcd/MatMul:0", "blk.dcd.u_shape"),
    _n("blk.dcd/Conv_2", "Conv", "blk.dcd/Reshape_2:0", "blk.dcd.p", "blk.dcd.bias"),
    _n("blk.dcd/Add", "Add", "blk.dcd/Conv_2:0", "blk.dcd/Mul_1:0"),
    _n("blk.w/AveragePool", "AveragePool", "blk.dcd/Add:0"),
    _n("blk.w/Flatten", "Flatten", "blk.w/AveragePool:0"),
    _n("blk.w/Gemm", "Gemm", "blk.w/Flatten:0", "blk.w.fc1"),
    _n("blk.w/Relu", "Relu", "blk.w/Gemm:0"),
    _n("blk.w/Gemm_1", "Gemm", "blk.w/Relu:0", "blk.w.fc_scale"),
    _n("blk.w/HardSigmoid", "HardSigmoid", "blk.w/Gemm_1:0"),
    _n("blk.w/Gemm_2", "Gemm", "blk.w/Relu:0", "blk.w.fc_phi", "blk.w.fc_phi_b"),
    _n("blk.w/Reshape", "Reshape", "blk.w/Gemm_2:0", "blk.w.phi_shape"),
    _n("blk.w/MatMul", "MatMul", "blk.w.p", "blk.w/Reshape:0"),
    _n("blk.w/MatMul_1", "MatMul", "blk.w/MatMul:0", "blk.w.q"),
    _n("blk.w/Unsqueeze", "Unsqueeze", "blk.w/HardSigmoid:0", "blk.w.axes"),
    _n("blk.w/Mul", "Mul", "blk.w/Unsqueeze:0", "blk.w.w0"),
    _n("blk.w/Add", "Add", "blk.w/MatMul_1:0", "blk.w/Mul:0"),
    _n("blk.w/Reshape_1", "Reshape", "blk.dcd/Add:0", "blk.w.x_shape"),
    _n("blk.w/MatMul_2", "MatMul", "blk.w/Add:0", "blk.w/Reshape_1:0"),
    _n("blk.w/MatMul_3", "MatMul", "blk.w/MatMul:0", "blk.w.q_b"),
    _n("blk.w/Add_1", "Add", "blk.w/MatMul_3:0", "blk.w.bias"),
    _n("blk.w/Add_2", "Add", "blk.w/MatMul_2:0", "blk.w/Add_1:0"),
    _n("blk.w/Reshape_2", "Reshape", "blk.w/Add_2:0", "blk.w.out_shape"),
    _n("head/Add", "Add", "blk.w/Reshape_2:0", "stem.2/Clip:0"),
    _n("pool/GlobalAveragePool", "GlobalAveragePool", "head/Add:0"),
    _n("fc/Gemm", "Gemm", "pool/GlobalAveragePool:0", "fc.weight", "fc.bias"),
]
INITIALIZERS = sorted({i for n in NODES for i in n.inputs if "/" not in i and i != "input"})

EXPECTED_NODE_GROUPS = {
    "stem.0/Conv": "static_conv",
    "stem.2/Clip": "elementwise",
    **{
        f"blk.dcd/{k}": "dynamic_branch"
        for k in ("ReduceMean", "Gemm", "Gemm_1", "HardSigmoid", "Mul", "Gemm_2", "HardSigmoid_1", "Gemm_3")
    },
    "blk.dcd/Conv": "static_conv",
    "blk.dcd/Unsqueeze": "elementwise",
    "blk.dcd/Mul_1": "elementwise",
    **{f"blk.dcd/{k}": "latent_path" for k in ("Conv_1", "Reshape", "Reshape_1", "MatMul", "Reshape_2", "Conv_2")},
    "blk.dcd/Add": "elementwise",
    **{
        f"blk.w/{k}": "dynamic_branch"
        for k in ("AveragePool", "Flatten", "Gemm", "Relu", "Gemm_1", "HardSigmoid", "Gemm_2")
    },
    **{
        f"blk.w/{k}": "weight_build"
        for k in ("Reshape", "MatMul", "MatMul_1", "Unsqueeze", "Mul", "Add", "MatMul_3", "Add_1")
    },
    "blk.w/Reshape_1": "weight_apply",
    "blk.w/MatMul_2": "weight_apply",
    "blk.w/Add_2": "elementwise",
    "blk.w/Reshape_2": "elementwise",
    "head/Add": "elementwise",
    "pool/GlobalAveragePool": "layout_other",
    "fc/Gemm": "static_conv",
}

# (event name as ORT writes it, ORT op name, µs per kept run, expected group). ORT's
# fusions: Conv+Clip named after the Clip's output, Gemm+HardSigmoid as "fused <name>".
EVENTS = [
    ("stem.2/Clip:0_nchwc", "Conv", 300, "static_conv"),
    ("blk.dcd/ReduceMean", "ReduceMean", 11, "dynamic_branch"),
    ("blk.dcd/Gemm", "Gemm", 40, "dynamic_branch"),
    ("fused blk.dcd/Gemm_1", "FusedGemm", 12, "dynamic_branch"),
    ("blk.dcd/Mul", "Mul", 3, "dynamic_branch"),
    ("fused blk.dcd/Gemm_2", "FusedGemm", 13, "dynamic_branch"),
    ("blk.dcd/Conv:0_nchwc", "Conv", 200, "static_conv"),
    ("blk.dcd/Unsqueeze", "Unsqueeze", 2, "elementwise"),
    ("blk.dcd/Mul_1", "Mul", 6, "elementwise"),
    ("blk.dcd/Gemm_3", "Gemm", 14, "dynamic_branch"),
    ("blk.dcd/Conv_1:0_nchwc", "Conv", 25, "latent_path"),
    ("ReorderOutput_token_7", "ReorderOutput", 4, "layout_other"),
    ("blk.dcd/Reshape", "Reshape", 2, "latent_path"),
    ("blk.dcd/Reshape_1", "Reshape", 2, "latent_path"),
    ("blk.dcd/MatMul", "MatMul", 9, "latent_path"),
    ("blk.dcd/Reshape_2", "Reshape", 2, "latent_path"),
    ("ReorderInput_token_8", "ReorderInput", 5, "layout_other"),
    ("blk.dcd/Conv_2:0_nchwc", "Conv", 21, "latent_path"),
    ("blk.dcd/Add", "Add", 7, "elementwise"),
    ("blk.w/AveragePool:0_nchwc", "AveragePool", 8, "dynamic_branch"),
    ("blk.w/Flatten", "Flatten", 1, "dynamic_branch"),
    ("blk.w/Gemm", "Gemm", 30, "dynamic_branch"),
    ("fused blk.w/Gemm_1", "FusedGemm", 10, "dynamic_branch"),
    ("blk.w/Gemm_2", "Gemm", 15, "dynamic_branch"),
    ("blk.w/Reshape", "Reshape", 2, "weight_build"),
    ("blk.w/MatMul", "MatMul", 50, "weight_build"),
    ("blk.w/MatMul_1", "MatMul", 60, "weight_build"),
    ("blk.w/Unsqueeze", "Unsqueeze", 2, "weight_build"),
    ("blk.w/Mul", "Mul", 16, "weight_build"),
    ("blk.w/Add", "Add", 17, "weight_build"),
    ("blk.w/Reshape_1", "Reshape", 2, "weight_apply"),
    ("blk.w/MatMul_2", "MatMul", 400, "weight_apply"),
    ("blk.w/MatMul_3", "MatMul", 4, "weight_build"),
    ("blk.w/Add_1", "Add", 3, "weight_build"),
    ("blk.w/Add_2", "Add", 20, "elementwise"),
    ("blk.w/Reshape_2", "Reshape", 2, "elementwise"),
    ("head/Add", "Add", 19, "elementwise"),
    ("pool/GlobalAveragePool:0_nchwc", "GlobalAveragePool", 6, "layout_other"),
    ("fc/Gemm", "Gemm", 90, "static_conv"),
    ("MysteryFusion_token_3", "Foo", 33, "layout_other"),  # unknown to the graph: unmapped
]


def _trace(kept_runs: int = 3) -> list[dict]:
    """One warm-up run, then ``kept_runs`` runs; the last kept run is 10x slower everywhere."""
    events = [{"cat": "Session", "name": "model_loading_uri", "ts": 0, "dur": 50}]
    ts = 1000
    for run in range(kept_runs + 1):
        start = ts
        for name, op, us, _ in EVENTS:
            dur = WARMUP_US if run == 0 else (10 * us if run == kept_runs else us)
            events.append(
                {
                    "cat": "Node",
                    "name": f"{name}_kernel_time",
                    "ts": ts,
                    "dur": dur,
                    "args": {"op_name": op, "provider": "CPUExecutionProvider"},
                }
            )
            events.append({"cat": "Node", "name": f"{name}_fence_before", "ts": ts, "dur": 0, "args": {"op_name": op}})
            ts += dur + 1
        events.append({"cat": "Session", "name": "model_run", "ts": start, "dur": ts - start})
        ts += 500
    events.append(
        {
            "cat": "Node",
            "name": "blk.w/MatMul_2_kernel_time",
            "ts": ts + 10,
            "dur": WARMUP_US,
            "args": {"op_name": "MatMul"},
        }
    )  # outside every run: ignored
    return events


@pytest.fixture(scope="module")
def index():
    return GraphIndex(NODES, INITIALIZERS)


def test_every_node_lands_in_its_group(index):
    assert index.dynamic_layers == {"blk.dcd", "blk.w"}
    assert index.layer_forms == {"blk.dcd": "latent", "blk.w": "weight"}
    assert index.groups == EXPECTED_NODE_GROUPS


def test_event_names_resolve_through_ort_fusions(index):
    assert index.resolve("stem.2/Clip:0_nchwc_kernel_time", "Conv").name == "stem.0/Conv"
    assert index.resolve("fused blk.dcd/Gemm_1_kernel_time", "FusedGemm").name == "blk.dcd/Gemm_1"
    assert index.resolve("blk.dcd/Conv_2:0_nchwc", "Conv").name == "blk.dcd/Conv_2"
    assert index.resolve("ReorderOutput_token_7", "ReorderOutput") is None
    assert index.group_of("ReorderOutput_token_7_kernel_time", "ReorderOutput") == ("layout_other", True)
    assert index.group_of("MysteryFusion_token_3_kernel_time", "Foo") == ("layout_other", False)


def test_group_trace_sums_per_node_medians(index):
    b = group_trace(_trace(), index, skip_runs=1)
    assert b.runs == 3
    expected = {g: 0.0 for g in GROUPS}
    for _, _, us, group in EVENTS:
        expected[group] += us / 1000.0  # median of (us, us, 10 us)
    for g in GROUPS:
        assert b.groups[g].ms == pytest.approx(expected[g]), g
    total = sum(us for _, _, us, _ in EVENTS) / 1000.0
    assert b.nodes_ms == pytest.approx(total)
    assert sum(g.pct for g in b.groups.values()) == pytest.approx(100.0)
    assert b.groups["weight_apply"].ops == pytest.approx({"MatMul": 0.4, "Reshape": 0.002})
    assert b.groups["dynamic_branch"].nodes == 11
    assert b.unmapped == ["MysteryFusion_token_3"] and b.unmapped_ms == pytest.approx(0.033)
    assert b.layer_forms == {"latent": 1, "weight": 1}
    assert b.wall_ms is not None and b.wall_ms > total  # the median run, gaps included
    assert WARMUP_US / 1000.0 not in {round(g.ms, 3) for g in b.groups.values()}


def test_group_trace_without_run_markers_takes_everything(index):
    events = [{"cat": "Node", "name": "fc/Gemm_kernel_time", "ts": 5, "dur": 1500, "args": {"op_name": "Gemm"}}]
    b = group_trace(events, index, skip_runs=2)
    assert b.runs == 1 and b.wall_ms is None
    assert b.groups["static_conv"].ms == pytest.approx(1.5)
    assert b.groups["static_conv"].pct == pytest.approx(100.0)


def test_load_trace_accepts_both_layouts(tmp_path):
    events = _trace(1)
    (tmp_path / "list.json").write_text(json.dumps(events))
    (tmp_path / "dict.json").write_text(json.dumps({"traceEvents": events}))
    assert load_trace(tmp_path / "list.json") == load_trace(tmp_path / "dict.json") == events


def test_every_group_has_a_label():
    assert set(GROUP_LABELS) == set(GROUPS)


def test_a_real_export_maps_completely(tmp_path):
    """The exporter's names as they are today: every DCD layer found, its form right, every
    node ORT times mapped (ORT's own reorders aside)."""
    import numpy as np

    from dcd_deploy import create_model, export_onnx, pseudo_train
    from dcd_deploy.bench.profile import profile_onnx
    from dcd_deploy.exporters import to_deploy

    model = pseudo_train(create_model("mobilenetv2_035_dcd"), 0, input_size=64)
    path = export_onnx(
        model, tmp_path / "m.onnx", input_size=64, batch=None, check=False, strategy="auto", mode="standard"
    ).path
    strategies = to_deploy(model, strategy="auto", input_size=64).strategies
    idx = GraphIndex.from_onnx(path)
    assert idx.dynamic_layers == set(strategies)
    assert idx.layer_forms == strategies
    assert set(idx.groups.values()) <= set(GROUPS)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    b = profile_onnx(path, x, threads=1, runs=2, warmup=1, trace_dir=tmp_path)
    assert b.runs == 2 and not b.unmapped
    for g in ("static_conv", "dynamic_branch", "latent_path", "weight_build", "weight_apply"):
        assert b.groups[g].nodes > 0, g
    assert not list(tmp_path.glob("*_profile*.json"))  # the trace file is removed
