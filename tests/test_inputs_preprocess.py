"""Images in the model's range: preprocessing presets, uint8 and NHWC inputs, and the
check running on what the model was trained on.

Oracles: the preprocessing formula written out by hand per preset (torchvision's
normalisation, Caffe's BGR means), ``synthetic_images`` (the built-in images as they
always were), and a forward hook that sees what the model is fed.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner
from torch import nn

from dcd_deploy import check_parity, create_model, export_onnx, pseudo_train
from dcd_deploy.cli.export import main as export_main
from dcd_deploy.cli.validate import main as validate_main
from dcd_deploy.errors import DCDDeployError, UnsupportedInputError
from dcd_deploy.inputs import load_images
from dcd_deploy.models import synthetic_images
from dcd_deploy.models._images import natural_pixels
from dcd_deploy.preprocess import PRESETS, Preprocess, make_preprocess

SIZE = 32


def pixel_image(r, g, b) -> torch.Tensor:
    return torch.tensor([r, g, b], dtype=torch.float32).view(1, 3, 1, 1)


def test_imagenet_preset_is_exactly_the_builtin_images():
    pixels = natural_pixels(3, (16, 24), seed=4)
    assert pixels.min() >= 0 and pixels.max() <= 1
    assert torch.equal(PRESETS["imagenet"].apply(pixels), synthetic_images(3, (16, 24), seed=4))


@pytest.mark.parametrize(
    "name, expected",
    [
        ("imagenet", [(0.2 - 0.485) / 0.229, (0.5 - 0.456) / 0.224, (0.9 - 0.406) / 0.225]),
        ("unit", [0.2, 0.5, 0.9]),
        ("0-255", [51.0, 127.5, 229.5]),
        ("inception", [-0.6, 0.0, 0.8]),
        # BGR: channel 0 is blue, normalised with blue's statistics, in [0, 255] units
        (
            "bgr-imagenet",
            [
                (229.5 - 255 * 0.406) / (255 * 0.225),
                (127.5 - 255 * 0.456) / (255 * 0.224),
                (51.0 - 255 * 0.485) / (255 * 0.229),
            ],
        ),
        ("caffe", [229.5 - 103.939, 127.5 - 116.779, 51.0 - 123.68]),
    ],
)
def test_presets_follow_their_formula(name, expected):
    got = PRESETS[name].apply(pixel_image(0.2, 0.5, 0.9)).flatten().tolist()
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_overrides_make_a_custom_preprocessing():
    p = make_preprocess("imagenet", scale=255, mean=(1, 2, 3), std=(2, 2, 2), bgr=True)
    assert p.name == "custom" and p.bgr and p.scale == 255
    assert p.apply(pixel_image(0.0, 0.0, 1.0)).flatten().tolist() == [(255 - 1) / 2, (0 - 2) / 2, (0 - 3) / 2]
    assert make_preprocess(None) == PRESETS["imagenet"] and make_preprocess("unit") is PRESETS["unit"]
    with pytest.raises(DCDDeployError, match="unknown preprocessing"):
        make_preprocess("yuv")
    with pytest.raises(DCDDeployError, match="positive"):
        Preprocess(std=(1.0, 0.0, 1.0))
    with pytest.raises(DCDDeployError, match="one mean and one std per channel"):
        make_preprocess(mean=(0.5, 0.5))


def test_uint8_nhwc_pixels_are_preprocessed_and_float_nhwc_only_transposed(tmp_path):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(2, SIZE, SIZE + 8, 3), dtype=np.uint8)
    np.save(tmp_path / "u8.npy", pixels)
    got, what = load_images(tmp_path / "u8.npy", input_size=(SIZE, SIZE + 8), preprocess="0-255")
    assert got.shape == (2, 3, SIZE, SIZE + 8) and got.dtype == torch.float32
    assert torch.allclose(got, torch.from_numpy(pixels.transpose(0, 3, 1, 2).astype(np.float32)), atol=1e-4)
    assert "uint8 NHWC pixels" in what and "0-255" in what
    got, _ = load_images(tmp_path / "u8.npy")  # imagenet by default
    expected = (pixels.transpose(0, 3, 1, 2) / 255.0 - np.array([0.485, 0.456, 0.406]).reshape(1, 3, 1, 1)) / np.array(
        [0.229, 0.224, 0.225]
    ).reshape(1, 3, 1, 1)
    assert np.allclose(got.numpy(), expected, atol=1e-5)
    torch.save(torch.from_numpy(pixels.transpose(0, 3, 1, 2).copy()), tmp_path / "u8.pt")  # NCHW uint8 in .pt
    assert torch.allclose(load_images(tmp_path / "u8.pt")[0], got)
    floats = rng.standard_normal((2, SIZE, SIZE, 3)).astype(np.float32)
    np.save(tmp_path / "f.npy", floats)
    got, what = load_images(tmp_path / "f.npy", input_size=SIZE, preprocess="0-255")
    assert torch.equal(got, torch.from_numpy(floats.transpose(0, 3, 1, 2).copy()))  # taken as preprocessed
    assert "taken as preprocessed" in what


@pytest.mark.parametrize(
    "array, message",
    [
        (np.zeros((2, 8, 8, 3), np.int16), "expected floating-point"),
        (np.zeros((2, 4, 8, 8), np.uint8), "expected N x 3 x H x W or N x H x W x 3"),
        (np.zeros((2, 3, 8, 9), np.uint8), "holds 8x9 images, but the model takes 8x8"),
    ],
)
def test_what_is_not_an_image_batch_is_refused(tmp_path, array, message):
    np.save(tmp_path / "x.npy", array)
    with pytest.raises(UnsupportedInputError, match=message):
        load_images(tmp_path / "x.npy", input_size=8)


@pytest.fixture(scope="module")
def unit_model(tmp_path_factory):
    """A DCD MobileNetV2 whose BN statistics describe [0, 1] images (not normalised), exported."""
    model = pseudo_train(create_model("mobilenetv2_035_dcd"), seed=0, input_size=SIZE)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None
            bn.train()
        for i in range(3):
            model(natural_pixels(8, SIZE, seed=50 + i))
        for bn in bns:
            bn.momentum = 0.1
            bn.running_var.clamp_(min=0.05 * bn.running_var.mean().item())
    model.eval()
    path = tmp_path_factory.mktemp("unit") / "m.onnx"
    export_onnx(model, path, input_size=SIZE, check=False)
    return model, path


def test_the_check_feeds_the_model_its_own_preprocessing(unit_model):
    model, path = unit_model
    seen = []
    hook = model.features[0].register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    try:
        report = check_parity(model, path, batch_sizes=(2,), n_inputs=2, preprocess="0-255")
    finally:
        hook.remove()
    assert seen[0].min() >= 0 and seen[0].max() <= 255 and seen[0].max() > 100
    assert report.preprocess["name"] == "0-255" and report.preprocess["scale"] == 255
    assert check_parity(model, path, batch_sizes=(2,), n_inputs=2, inputs=seen[0][:2]).preprocess is None


def test_a_model_trained_on_unit_images_is_checked_end_to_end_on_them(unit_model):
    model, path = unit_model
    default = check_parity(model, path, batch_sizes=(2,), n_inputs=2)
    own = check_parity(model, path, batch_sizes=(2,), n_inputs=2, preprocess="unit")
    # normalised images are outside this model's range: end to end has no power there
    assert default and default.inconclusive and default.decided_by == "layers"
    assert own and not own.inconclusive and own.decided_by == "end to end"
    assert own.torch_fp32_rel < default.torch_fp32_rel / 10


def run(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


def test_cli_preprocessing_options_and_what_is_recorded(tmp_path, unit_model):
    out, report = tmp_path / "m.onnx", tmp_path / "r.json"
    result = run(
        export_main,
        [
            "mobilenetv2_035_dcd",
            "--input-size",
            SIZE,
            "-o",
            out,
            "--preprocess",
            "caffe",
            "--scale",
            "1",
            "--json",
            report,
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert meta["dcd_deploy.parity_inputs"].startswith(
        "built-in natural images, preprocessed: custom (scale 1, mean 103.939,116.779,123.68, std 1,1,1, BGR)"
    )
    assert json.loads(report.read_text())["parity"]["preprocess"]["bgr"] is True
    np.save(tmp_path / "px.npy", np.full((2, SIZE, SIZE, 3), 128, np.uint8))
    result = run(
        validate_main,
        [
            "mobilenetv2_035_dcd",
            out,
            "--inputs",
            tmp_path / "px.npy",
            "--batch-sizes",
            "2",
            "--preprocess",
            "unit",
            "--json",
            report,
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert "uint8 NHWC pixels, preprocessed: unit" in data["inputs_description"] and data["preprocess"] is None
    result = run(validate_main, ["mobilenetv2_035_dcd", out, "--mean", "1,x,3"])
    assert result.exit_code == 2 and "expected comma-separated numbers" in result.output
    result = run(validate_main, ["mobilenetv2_035_dcd", out, "--mean", "0,0"])
    assert result.exit_code == 2 and "one mean and one std per channel" in result.output
