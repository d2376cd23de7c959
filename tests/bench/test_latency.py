"""Latency bench internals: statistics on synthetic timings, pairing, interleaving, the JSON schema.

No test here times a model or asserts a timing.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dcd_deploy.bench import _backends, _lineup, _machine, _models, _runner_cache, _stats, _timing
from dcd_deploy.bench import latency as lat
from dcd_deploy.errors import DCDDeployError

# The documented record keys (docs/bench.md); changing them is a schema change.
RECORD_KEYS = {
    "model",
    "variant",
    "name",
    "source",
    "backend",
    "params_m",
    "madds_m",
    "madds_form",
    "madds_latent_m",
    "madds_weight_m",
    "p50_ms",
    "p10_ms",
    "p90_ms",
    "mean_ms",
    "std_ms",
    "min_ms",
    "max_ms",
    "first_run_ms",
    "n_runs",
    "n_rounds",
    "total_s",
    "ratio_to_static",
    "ratio_ci95",
    "ratio_ci_method",
    "ratio_rounds",
    "ratio_p10",
    "cpu_p50_ms",
    "ratio_cpu",
    "paper_ms",
    "paper_ratio",
    "dcd_forms",
    "ratio_mean",
    "paper_conditions",
}
MACHINE_KEYS = {
    "cpu",
    "cores",
    "cpus_usable",
    "platform",
    "python",
    "torch",
    "onnxruntime",
    "openvino",
    "dcd_deploy",
    "threads",
    "torch_interop_threads",
    "batch",
    "input_size",
    "date",
    "load_avg",
    "channels",
    "inputs",
}


# -- statistics ---------------------------------------------------------------------------
def test_summary_of_known_array():
    s = _stats.summarize(list(range(1, 11)))
    assert s.n == 10
    assert s.p50 == pytest.approx(5.5)
    assert s.p90 == pytest.approx(9.1)  # linear interpolation: 9 + 0.1 * (10 - 9)
    assert s.mean == pytest.approx(5.5)
    assert s.std == pytest.approx(np.std(np.arange(1, 11), ddof=1))
    assert (s.min, s.max) == (1.0, 10.0)


def test_summary_of_one_run_has_zero_spread():
    s = _stats.summarize([3.0])
    assert (s.p50, s.p90, s.mean, s.std, s.min, s.max) == (3.0, 3.0, 3.0, 0.0, 3.0, 3.0)


def test_quantile_and_bad_input():
    assert _stats.quantile([4, 1, 3, 2], 0.5) == pytest.approx(2.5)
    assert _stats.quantile([4, 1, 3, 2], 0.0) == 1.0
    with pytest.raises(ValueError):
        _stats.quantile([1.0], 1.5)
    with pytest.raises(ValueError):
        _stats.summarize([])
    with pytest.raises(ValueError):
        _stats.summarize([1.0, float("nan")])


def test_ratio_of_medians():
    assert _stats.ratio_of_medians([2, 4, 6, 100], [1, 2, 3]) == pytest.approx(5.0 / 2.0)
    assert _stats.ratio_of_medians([10.0], [4.0]) == pytest.approx(2.5)
    with pytest.raises(ValueError):
        _stats.ratio_of_medians([1.0], [0.0])


def test_bootstrap_of_constant_samples_is_exact():
    lo, hi = _stats.bootstrap_ratio_ci([2.0] * 30, [1.0] * 20)
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)


def test_bootstrap_interval_covers_the_true_ratio_and_is_reproducible():
    rng = np.random.default_rng(1)
    den = 10.0 + rng.exponential(0.5, size=400)
    num = 1.5 * (10.0 + rng.exponential(0.5, size=400))
    first = _stats.bootstrap_ratio_ci(num, den, seed=3)
    assert first == _stats.bootstrap_ratio_ci(num, den, seed=3)
    lo, hi = first
    assert lo < _stats.ratio_of_medians(num, den) < hi
    assert lo < 1.5 < hi
    assert hi - lo < 0.05  # 400 runs each with a 5% spread: a narrow interval
    lo90, hi90 = _stats.bootstrap_ratio_ci(num, den, seed=3, level=0.5)
    assert lo <= lo90 <= hi90 <= hi  # a lower level gives a nested, narrower interval


def test_bootstrap_in_chunks(monkeypatch):
    monkeypatch.setattr(_stats, "_CHUNK_ELEMENTS", 1000)  # 100-run arrays: 10 resamples per chunk
    rng = np.random.default_rng(2)
    den = 5.0 + rng.random(100)
    lo, hi = _stats.bootstrap_ratio_ci(2.0 * den, den, n_boot=55)
    assert lo < 2.0 < hi and hi - lo < 0.2


def test_bootstrap_rejects_bad_arguments():
    with pytest.raises(ValueError):
        _stats.bootstrap_ratio_ci([1.0], [1.0], level=1.0)
    with pytest.raises(ValueError):
        _stats.bootstrap_ratio_ci([1.0], [1.0], n_boot=0)


def test_paired_rounds_bootstrap():
    # Round speeds drift 1x..3x, the same for both models: the ratio is 2 in every round.
    den = [[1.0 * k, 1.1 * k] for k in (1, 2, 3, 1, 2)]
    num = [[2.0 * v for v in r] for r in den]
    lo, hi = _stats.paired_rounds_bootstrap_ci(num, den)
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)  # drift cancels, pairs are kept
    iid_lo, iid_hi = _stats.bootstrap_ratio_ci([v for r in num for v in r], [v for r in den for v in r])
    assert iid_hi - iid_lo > 0.5  # unpaired, the drift shows up as spread
    # Ratios that differ by round widen the interval; a reproducible one.
    num = [[2.0], [2.0], [3.0], [2.5], [2.2], [2.8]]
    den = [[1.0]] * 6
    first = _stats.paired_rounds_bootstrap_ci(num, den, seed=5)
    assert first == _stats.paired_rounds_bootstrap_ci(num, den, seed=5)
    assert 2.0 <= first[0] < first[1] <= 3.0
    with pytest.raises(ValueError):
        _stats.paired_rounds_bootstrap_ci([[1.0]], [[1.0]])


def test_round_ratios_and_spread():
    num = [[2.0, 2.2, 2.1], [3.0], [], [4.0, 4.0]]
    den = [[1.0, 1.0, 1.1], [1.5], [1.0], [2.0]]
    ratios = _stats.round_ratios(num, den)
    assert ratios == pytest.approx([2.1, 2.0, 2.0])  # the empty round is skipped
    s = _stats.spread(ratios)
    assert s["n"] == 3 and s["p50"] == pytest.approx(2.0)
    assert s["p10"] == pytest.approx(2.0) and s["p90"] == pytest.approx(2.08)
    with pytest.raises(ValueError):
        _stats.round_ratios([[1.0]], [])


# -- pairing ------------------------------------------------------------------------------
def test_pairing_orders_by_pair_static_first():
    entries = _models.pair_models(["mobilenetv2_100_dcd", "mobilenetv2_050", "mobilenetv2_100", "mobilenetv2_050_dcd"])
    assert [(e.model, e.variant, e.name) for e in entries] == [
        ("mobilenetv2_100", "static", "mobilenetv2_100"),
        ("mobilenetv2_100", "dcd", "mobilenetv2_100_dcd"),
        ("mobilenetv2_050", "static", "mobilenetv2_050"),
        ("mobilenetv2_050", "dcd", "mobilenetv2_050_dcd"),
    ]


def test_pairing_of_paths_and_other_kinds():
    entries = _models.pair_models(
        ["/ckpt/mobilenetv2_035_dcd.pth.tar", " mine.pt ", "resnet18_dyconv", "mobilenetv2_035.pt"]
    )
    got = {(e.name, e.model, e.variant) for e in entries}
    assert got == {
        ("mobilenetv2_035_dcd", "mobilenetv2_035", "dcd"),
        ("mine", "mine", "static"),
        ("resnet18_dyconv", "resnet18", "dyconv"),
        ("mobilenetv2_035", "mobilenetv2_035", "static"),
    }
    assert [e.name for e in entries] == ["mobilenetv2_035", "mobilenetv2_035_dcd", "mine", "resnet18_dyconv"]
    assert entries[1].spec == "/ckpt/mobilenetv2_035_dcd.pth.tar"  # the spec is kept as given


def test_pairing_errors():
    with pytest.raises(DCDDeployError, match="twice"):
        _models.pair_models(["mobilenetv2_050", "mobilenetv2_050"])
    with pytest.raises(DCDDeployError, match="no models"):
        _models.pair_models([" ", ""])


def test_paper_figures():
    assert lat.paper_ms("mobilenetv2_100", "dcd") == 163.0
    assert lat.paper_ratio("mobilenetv2_050", "dcd") == pytest.approx(104.0 / 91.0)
    assert lat.paper_ratio("mobilenetv2_050", "static") is None
    assert lat.paper_ms("resnet18", "static") is None


# -- interleaving -------------------------------------------------------------------------
class FakeClock:
    """A nanosecond clock that runners advance by a fixed cost."""

    def __init__(self):
        self.now = 0
        self.calls: list[str] = []

    def __call__(self) -> int:
        return self.now

    def runner(self, name: str, ms: float):
        def run():
            self.calls.append(name)
            self.now += int(ms * 1e6)

        return run


def test_measure_interleaved_alternates_and_meets_both_targets():
    clock = FakeClock()
    runners = {"a": clock.runner("a", 2.0), "b": clock.runner("b", 3.0)}
    t = _timing.measure_interleaved(
        runners, runs=4, min_time=0.05, warmup=2, burst_s=0.01, clock=clock, cpu_clock=clock
    )
    assert clock.calls[:2] == ["a", "b"]  # first runs
    assert clock.calls[2:6] == ["a", "b", "b", "a"]  # warm-up, alternating order
    assert t["a"].first_ms == pytest.approx(2.0) and t["b"].warmup_ms == pytest.approx([3.0, 3.0])
    assert (t["a"].burst, t["b"].burst) == (5, 3)  # 10 ms bursts
    body = clock.calls[6:]
    assert body[:8] == ["a"] * 5 + ["b"] * 3  # round 0: a then b
    assert body[8:16] == ["b"] * 3 + ["a"] * 5  # round 1 reversed
    for name, ms in (("a", 2.0), ("b", 3.0)):
        assert len(t[name].samples_ms) >= 4 and t[name].total_s >= 0.05
        assert set(t[name].samples_ms) == set(t[name].cpu_ms) == {ms}
        assert sum(len(r) for r in t[name].rounds) == len(t[name].samples_ms)
    assert len(t["a"].rounds) == len(t["b"].rounds) == 6  # b: 50 ms at 9 ms a round takes 6 rounds


def test_measure_interleaved_reports_progress_per_round():
    clock = FakeClock()
    seen = []
    _timing.measure_interleaved(
        {"x": clock.runner("x", 1.0), "y": clock.runner("y", 4.0)},
        runs=2,
        min_time=0.02,
        warmup=0,
        burst_s=0.004,
        clock=clock,
        on_round=lambda r, f: seen.append((r, f)),
    )
    assert [r for r, _ in seen] == list(range(1, len(seen) + 1))
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and fractions[0] < 1.0


def test_measure_interleaved_run_count_only():
    clock = FakeClock()
    t = _timing.measure_interleaved(
        {"x": clock.runner("x", 1.0)}, runs=7, min_time=0.0, warmup=0, burst_s=0.002, clock=clock
    )
    assert t["x"].burst == 2 and len(t["x"].samples_ms) == 8 and not t["x"].warmup_ms
    with pytest.raises(ValueError):
        _timing.measure_interleaved({"x": clock.runner("x", 1.0)}, runs=0, min_time=0.0, warmup=0)


# -- machine info and records -------------------------------------------------------------
def test_cpu_model_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7551P 32-Core\n")
    assert _machine.cpu_model(info) == "AMD EPYC 7551P 32-Core"
    assert _machine.cpu_model(tmp_path / "missing")  # falls back to the platform's name


def _synthetic_result() -> lat.BenchResult:
    entries = _models.pair_models(["mobilenetv2_050", "mobilenetv2_050_dcd"])
    rng = np.random.default_rng(0)
    timings, meta = {}, {}
    for backend in ("torch", "onnxruntime"):
        for e, base in zip(entries, (10.0, 12.0)):
            rounds = [list(base + rng.random(5)) for _ in range(4)]
            samples = [v for r in rounds for v in r]
            timings[(backend, e.name)] = _timing.Timing(
                first_ms=50.0, warmup_ms=[11.0], samples_ms=samples, rounds=rounds, cpu_ms=[0.9 * v for v in samples]
            )
    for e in entries:
        meta[e.name] = {
            "source": "zoo",
            "params_m": 2.0,
            "madds_m": 100.0,
            "madds_form": "min",
            "madds_latent_m": 130.0,
            "madds_weight_m": 140.0,
        }
    forms = {("onnx", "mobilenetv2_050_dcd"): {"weight": 25, "latent": 9}}
    records = lat.build_records(
        entries,
        ["torch", "onnxruntime"],
        timings,
        meta,
        lambda backend, name: _runner_cache.forms_of(forms, backend, name),
    )
    machine = _machine.machine_info(threads=1, batch=1, input_size=224)
    return lat.BenchResult(
        machine=machine,
        settings={"runs": 20, "min_time_s": 1.0, "warmup": 1},
        records=records,
        notes=["openvino not installed, skipped"],
    )


def test_records_carry_ratio_spread_and_paper():
    result = _synthetic_result()
    assert [(r.backend, r.variant) for r in result.records] == [
        ("torch", "static"),
        ("torch", "dcd"),
        ("onnxruntime", "static"),
        ("onnxruntime", "dcd"),
    ]
    dcd = result.record("mobilenetv2_050", "dcd", "onnxruntime")
    static = result.record("mobilenetv2_050", "static", "onnxruntime")
    assert dcd.ratio_to_static == pytest.approx(dcd.p50_ms / static.p50_ms)
    lo, hi = dcd.ratio_ci95
    assert lo <= dcd.ratio_to_static <= hi and dcd.ratio_ci_method == lat.CI_ROUNDS
    assert dcd.ratio_rounds["n"] == 4
    assert dcd.ratio_p10 == pytest.approx(dcd.p10_ms / static.p10_ms)
    assert static.p10_ms <= static.p50_ms <= static.p90_ms
    assert dcd.cpu_p50_ms == pytest.approx(0.9 * dcd.p50_ms)
    assert dcd.ratio_cpu == pytest.approx(dcd.ratio_to_static)
    assert dcd.paper_ms == 104.0 and dcd.paper_ratio == pytest.approx(104.0 / 91.0)
    assert static.ratio_to_static is None and static.paper_ms == 91.0 and static.paper_ratio is None
    assert dcd.dcd_forms == {"weight": 25, "latent": 9}
    assert result.record("mobilenetv2_050", "dcd", "torch").dcd_forms is None


def test_json_schema_of_a_result():
    data = json.loads(json.dumps(_synthetic_result().to_dict()))  # plain JSON types only
    assert data["schema"] == lat.SCHEMA
    assert set(data) == {"schema", "version", "machine", "settings", "records", "profiles", "notes"}
    assert set(data["machine"]) == MACHINE_KEYS
    assert isinstance(data["machine"]["cores"], int) and isinstance(data["machine"]["cpu"], str)
    for r in data["records"]:
        assert set(r) == RECORD_KEYS
        for key in ("params_m", "p50_ms", "p90_ms", "mean_ms", "min_ms", "first_run_ms", "total_s"):
            assert isinstance(r[key], float) and math.isfinite(r[key])
        assert isinstance(r["n_runs"], int) and isinstance(r["n_rounds"], int)
        assert r["variant"] in ("static", "dcd")
        if r["variant"] == "dcd":
            assert isinstance(r["ratio_to_static"], float) and len(r["ratio_ci95"]) == 2
            assert set(r["ratio_rounds"]) == {"n", "p10", "p50", "p90"}
    assert data["notes"] == ["openvino not installed, skipped"]


def test_backend_checks_come_before_any_work(monkeypatch):
    with pytest.raises(DCDDeployError, match="unknown backend"):
        lat.run_benchmark(["mobilenetv2_050"], backends=["tensorrt"])
    real = _backends.importlib.util.find_spec
    monkeypatch.setattr(
        _backends.importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a)
    )
    lines = []
    with pytest.raises(DCDDeployError, match="no backend left"):
        lat.run_benchmark(["mobilenetv2_050"], backends=["openvino", "openvino-fused"], progress=lines.append)
    assert lines == ["openvino not installed, openvino skipped", "openvino not installed, openvino-fused skipped"]


def test_argument_checks():
    with pytest.raises(DCDDeployError, match="threads"):
        lat.run_benchmark(["mobilenetv2_050"], threads=0)
    with pytest.raises(DCDDeployError, match="min time"):
        lat.run_benchmark(["mobilenetv2_050"], min_time=-1.0)


def test_load_model_checkpoint_paths(tmp_path):
    import torch

    from dcd_deploy import create_model, save_checkpoint

    model = create_model("mobilenetv2_035")
    save_checkpoint(model, tmp_path / "mine.pt")
    loaded, source = _models.load_model(str(tmp_path / "mine.pt"), input_size=64)
    assert source == "checkpoint" and loaded.arch == "mobilenetv2_035"
    torch.save(model.state_dict(), tmp_path / "mobilenetv2_035.pth")  # plain: named after the zoo model
    loaded, _ = _models.load_model(str(tmp_path / "mobilenetv2_035.pth"), input_size=64)
    assert loaded.arch == "mobilenetv2_035"
    torch.save(model.state_dict(), tmp_path / "plain.pth")
    with pytest.raises(DCDDeployError, match="does not name its architecture"):
        _models.load_model(str(tmp_path / "plain.pth"), input_size=64)
    with pytest.raises(DCDDeployError, match="did you mean"):
        _models.load_model("mobilenetv2_10", input_size=64)


# -- checkpoints named and paired by the architecture they hold ------------------------------
def test_checkpoint_name_keeps_dots_and_drops_the_suffix():
    assert _models.entry_name("/x/mv2_x0.5_official.pth.tar") == "mv2_x0.5_official"
    assert _models.entry_name("net.v2.pt") == "net.v2" and _models.entry_name("a.tar") == "a"
    assert _models.entry_name("weights.pth") == "weights" and _models.entry_name("noext") == "noext"
    assert _models.entry_name("mobilenetv2_050") == "mobilenetv2_050"


def test_checkpoint_pairs_by_its_arch_not_its_file_name():
    entries = _models.pair_models(
        ["mv2_x0.5_official.pth.tar", "mobilenetv2_050"], archs={"mv2_x0.5_official.pth.tar": "mobilenetv2_050_dcd"}
    )
    assert [(e.name, e.model, e.variant) for e in entries] == [
        ("mobilenetv2_050", "mobilenetv2_050", "static"),
        ("mv2_x0.5_official", "mobilenetv2_050", "dcd"),
    ]
    with pytest.raises(DCDDeployError, match="both the dcd mobilenetv2_050"):
        _models.pair_models(["a.pt", "b.pt"], archs={"a.pt": "mobilenetv2_050_dcd", "b.pt": "mobilenetv2_050_dcd"})


def test_build_reads_the_arch_of_a_saved_checkpoint(tmp_path):
    from dcd_deploy import create_model, save_checkpoint

    path = tmp_path / "mv2_x0.35_official.pth.tar"
    save_checkpoint(create_model("mobilenetv2_035_dcd"), path)
    entries, built, meta = _lineup.build_models(
        [str(path), "mobilenetv2_035"], input_size=64, seed=0, trust_checkpoint=False, progress=lambda _m: None
    )
    assert [(e.name, e.model, e.variant) for e in entries] == [
        ("mobilenetv2_035", "mobilenetv2_035", "static"),
        ("mv2_x0.35_official", "mobilenetv2_035", "dcd"),
    ]
    assert meta["mv2_x0.35_official"]["source"] == "checkpoint" and set(built) == {e.name for e in entries}
