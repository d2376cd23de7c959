"""The accuracy-latency frontier: the dominance rule against a brute-force oracle, the
marking per family, and a tiny real run (no timing is asserted)."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from dcd_deploy.bench import frontier as fr
from dcd_deploy.bench.paper import table4_rows
from dcd_deploy.errors import DCDDeployError


def brute_force(points):
    """Non-dominated by definition: no other point at least as good in both, better in one."""
    return [
        not any(j != i and t2 <= t and a2 >= a and (t2 < t or a2 > a) for j, (t2, a2) in enumerate(points))
        for i, (t, a) in enumerate(points)
    ]


def test_pareto_matches_brute_force_on_random_points_with_ties():
    rng = random.Random(0)
    for n in range(0, 9):
        for _ in range(200):
            # few distinct values, so equal latencies, equal accuracies and duplicates are common
            pts = [(float(rng.randint(1, 4)), float(rng.randint(60, 63))) for _ in range(n)]
            assert fr.pareto_flags(pts) == brute_force(pts), pts


@pytest.mark.parametrize(
    "points, expected",
    [
        ([], []),
        ([(5.0, 70.0)], [True]),  # a family of one is its own frontier
        ([(5.0, 70.0), (5.0, 71.0)], [False, True]),  # equal latency: the more accurate one only
        ([(5.0, 70.0), (6.0, 70.0)], [True, False]),  # equal accuracy: the faster one only
        ([(5.0, 70.0), (5.0, 70.0)], [True, True]),  # identical: neither dominates the other
        ([(1.0, 60.0), (2.0, 65.0), (3.0, 64.0), (4.0, 70.0)], [True, True, False, True]),
    ],
)
def test_pareto_hand_made_cases(points, expected):
    assert fr.pareto_flags(points) == expected == brute_force(points)


def _rec(name, family, ms, top1):
    return fr.FrontierRecord(
        name=name, label=name, family=family, variant="static", top1=top1, params="1M", madds="1M", p50_ms=ms
    )


def test_mark_frontier_is_per_family_and_skips_untimed():
    recs = [
        _rec("a", "MobileNetV2", 5.0, 70.0),
        _rec("b", "MobileNetV2", 9.0, 69.0),
        _rec("r", "ResNet", 50.0, 60.0),
        _rec("x", "ResNet", None, 99.0),
    ]
    fr.mark_frontier(recs)
    # r is slower and less accurate than a, but of another family: still on its own frontier
    assert [r.on_frontier for r in recs] == [True, False, True, False]


def test_table4_rows_all_have_a_top1():
    rows = table4_rows()
    assert len(rows) == 19
    assert all(r.top1 is not None and 50 < r.top1 < 80 for r in rows)
    assert {r.kind for r in rows} == {"static", "dyconv", "condconv", "dcd"}
    with pytest.raises(DCDDeployError, match="not in the paper's Table 4"):
        fr.select_rows(["mobilenetv2_050", "resnet34"])


@pytest.fixture(scope="module")
def tiny_run():
    models = ["mobilenetv2_035", "mobilenetv2_035_dcd", "mobilenetv2_035_dyconv"]
    return fr.run_frontier(models=models, backend="torch-deploy", input_size=64, quick=True)


def test_run_frontier_records_and_json(tiny_run):
    result = tiny_run
    assert result
    data = json.loads(json.dumps(result.to_dict()))
    assert data["schema"] == fr.SCHEMA and data["version"] and data["settings"]["backend"] == "torch-deploy"
    assert data["settings"]["input_size"] == 64 and "top1" in data["sources"]
    recs = data["records"]
    assert {r["name"] for r in recs} == {"mobilenetv2_035", "mobilenetv2_035_dcd", "mobilenetv2_035_dyconv"}
    assert [r["p50_ms"] for r in recs] == sorted(r["p50_ms"] for r in recs)
    for r in recs:
        assert {"name", "family", "variant", "top1", "p50_ms", "on_frontier"} <= r.keys()
        assert r["family"] == "MobileNetV2" and r["status"] == "ok" and r["n_runs"] >= 5
    assert [r["on_frontier"] for r in recs] == brute_force([(r["p50_ms"], r["top1"]) for r in recs])
    # x0.35 DCD has the best top-1 of the three: nothing can dominate it
    assert next(r for r in recs if r["name"] == "mobilenetv2_035_dcd")["on_frontier"]


def test_a_model_that_cannot_be_built_is_a_row_not_a_crash(monkeypatch):
    import dcd_deploy.models as models

    real = models.create_model

    def create(name, **kw):
        if name == "mobilenetv2_035_dyconv":
            raise RuntimeError("no such layer here")
        return real(name, **kw)

    monkeypatch.setattr(models, "create_model", create)
    result = fr.run_frontier(
        models=["mobilenetv2_035", "mobilenetv2_035_dyconv"], backend="torch-deploy", input_size=64, quick=True
    )
    bad = result.records[-1]
    assert bad.name == "mobilenetv2_035_dyconv" and bad.status == "not built" and not bad.on_frontier
    assert "no such layer here" in bad.reason and bad.p50_ms is None
    assert result.records[0].on_frontier  # alone in its family once the other is out


def test_frontier_table_and_markdown(tiny_run):
    from dcd_deploy.bench import frontier_report

    lines = frontier_report.format_frontier_table(tiny_run)
    text = "\n".join(lines)
    assert "the paper's Table 4 (ImageNet top-1 %, quoted, not measured here)" in text
    assert "measured here" in text and "MobileNetV2 frontier:" in text
    rows = [line for line in lines if line.startswith("mobilenetv2_035")]
    assert len(rows) == 3 and sum(line.rstrip().endswith(frontier_report.ON) for line in rows) == sum(
        r.on_frontier for r in tiny_run.records
    )
    md = frontier_report.to_markdown(tiny_run)
    assert md.startswith("# dcd-bench frontier") and "| model | paper row |" in md


def test_frontier_plot(tiny_run):
    pytest.importorskip("matplotlib")
    from dcd_deploy.bench import plot

    assert plot.render_frontier_plot(tiny_run)[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_pair_of_a_family_is_compared():
    # the sweep must agree with the oracle on every order of the same points
    pts = [(2.0, 65.0), (1.0, 60.0), (2.0, 65.0), (3.0, 66.0), (1.0, 59.0)]
    for perm in itertools.permutations(range(len(pts))):
        p = [pts[i] for i in perm]
        assert fr.pareto_flags(p) == brute_force(p)


def test_frontier_on_openvino_fused(monkeypatch):
    # the DCD model runs the fused kernels (its file has DCDPointwise nodes and needs the
    # extension), its static partner plain OpenVINO (no dcd_deploy node), both timed
    pytest.importorskip("openvino")
    from dcd_deploy.bench import _runners, frontier_report
    from dcd_deploy.openvino import needs_extension

    compiled = {}
    real = _runners.openvino_runner

    def runner(path, x, threads):
        compiled[path.name] = needs_extension(path)
        return real(path, x, threads)

    monkeypatch.setattr(_runners, "openvino_runner", runner)
    result = fr.run_frontier(
        models=["mobilenetv2_035", "mobilenetv2_035_dcd"], backend="openvino-fused", input_size=64, quick=True
    )
    assert compiled == {"mobilenetv2_035.onnx": False, "mobilenetv2_035_dcd.fused.onnx": True}
    recs = {r.name: r for r in result.records}
    assert all(r.status == "ok" and r.p50_ms > 0 for r in recs.values())
    assert result.settings["backend"] == "openvino-fused"
    # every 1x1 DCD conv of MobileNetV2 is fused (the DCD classifier may still run as standard ops)
    from dcd_deploy.layers.dcd import DCDConv2d, DCDLinear
    from dcd_deploy.models import create_model

    model = create_model("mobilenetv2_035_dcd")
    convs = sum(isinstance(m, DCDConv2d) and m.kernel_size in (1, (1, 1)) for m in model.modules())
    dcd = recs["mobilenetv2_035_dcd"]
    assert dcd.dcd_layers == sum(isinstance(m, (DCDConv2d, DCDLinear)) for m in model.modules())
    assert convs <= dcd.fused_nodes <= dcd.dcd_layers and convs > 0
    assert (recs["mobilenetv2_035"].dcd_layers, recs["mobilenetv2_035"].fused_nodes) == (0, 0)
    assert f"x0.35 DCD {dcd.fused_nodes}/{dcd.dcd_layers}" in "\n".join(frontier_report.format_frontier_table(result))
