"""The benchmark harness latency, frontier and floor share: threads set and restored,
interleaving order, statistics, the one table formatter, the one backend table, and the
house rules of bench/ (no private names across modules, short functions).

No test here asserts a timing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from dcd_deploy.bench import _backends, _lineup, _models, _table, _timing, harness
from dcd_deploy.bench import floor as fl
from dcd_deploy.bench import frontier as fr
from dcd_deploy.bench import latency as lat
from dcd_deploy.errors import DCDDeployError

BENCH = Path(__file__).resolve().parents[2] / "dcd_deploy" / "bench"


# -- threads ------------------------------------------------------------------------------
@pytest.fixture
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_pinned_threads_sets_and_restores_also_after_an_error(one_thread):
    with harness.pinned_threads(2):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == 1
    with pytest.raises(RuntimeError, match="boom"):
        with harness.pinned_threads(3):
            assert torch.get_num_threads() == 3
            raise RuntimeError("boom")
    assert torch.get_num_threads() == 1


def _failing(seen: list[int]):
    def fail(*args, **kwargs):
        seen.append(torch.get_num_threads())  # the count the run works at
        raise RuntimeError("boom")

    return fail


def test_run_floor_restores_threads_after_an_error(one_thread, monkeypatch, tmp_path):
    seen: list[int] = []
    monkeypatch.setattr(_models, "load_model", _failing(seen))
    with pytest.raises(RuntimeError, match="boom"):
        fl.run_floor(["mobilenetv2_035_dcd"], threads=2, input_size=64, quick=True, workdir=tmp_path)
    assert seen == [2] and torch.get_num_threads() == 1


def test_run_benchmark_restores_threads_after_an_error(one_thread, monkeypatch):
    seen: list[int] = []
    monkeypatch.setattr(_lineup, "load_model", _failing(seen))
    with pytest.raises(RuntimeError, match="boom"):
        lat.run_benchmark(["mobilenetv2_035"], backends=["torch"], threads=2, input_size=64, quick=True)
    assert seen == [2] and torch.get_num_threads() == 1


def test_run_frontier_restores_threads_after_an_error(one_thread, monkeypatch):
    seen: list[int] = []
    monkeypatch.setattr(fr, "_build_rows", _failing(seen))
    with pytest.raises(RuntimeError, match="boom"):
        fr.run_frontier(models=["mobilenetv2_035"], backend="torch", threads=2, input_size=64, quick=True)
    assert seen == [2] and torch.get_num_threads() == 1


# -- input, timing, statistics --------------------------------------------------------------
def test_fixed_input_is_the_same_for_a_seed_and_differs_across_seeds():
    a = harness.fixed_input((1, 3, 8, 8), seed=3)
    assert a.shape == (1, 3, 8, 8) and torch.equal(a, harness.fixed_input((1, 3, 8, 8), seed=3))
    assert not torch.equal(a, harness.fixed_input((1, 3, 8, 8), seed=4))
    from dcd_deploy.models import synthetic_images

    assert torch.equal(a, synthetic_images(1, 8, seed=3))
    b = harness.fixed_input((2, 1, 5, 7), seed=3)  # a user's model: other channels, batch, a non-square map
    assert b.shape == (2, 1, 5, 7) and torch.equal(b, synthetic_images(2, (5, 7), seed=3, channels=1))


def test_fixed_input_is_in_the_working_range_of_a_pseudo_trained_dcd_resnet():
    """The bench times models on an input they compute finitely. The pseudo-trained DCD
    ResNet-18 (the latency run's model) gave NaN logits on the standard normal noise the
    bench fed before (measured with torch 2.13: all 1000 logits NaN)."""
    from dcd_deploy.bench._models import load_model

    net = load_model("resnet18_dcd", input_size=224, seed=0)[0]
    x = harness.fixed_input((1, 3, 224, 224), seed=0)
    with torch.no_grad():
        logits = net(x)
    assert bool(logits.isfinite().all()) and float(logits.abs().max()) < 1e3


def test_time_interleaved_order_and_progress():
    calls: list[str] = []
    runners = {("b1", "a"): lambda: calls.append("a"), ("b1", "b"): lambda: calls.append("b")}
    lines: list[str] = []
    timing = harness.timing_settings(quick=True, runs=2, min_time=0.0, warmup=1, burst_s=0.0)
    timings = harness.time_interleaved(runners, timing=timing, progress=lines.append)
    # first runs, one warm-up round, then rounds of one run each, the order reversed every other round
    assert calls == ["a", "b", "a", "b", "a", "b", "b", "a"]
    assert [len(t.samples_ms) for t in timings.values()] == [2, 2]
    assert [len(t.rounds) for t in timings.values()] == [2, 2]
    assert lines[0].startswith("[timing] 2 runners") and lines[-1].startswith("[timing] done")
    assert any(line.startswith("[b1] a: p50") for line in lines)


def test_timing_settings_and_checks():
    assert harness.timing_settings(quick=False)["runs"] == harness.DEFAULT_RUNS
    assert harness.timing_settings(quick=True)["runs"] == harness.QUICK["runs"]
    assert harness.timing_settings(quick=True, runs=9)["runs"] == 9
    with pytest.raises(DCDDeployError, match="warm-up runs must be at least 0"):
        harness.check_arguments(
            threads=1, batch=1, input_size=64, timing=harness.timing_settings(quick=True, warmup=-1)
        )


def test_floor_records_are_medians_and_their_ratios():
    def timing(samples):
        return _timing.Timing(first_ms=99.0, samples_ms=samples, rounds=[samples])

    timings = {
        ("m", "static"): timing([10.0, 12.0, 11.0, 50.0]),  # median (11 + 12) / 2 = 11.5
        ("m", "branch"): timing([14.0, 12.0, 13.0]),  # 13
        ("m", "forming"): timing([15.0, 15.0, 90.0, 14.0, 16.0]),  # 15
        ("m", "dcd"): timing([23.0, 23.0]),
    }  # 23
    (rec,) = fl.floor_records([("m", "s")], timings)
    assert (rec.model, rec.static_model) == ("m", "s")
    assert (rec.static_ms, rec.branch_ms, rec.forming_ms, rec.dcd_ms) == (11.5, 13.0, 15.0, 23.0)
    assert rec.branch_ratio == pytest.approx(13 / 11.5) and rec.dcd_ratio == pytest.approx(2.0)
    assert rec.forming_ratio == pytest.approx(15 / 11.5) and rec.runs == 2


# -- the table formatter ------------------------------------------------------------------
def test_text_and_markdown_tables():
    cols = (_table.Column("a", 3), _table.Column("b", 4, ">"))
    rows = [["x", "1.5"], "", "  a note", ["yy", _table.number(None, ".1f")], ["a|b", "10"]]
    assert _table.text_table(cols, rows) == ["a      b", "--------", "x    1.5", "", "  a note", "yy     -", "a|b   10"]
    assert _table.markdown_table(cols, rows) == [
        "| a | b |",
        "|---|---:|",
        "| x | 1.5 |",
        "| yy | - |",
        "| a\\|b | 10 |",
    ]
    # a header wider than its column widens the dashes, not the column
    assert _table.text_table((_table.Column("long", 2, ">"),), [["1"]]) == ["long", "----", " 1"]


# -- the backend table --------------------------------------------------------------------
def test_one_backend_table():
    assert _backends.BACKENDS == lat.BACKENDS and lat.DEFAULT_BACKENDS[0] == _backends.PAPER_BACKEND
    from dcd_deploy.runtimes import BACKENDS as REGISTRY

    assert _backends.BACKENDS == tuple(REGISTRY)
    for b in REGISTRY.values():
        assert b.title and 0 < len(b.legend) <= 79 and b.source in ("model", "deploy", "onnx", "fused")
        assert b.runtime in ("torch", "onnxruntime", "openvino")
    assert set(_backends.FILE_BACKENDS) == {"onnxruntime", "openvino", "openvino-fused"}
    assert set(_backends.OPENVINO_BACKENDS) == {"openvino", "openvino-fused"}
    legend = _backends.legend_lines(["onnxruntime", "openvino"])
    assert legend[0].startswith("    onnxruntime = ") and legend[1].startswith("    openvino = ")
    with pytest.raises(DCDDeployError, match="unknown backend 'tensorrt'"):
        _backends.select_backends(["tensorrt"], [], lambda _m: None)
    assert _backends.select_backends(["torch", "torch"], [], lambda _m: None) == ["torch"]


# -- house rules of bench/ ----------------------------------------------------------------
def _modules():
    return {p.name: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(BENCH.glob("*.py"))}


def test_no_module_uses_another_modules_private_names():
    bad = []
    for name, tree in _modules().items():
        modules = set()  # names bound to modules: from . import x / from .. import y
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                if node.module is None:
                    modules |= {a.asname or a.name for a in node.names}
                else:
                    bad += [
                        f"{name}: from .{node.module} import {a.name}"
                        for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")
                    ]
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                bad.append(f"{name}: {node.value.id}.{node.attr}")
    assert not bad


#: Functions another helper is splitting (the layer-kinds work owns complexity.py).
# (the 60-line rule for every function of the package is tests/test_house.py)
