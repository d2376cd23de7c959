"""``dcd_deploy.bench.floor``: timing-only variants that keep a DCD model's dynamic parts
but apply only W0.

Oracles: the static zoo model's own export (its Conv count), the full DCD export (its
branch pooling), and a PyTorch network built here that applies each DCD layer's folded
W0 and bias with ``F.conv2d`` / ``F.linear`` (what the floor files must compute).
"""

from __future__ import annotations

import copy
import functools
import json
from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from torch import nn

from dcd_deploy import create_model, export_onnx, pseudo_train
from dcd_deploy.bench.floor import STAGES, floor_onnx
from dcd_deploy.cli.bench import main
from dcd_deploy.errors import UnsupportedInputError
from dcd_deploy.exporters import DeployDCD, to_deploy
from dcd_deploy.models import synthetic_images

SIZE = 64
NAME = "mobilenetv2_035_dcd"


class _W0Only(nn.Module):
    """Reference: a deploy-form DCD layer reduced to its folded W0 and bias."""

    def __init__(self, layer: DeployDCD):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        m = self.layer
        if m.kind == "linear":
            return F.linear(x, m.w0, m.bias + (m.b0 if m.b0 is not None else 0.0))
        groups = m.c_out if m.kind == "depthwise" else 1
        return F.conv2d(x, m.w0, m.bias, m.stride, m.kernel_size // 2, groups=groups)


@pytest.fixture(scope="module")
def model():
    return pseudo_train(create_model(NAME), seed=3, input_size=SIZE)


@pytest.fixture(scope="module")
def floor(model):
    """``floor(stage)``: ``floor_onnx(model, stage=stage)``, built once per stage (tests only read it)."""
    return functools.cache(lambda stage: floor_onnx(model, stage=stage, input_size=SIZE))


def _ops(proto) -> Counter:
    return Counter(n.op_type for n in proto.graph.node)


def _run(proto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


@pytest.mark.parametrize("stage", STAGES)
def test_floor_computes_the_w0_only_network(model, floor, stage):
    deploy = to_deploy(model, input_size=SIZE)
    ref_net = copy.deepcopy(deploy)
    for name, mod in list(ref_net.named_modules()):
        if isinstance(mod, DeployDCD):
            parent, _, child = name.rpartition(".")
            setattr(ref_net.get_submodule(parent) if parent else ref_net, child, _W0Only(mod))
    x = synthetic_images(3, SIZE, seed=9)  # batch 3: the dynamic batch axis works
    with torch.no_grad():
        ref = ref_net(x).numpy()
        dcd = model(x).numpy()
    out = _run(floor(stage), x.numpy())
    scale = float(np.abs(ref).max())
    np.testing.assert_allclose(out, ref, atol=1e-5 + 1e-3 * scale, rtol=0)  # the parity contract
    assert np.abs(out - dcd).max() > 0.1 * scale  # not the DCD model: W(x) is not applied


def test_floor_keeps_the_branch_and_only_the_static_convs(model, floor, tmp_path):
    static = export_onnx(
        pseudo_train(create_model("mobilenetv2_035"), input_size=SIZE),
        tmp_path / "s.onnx",
        input_size=SIZE,
        check=False,
        simplify=False,
    )
    full = export_onnx(model, tmp_path / "d.onnx", input_size=SIZE, check=False, simplify=False)
    branch = _ops(floor("branch"))
    forming = _ops(floor("forming"))
    assert branch["Conv"] == forming["Conv"] == static.op_histogram["Conv"]
    for pool in ("AveragePool", "GlobalAveragePool"):
        assert branch[pool] == forming[pool] == full.op_histogram.get(pool, 0)
    assert branch["MatMul"] == 0
    weight_layers = sum(v == "weight" for v in full.strategies.values())
    assert weight_layers > 0 and forming["MatMul"] == 2 * weight_layers  # P·Φ' and (PΦ')·Q per layer
    tie = [n for n in floor("branch").graph.node if n.name.startswith("floor/")]
    assert [n.op_type for n in tie] == ["Concat", "ReduceSum", "Mul", "Add"]


def test_floor_refuses_a_model_without_dcd_layers():
    with pytest.raises(UnsupportedInputError, match="no DCD layer"):
        floor_onnx(create_model("mobilenetv2_035"), stage="branch", input_size=SIZE)


def test_cli_floor_quick_table_and_json(tmp_path):
    out = tmp_path / "floor.json"
    result = CliRunner().invoke(
        main, ["floor", "--quick", "--models", NAME, "--input-size", str(SIZE), "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith(NAME))
    assert row.count(" x") == 3  # branch, forming and full ratios
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["schema"] == "dcd-bench.floor/1" and data["input_size"] == SIZE and data["version"]
    assert data["settings"]["models"] == [NAME] and data["settings"]["quick"] is True
    (rec,) = data["records"]
    assert rec["model"] == NAME and rec["static_model"] == "mobilenetv2_035"
    for key in ("branch", "forming", "dcd"):
        assert rec[f"{key}_ratio"] == pytest.approx(rec[f"{key}_ms"] / rec["static_ms"])


@pytest.mark.parametrize(
    "args, code, text",
    [
        (["floor", "--models", "mobilenetv2_035"], 1, "Error: --floor takes DCD models"),
        (["floor", "--models", "nosuchnet_dcd"], 1, "Error: "),
        (
            ["floor", "--backends", "onnxruntime"],
            2,
            "dcd-bench floor does not take --backends (it applies to dcd-bench latency and frontier)",
        ),
        (["--floor", "--complexity"], 2, "separate runs"),
    ],
)
def test_cli_floor_bad_input(args, code, text):
    result = CliRunner().invoke(main, args + ["--quick"])
    assert result.exit_code == code
    assert text in result.output
    assert "Traceback" not in result.output


def test_cli_floor_takes_a_checkpoint_of_a_dcd_model(tmp_path):
    from dcd_deploy import save_checkpoint

    path = tmp_path / "mine.pt"
    save_checkpoint(create_model(NAME), path)
    result = CliRunner().invoke(main, ["floor", "--quick", "--models", str(path), "--input-size", str(SIZE)])
    assert result.exit_code == 0, result.output
    assert any(line.startswith("mine ") for line in result.stdout.splitlines())
    assert "static mobilenetv2_035," in result.stderr  # the zoo's static partner of its arch
