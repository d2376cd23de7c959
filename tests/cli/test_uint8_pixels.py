"""A model that takes a camera's uint8 pixels and normalises them inside ``forward``:
``dcd-export --preprocess uint8`` writes a file of uint8 input, checked on uint8 images;
``dcd-validate`` and ``dcd-bench`` feed such a file uint8 pixels by themselves.

Oracles: eager PyTorch on the same uint8 pixels (the file must compute the model on them,
not on floats), the file's declared input type, and hand-computed pixel rounding.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from _cli import one_error_line
from click.testing import CliRunner

from dcd_deploy.bench.harness import fixed_input
from dcd_deploy.cli.bench import main as bench_main
from dcd_deploy.cli.export import main as export_main
from dcd_deploy.cli.validate import main as validate_main
from dcd_deploy.errors import DCDDeployError
from dcd_deploy.preprocess import PRESETS, make_preprocess

PIXEL_NET = """\
import torch
from torch import nn
import torch.nn.functional as F
from dcd_deploy.layers import DCDConv2d


class PixelNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([123.7, 116.3, 103.5]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([58.4, 57.1, 57.4]).view(1, 3, 1, 1))
        self.stem = nn.Conv2d(3, 8, 3, 2, 1)
        self.dcd = DCDConv2d(8, 16)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        assert x.dtype == torch.uint8, x.dtype  # a float input would be a wrong file
        x = (x.float() - self.mean) / self.std
        return self.head(F.relu(self.dcd(F.relu(self.stem(x)))).mean((2, 3)))


def build():
    torch.manual_seed(0)
    return PixelNet().eval()
"""


def run(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


def test_the_uint8_preset_rounds_pixels_and_takes_no_normalisation():
    pixels = torch.tensor([0.0, 0.5, 1.0, 0.2]).view(1, 1, 2, 2).expand(1, 3, 2, 2)
    out = PRESETS["uint8"].apply(pixels)
    assert out.dtype == torch.uint8
    assert out[0, 0].flatten().tolist() == [0, 128, 255, 51]  # round(255 * p): 127.5 -> 128, 51.0
    assert make_preprocess("uint8", bgr=True).apply(torch.arange(3.0).view(1, 3, 1, 1) / 255)[0, :, 0, 0].tolist() == [
        2,
        1,
        0,
    ]
    with pytest.raises(DCDDeployError, match="no mean, std or scale"):
        make_preprocess("uint8", mean=(1.0, 1.0, 1.0))


@pytest.fixture(scope="module")
def pixel_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("pixels")
    (d / "pixel_net.py").write_text(PIXEL_NET, encoding="utf-8")
    out = d / "pixel.onnx"
    result = run(
        export_main, [f"{d / 'pixel_net.py'}:build", "--input-size", "24x32", "--preprocess", "uint8", "-o", out]
    )
    assert result.exit_code == 0, result.output
    return d, out, result.output


def _model(d):
    from dcd_deploy._factory_spec import build_from_factory

    return build_from_factory(f"{d / 'pixel_net.py'}:build")


def test_export_writes_a_uint8_input_that_computes_the_model_on_pixels(pixel_file):
    d, path, output = pixel_file
    proto = onnx.load(str(path))
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert "parity   PASS" in output
    checked_on = {p.key: p.value for p in proto.metadata_props}["dcd_deploy.parity_inputs"]
    assert "uint8 (pixels 0-255 as uint8" in checked_on
    pixels = torch.randint(0, 256, (3, 3, 24, 32), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    with torch.no_grad():
        want = _model(d)(pixels).numpy()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: pixels.numpy()})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_validate_feeds_a_uint8_file_pixels_and_refuses_a_float_preset(pixel_file, tmp_path):
    d, path, _ = pixel_file
    model = f"{d / 'pixel_net.py'}:build"
    result = run(validate_main, [model, path, "--json", tmp_path / "r.json"])
    assert result.exit_code == 0, result.output
    assert "uint8" in json.loads((tmp_path / "r.json").read_text())["inputs_description"]
    np.save(tmp_path / "px.npy", np.random.default_rng(0).integers(0, 256, (2, 24, 32, 3), dtype=np.uint8))
    assert run(validate_main, [model, path, "--inputs", tmp_path / "px.npy"]).exit_code == 0
    one_error_line(run(validate_main, [model, path, "--preprocess", "caffe"]), "takes uint8 images")


def test_export_refuses_float_inputs_for_a_uint8_model(pixel_file, tmp_path):
    d, _, _ = pixel_file
    np.save(tmp_path / "f.npy", np.zeros((2, 3, 24, 32), np.float32))
    args = [
        f"{d / 'pixel_net.py'}:build",
        "--inputs",
        tmp_path / "f.npy",
        "--preprocess",
        "uint8",
        "-o",
        tmp_path / "x.onnx",
    ]
    one_error_line(run(export_main, args), "takes uint8 pixels")
    assert not (tmp_path / "x.onnx").exists()


def test_bench_times_a_uint8_file_on_pixels(pixel_file, tmp_path):
    _, path, _ = pixel_file
    x = fixed_input((1, 3, 24, 32), seed=0, dtype="uint8")
    assert x.dtype == torch.uint8 and x.shape == (1, 3, 24, 32) and int(x.max()) > int(x.min())
    result = run(
        bench_main,
        [
            "latency",
            "--models",
            path,
            "--backends",
            "onnxruntime",
            "--runs",
            "3",
            "--min-time",
            "0",
            "--json",
            tmp_path / "b.json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "b.json").read_text())["records"]


def test_the_api_traces_a_uint8_model_with_pixels(pixel_file, tmp_path):
    from dcd_deploy import export_onnx

    d, _, _ = pixel_file
    result = export_onnx(_model(d), tmp_path / "api.onnx", input_size=(24, 32), parity_preprocess="uint8")
    assert result, result.parity.summary()
    assert onnx.load(str(tmp_path / "api.onnx")).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8


GREY_NET = """\
import torch
from torch import nn
from dcd_deploy.layers import DCDConv2d


