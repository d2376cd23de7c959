"""The paper-conditions backend (torch-paper): oneDNN really off during its runs, and only
during them; restored after; its records and defaults. No timing is asserted."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dcd_deploy.bench import _models, _runners, _timing, harness
from dcd_deploy.bench import latency as lat
from dcd_deploy.errors import DCDDeployError


class Spy(nn.Module):
    """Records whether oneDNN is enabled each time it runs."""

    def __init__(self, fail: bool = False):
        super().__init__()
        self.seen: list[bool] = []
        self.fail = fail

    def forward(self, x):
        self.seen.append(torch.backends.mkldnn.enabled)
        if self.fail:
            raise RuntimeError("boom")
        return x


def test_native_runner_turns_onednn_off_for_its_calls_only():
    assert torch.backends.mkldnn.enabled
    spy, other = Spy(), Spy()
    native, eager = _runners.torch_native_runner(spy, torch.zeros(1)), _runners.torch_runner(other, torch.zeros(1))
    for _ in range(3):
        native()
        eager()
    assert spy.seen == [False] * 3 and other.seen == [True] * 3
    assert torch.backends.mkldnn.enabled  # restored


def test_native_runner_restores_onednn_after_an_error():
    run = _runners.torch_native_runner(Spy(fail=True), torch.zeros(1))
    with pytest.raises(RuntimeError, match="boom"):
        run()
    assert torch.backends.mkldnn.enabled


def test_run_benchmark_convs_see_onednn_off_under_paper_conditions_only(monkeypatch):
    seen: dict[tuple, set] = {}
    current: list = [None]
    real_conv = torch.nn.functional.conv2d

    def conv2d(*args, **kwargs):
        seen.setdefault(current[0], set()).add(torch.backends.mkldnn.enabled)
        return real_conv(*args, **kwargs)

    def watched(runners, **kwargs):
        wrapped = {}
        for key, run in runners.items():

            def call(key=key, run=run):
                current[0] = key
                try:
                    return run()
                finally:
                    current[0] = None

            wrapped[key] = call
        return _timing.measure_interleaved(wrapped, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "conv2d", conv2d)
    monkeypatch.setattr(harness, "measure_interleaved", watched)
    models = ["mobilenetv2_035", "mobilenetv2_035_dcd"]
    result = lat.run_benchmark(models, backends=["torch-paper", "torch-deploy"], input_size=64, quick=True)
    for name in models:
        assert seen[("torch-paper", name)] == {False}
        assert seen[("torch-deploy", name)] == {True}
    assert torch.backends.mkldnn.enabled
    assert [r.backend for r in result.records] == ["torch-paper"] * 2 + ["torch-deploy"] * 2
    # at 64x64 it is oneDNN off but not the paper's conditions, and says so
    assert not any(r.paper_conditions for r in result.records)
    assert any("not the paper's batch 1, 224x224" in n for n in result.notes)
    assert result.settings["paper_conditions"]["onednn"] is False


def test_records_under_paper_conditions_carry_the_paper():
    entries = _models.pair_models(["mobilenetv2_050", "mobilenetv2_050_dcd"])
    timings = {
        (b, e.name): _timing.Timing(first_ms=1.0, samples_ms=[base, base], rounds=[[base], [base]])
        for b in ("torch-paper", "onnxruntime")
        for e, base in zip(entries, (30.0, 34.5))
    }
    meta = {
        e.name: {
            "source": "zoo",
            "params_m": 2.0,
            "madds_m": 100.0,
            "madds_form": "any",
            "madds_latent_m": 1.0,
            "madds_weight_m": 1.0,
        }
        for e in entries
    }
    recs = lat.build_records(entries, ["torch-paper", "onnxruntime"], timings, meta, lambda b, n: None, paper=True)
    paper = [r for r in recs if r.backend == "torch-paper"]
    assert all(r.paper_conditions for r in paper)
    assert not any(r.paper_conditions for r in recs if r.backend == "onnxruntime")
    dcd = paper[1]
    assert dcd.ratio_to_static == pytest.approx(1.15) and dcd.ratio_mean == pytest.approx(1.15)
    assert dcd.paper_ms == 104.0 and dcd.paper_ratio == pytest.approx(104 / 91)


def test_defaults_and_thread_check():
    assert lat.default_backends(1)[0] == "torch-paper"
    assert "torch-paper" not in lat.default_backends(2)
    with pytest.raises(DCDDeployError, match="--threads 1"):
        lat.run_benchmark(["mobilenetv2_035"], backends=["torch-paper"], threads=2)


def test_torch_profile_groups_a_dcd_deploy_form_under_paper_conditions():
    from dcd_deploy import create_model
    from dcd_deploy.bench.profile import GROUPS
    from dcd_deploy.bench.torch_profile import profile_torch
    from dcd_deploy.exporters import to_deploy

    x = torch.randn(1, 3, 64, 64)
    seen = []
    static = to_deploy(create_model("mobilenetv2_035").eval(), strategy="auto", input_size=64)
    dcd = to_deploy(create_model("mobilenetv2_035_dcd").eval(), strategy="auto", input_size=64)
    static.register_forward_pre_hook(lambda m, i: seen.append(torch.backends.mkldnn.enabled))
    b_static = profile_torch(static, x, runs=2, warmup=1, onednn=False)
    b_dcd = profile_torch(dcd, x, runs=2, warmup=1, onednn=False)
    assert seen == [False] * 3 and torch.backends.mkldnn.enabled
    for b in (b_static, b_dcd):
        assert set(b.groups) == set(GROUPS) and b.runs == 2
        assert b.nodes_ms == pytest.approx(sum(g.ms for g in b.groups.values()))
        assert b.groups["static_conv"].nodes > 0
    assert b_static.groups["dynamic_branch"].nodes == 0  # no branch in a static model
    assert b_dcd.groups["dynamic_branch"].nodes > 0
    assert b_dcd.groups["latent_path"].nodes + b_dcd.groups["weight_build"].nodes > 0
    layers = [m for m in dcd.modules() if type(m).__name__ == "DeployDCD"]
    assert layers and not any("branch" in vars(m) for m in layers)  # the instance wrappers are gone
