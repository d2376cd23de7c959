"""A network of the user's own that takes other than RGB images (a grey camera: one
channel), through the three commands: ``--channels`` on dcd-export and dcd-bench, the
file's own channel count in dcd-validate, and one ``Error:`` line where the channels do
not fit.

Oracles: the model run in PyTorch on the same grey input as ONNX Runtime runs the file
(independent of the parity machinery), the hand-counted MAdds of a conv, and the shapes
the file declares.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner

from dcd_deploy._factory_spec import build_from_factory
from dcd_deploy.cli.bench import main as bench_main
from dcd_deploy.cli.export import main as export_main
from dcd_deploy.cli.validate import main as validate_main

GREY = """\
import torch
from torch import nn

from dcd_deploy.layers import DCDConv2d


def build():
    torch.manual_seed(2)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, stride=2, padding=1, bias=False),
        nn.ReLU(),
        DCDConv2d(8, 8, 3),
        nn.ReLU(),
        DCDConv2d(8, 16),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 4),
    )
"""
SIZE = "24x32"
BENCH_SIZE = "32x40"  # dcd-bench's sides start at 32
FAST = ["--quick", "--runs", "2", "--warmup", "0", "--min-time", "0"]


def run(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


@pytest.fixture(scope="module")
def grey_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("grey")
    (d / "grey.py").write_text(GREY, encoding="utf-8")
    return d


@pytest.fixture
def in_grey_dir(grey_dir, monkeypatch):
    monkeypatch.chdir(grey_dir)
    return grey_dir


@pytest.mark.parametrize("mode", ["standard", "fused"])
def test_export_a_grey_model(in_grey_dir, mode):
    out = in_grey_dir / f"grey_{mode}.onnx"
    result = run(export_main, ["grey.py:build", "--channels", "1", "--input-size", SIZE, "--mode", mode, "-o", out])
    assert result.exit_code == 0, result.output
    assert "input Nx1x24x32" in result.stdout and "parity   PASS" in result.stdout
    dims = onnx.load(str(out)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[1:]] == [1, 24, 32]
    if mode == "standard":  # the fused file needs OpenVINO's extension; its parity line above ran it there
        x = torch.randn(2, 1, 24, 32, generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            expected = build_from_factory("grey.py:build").eval()(x).numpy()
        got = ort.InferenceSession(str(out)).run(None, {"input": x.numpy()})[0]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_validate_takes_the_channels_from_the_file(in_grey_dir):
    out = in_grey_dir / "grey_v.onnx"
    assert (
        run(export_main, ["grey.py:build", "--channels", "1", "--input-size", SIZE, "--no-check", "-o", out]).exit_code
        == 0
    )
    result = run(validate_main, ["grey.py:build", out, "--json", "v.json"])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout
    assert json.loads((in_grey_dir / "v.json").read_text())["inputs_description"].startswith("seeded samples")
    np.save(in_grey_dir / "grey.npy", np.random.default_rng(0).normal(size=(3, 24, 32, 1)).astype(np.float32))
    result = run(validate_main, ["grey.py:build", out, "--inputs", "grey.npy"])  # NHWC floats, one channel
    assert result.exit_code == 0, result.output
    wrong = run(validate_main, ["mobilenetv2_035", out])  # an RGB model against the grey file
    assert wrong.exit_code == 1
    assert wrong.output.strip().splitlines()[-1].startswith("Error: MobileNetV2 does not run on the file's inputs")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--channels", "1", "--preprocess", "unit"], "--preprocess describes RGB images"),
        (["--channels", "1", "--mean", "0.5", "--std", "0.2"], "--mean, --std describe RGB images"),
        (["--channels", "0"], "0 is not in the range 1<=x<=64"),
    ],
)
def test_export_refuses_what_does_not_fit_the_channels(in_grey_dir, args, message):
    result = run(export_main, ["grey.py:build", "--input-size", SIZE, "-o", "x.onnx", *args])
    assert result.exit_code == 2 and message in result.output
    assert not (in_grey_dir / "x.onnx").exists()


def test_export_of_a_grey_model_as_rgb_is_one_error_line(in_grey_dir):
    result = run(export_main, ["grey.py:build", "--input-size", SIZE, "-o", "x.onnx"])
    assert result.exit_code == 1
    assert "to have 1 channels, but got 3" in result.output.strip().splitlines()[-1]


def test_bench_a_grey_model(in_grey_dir):
    result = run(
        bench_main,
        [
            "latency",
            "--models",
            "grey.py:build",
            "--channels",
            "1",
            "--input-size",
            BENCH_SIZE,
            "--backends",
            "torch,onnxruntime",
            "--json",
            "b.json",
            *FAST,
        ],
    )
    assert result.exit_code == 0, result.output
    assert "input 32x40, 1 channel;" in result.stdout
    assert json.loads((in_grey_dir / "b.json").read_text())["machine"]["channels"] == 1
    records = json.loads((in_grey_dir / "b.json").read_text())["records"]
    madds = {(r["backend"], r["variant"]): r["madds_m"] for r in records}
    # static partner on 16x20 maps: conv 8·320·1·9 + the two W0 convs 8·320·8·9 and 16·320·8
    # + linear 16·4 + the global pool's adds 16·320 (the conventions of bench.complexity)
    static = (8 * 320 * 9 + 8 * 320 * 72 + 16 * 320 * 8 + 16 * 4 + 16 * 320) / 1e6
    assert madds["torch", "static"] == pytest.approx(static)
    assert madds["torch", "dcd"] > madds["torch", "static"]


def test_bench_of_a_grey_model_as_rgb_is_one_error_line(in_grey_dir):
    result = run(
        bench_main, ["latency", "--models", "grey.py:build", "--input-size", BENCH_SIZE, "--backends", "torch", *FAST]
    )
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: Sequential does not run on a (1, 3, 32, 40) input") and "--channels" in last