class GreyNet(nn.Module):
    \"\"\"An IR camera's one-channel frames, normalised inside.\"\"\"

    def __init__(self):
        super().__init__()
        self.dcd = DCDConv2d(1, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        assert x.dtype == torch.uint8 and x.shape[1] == 1, (x.dtype, x.shape)
        x = (x.float() - 128.0) / 64.0
        return self.head(torch.relu(self.dcd(x)).mean((2, 3)))


def build():
    torch.manual_seed(0)
    return GreyNet().eval()
"""


def test_the_built_in_pixels_are_the_natural_images_rounded():
    from dcd_deploy.models import natural_pixels, natural_uint8

    rgb = natural_uint8(2, (8, 10), seed=3)
    assert torch.equal(rgb, PRESETS["uint8"].apply(natural_pixels(2, (8, 10), seed=3)))
    grey = natural_uint8(2, (8, 10), seed=3, channels=1)
    want = (natural_pixels(2, (8, 10), seed=3, channels=1).double() * 255).round().to(torch.uint8)
    assert grey.shape == (2, 1, 8, 10) and torch.equal(grey, want) and int(grey.max()) > int(grey.min())


def test_a_grey_uint8_model_exports_validates_and_benches_on_grey_pixels(tmp_path):
    (tmp_path / "grey_net.py").write_text(GREY_NET, encoding="utf-8")
    model, out = f"{tmp_path / 'grey_net.py'}:build", tmp_path / "grey.onnx"
    result = run(export_main, [model, "--channels", "1", "--preprocess", "uint8", "--input-size", "20x28", "-o", out])
    assert result.exit_code == 0, result.output
    dims = onnx.load(str(out)).graph.input[0].type.tensor_type
    assert dims.elem_type == onnx.TensorProto.UINT8 and [d.dim_value for d in dims.shape.dim][1:] == [1, 20, 28]
    pixels = torch.randint(0, 256, (3, 1, 20, 28), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    with torch.no_grad():
        want = _model_of(tmp_path / "grey_net.py")(pixels).numpy()
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {sess.get_inputs()[0].name: pixels.numpy()})[0], want, atol=1e-5)

    result = run(validate_main, [model, out, "--json", tmp_path / "r.json"])
    assert result.exit_code == 0, result.output
    assert "grey uint8 pixels" in json.loads((tmp_path / "r.json").read_text())["inputs_description"]
    np.save(tmp_path / "g.npy", pixels.permute(0, 2, 3, 1).numpy())  # N x H x W x 1, as frames come
    assert run(validate_main, [model, out, "--inputs", tmp_path / "g.npy"]).exit_code == 0
    assert fixed_input((1, 1, 20, 28), seed=0, dtype="uint8").shape == (1, 1, 20, 28)
    bench = run(bench_main, ["latency", "--models", out, "--backends", "onnxruntime", "--runs", "3", "--min-time", "0"])
    assert bench.exit_code == 0, bench.output
    refused = run(export_main, [model, "--channels", "1", "--preprocess", "imagenet", "-o", tmp_path / "x.onnx"])
    assert refused.exit_code == 2 and "--preprocess uint8 alone" in refused.output  # a usage error


def _model_of(path):
    from dcd_deploy._factory_spec import build_from_factory

    return build_from_factory(f"{path}:build")
