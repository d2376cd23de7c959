"""The gate's sensitivity: every way a lowering bug looks is caught, and the layer named.

Each case takes a correct export (which passes), breaks the ONNX file the way a lowering
mistake would (a weight tensor negated or scaled by 5%, a bias dropped, Φ transposed,
one layer's Φ/Λ or routing head negated, the classifier's W0 scaled by 5%, one DCD
layer's P off by 1%) or re-exports with a BatchNorm fold that uses the wrong eps, and
asserts that ``check_parity`` fails *at the tampered layer* (the first layer out of
bound in graph order), on the default synthetic inputs and on the caller's inputs.

Two kinds of models: zoo models whose BN statistics were calibrated on the built-in
images (end to end has power there), and MobileNetV2 checkpoints in the authors'
release format whose BN statistics were calibrated on other images (white noise of
std 0.1; un-normalised [0, 1] images), as a model trained on other preprocessing has
them. On the built-in images their own fp32 evaluation is percent-level off float64,
so the end-to-end comparison is inconclusive there and only the layer-wise check can
tell a right file from a wrong one: the untampered files PASS "decided layer by layer"
and every tampered one FAILs naming its layer, through ``dcd-export``/``dcd-validate``.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from _memo import memoize_reference, memoize_resolved_model
from _tamper import DCD_ONLY, TAMPERS
from _zoo import ZooCache, input_size
from click.testing import CliRunner
from torch import nn

from dcd_deploy import check_parity, create_model, export_onnx, pseudo_train
from dcd_deploy.cli import validate as validate_command
from dcd_deploy.cli.export import main as export_main
from dcd_deploy.cli.validate import main as validate_main
from dcd_deploy.exporters import _deploy_dcd, _deploy_mixture, _fold
from dcd_deploy.models import synthetic_images
from dcd_deploy.models._pseudo_train import VAR_FLOOR
from dcd_deploy.models.authors import save_release_checkpoint

#: One model per layer kind: DCD MobileNetV2, DCD ResNet, DY-Conv, CondConv.
MODELS = ("mobilenetv2_035_dcd", "resnet10_dcd", "mobilenetv2_050_dyconv", "mobilenetv2_035_condconv")
#: A BN fold bug: TensorFlow's default eps (1e-3) instead of the model's (1e-5).
WRONG_EPS = 1e-3
IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)

models = ZooCache(keep_one=True)

#: Cheap but complete: one batch of two, both ORT optimisation levels.
CHECK = {"batch_sizes": (2,), "n_inputs": 2}


@pytest.fixture(scope="module", autouse=True)
def _one_reference_per_model():
    """Every case checks another file against the same model on the same inputs: the
    model's float64 reference, and the checkpoint ``dcd-validate`` loads, are computed
    once per model (``_memo``); each file is still loaded, run and judged."""
    with pytest.MonkeyPatch.context() as patch:
        memoize_reference(patch)
        memoize_resolved_model(patch, validate_command)
        yield


def user_inputs(arch):
    """The caller's own images: other content than the defaults, and a little noisier."""
    size = input_size(arch)
    return 0.7 * synthetic_images(2, size, seed=11) + 0.1 * torch.randn(
        2, 3, size, size, generator=torch.Generator().manual_seed(3)
    )


@pytest.fixture(scope="module")
def correct(tmp_path_factory):
    """``correct(arch)``: (model, path of a correct export that passes), built once per arch."""
    cache = {}

    def get(arch):
        if arch not in cache:
            cache.clear()
            model = models(arch)
            path = tmp_path_factory.mktemp(arch) / "good.onnx"
            export_onnx(model, path, input_size=input_size(arch), check=False)
            for inputs in (None, user_inputs(arch)):
                report = check_parity(model, path, inputs=inputs, **CHECK)
                assert report and report.decided_by == "end to end", report.summary()
            cache[arch] = model, path
        return cache[arch]

    return get


def _tampered(good, tamper, out):
    proto = onnx.load(str(good))
    layer = TAMPERS[tamper](proto)
    onnx.save(proto, str(out))
    return layer


def _assert_fails_at(report, layer):
    assert not report and report.verdict == "FAIL", report.summary()
    assert report.first_failing_layer.path == layer, report.layer_table()
    assert report.summary().startswith(f"FAIL at {layer} ("), report.summary()
    assert not report.other_weights_likely  # one layer tampered, not the whole file


#: Every (model, tamper) that applies: Φ and P exist in DCD layers only.
FILE_CASES = [
    (arch, tamper) for arch in MODELS for tamper in TAMPERS if tamper not in DCD_ONLY or arch.endswith("_dcd")
]


@pytest.mark.slow
@pytest.mark.parametrize("arch, tamper", FILE_CASES)
def test_tampered_onnx_file_fails_at_its_layer(tmp_path, correct, arch, tamper):
    model, good = correct(arch)
    layer = _tampered(good, tamper, tmp_path / "bad.onnx")
    for inputs in (None, user_inputs(arch)):
        _assert_fails_at(check_parity(model, tmp_path / "bad.onnx", inputs=inputs, **CHECK), layer)


@pytest.mark.slow
@pytest.mark.parametrize("arch", MODELS)
def test_bn_fold_with_the_wrong_eps_fails_at_the_first_folded_layer(tmp_path, monkeypatch, arch):
    right = _fold.bn_affine

    def wrong_eps(bn, channels):
        if bn is None:
            return right(bn, channels)
        scale = bn.weight.detach() / torch.sqrt(bn.running_var + WRONG_EPS)
        return scale, bn.bias.detach() - bn.running_mean * scale

    for module in (_deploy_dcd, _deploy_mixture):
        monkeypatch.setattr(module, "bn_affine", wrong_eps)
    monkeypatch.setattr(_fold, "bn_affine", wrong_eps, raising=True)
    model = models(arch)
    bad = export_onnx(model, tmp_path / "bad.onnx", input_size=input_size(arch), check=False).path
    layers = json.loads(next(p.value for p in onnx.load(str(bad)).metadata_props if p.key == "dcd_deploy.layers"))
    first = next(entry["path"] for entry in layers if entry["bn"])
    for inputs in (None, user_inputs(arch)):
        _assert_fails_at(check_parity(model, bad, inputs=inputs, **CHECK), first)


# ------------------------------------------------------------------ off-range release checkpoints
SIZE = 64


@torch.no_grad()
def calibrate_on(model: nn.Module, batches) -> nn.Module:
    """BN running statistics averaged over ``batches`` (what training on them leaves)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
        bn.train()
    for x in batches:
        model(x)
    for bn in bns:
        bn.momentum = 0.1
        bn.running_var.clamp_(min=VAR_FLOOR * bn.running_var.mean().item())
    return model.eval()


def _noise(seed):
    return 0.1 * torch.randn(8, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))


def _unit_images(seed):
    return synthetic_images(8, SIZE, seed=seed) * IMAGENET_STD + IMAGENET_MEAN  # [0, 1], not normalised


#: name -> (zoo architecture, the images its BN statistics describe)
RELEASE = {
    "x0.5 on white noise": ("mobilenetv2_050_dcd", _noise),
    "x1.0 on [0, 1] images": ("mobilenetv2_100_dcd", _unit_images),
}


def run(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


@pytest.fixture(scope="module", params=list(RELEASE))
def release(request, tmp_path_factory):
    """(checkpoint, correct export, its own images .npy) of an off-range release checkpoint."""
    arch, images = RELEASE[request.param]
    d = tmp_path_factory.mktemp("release")
    model = calibrate_on(pseudo_train(create_model(arch), seed=0, input_size=SIZE), [images(100 + i) for i in range(3)])
    ckpt = d / "model.pth.tar"
    save_release_checkpoint(model, ckpt)
    good = d / "good.onnx"
    result = run(export_main, [ckpt, "--input-size", SIZE, "-o", good])
    assert result.exit_code == 0, result.output
    # the premise: on the built-in images end to end is inconclusive, and the layers decide
    assert "PASS (decided layer by layer: 33 DCD layers within" in result.output, result.output
    assert "end to end inconclusive, fp32 is" in result.output and "top-1" not in result.output
    own = d / "own.npy"
    np.save(own, images(7)[:2].numpy())
    return ckpt, good, own


@pytest.mark.slow
def test_off_range_release_checkpoint_passes_decided_layer_by_layer(release):
    ckpt, good, own = release
    result = run(validate_main, [ckpt, good, "--batch-sizes", "2", "--layers"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].startswith("PASS (decided layer by layer: 33 DCD layers within")
    assert result.output.count(" yes") >= 2 * 53 and " NO" not in result.output  # the layer table
    # on its own images end to end has power again, and passes
    result = run(validate_main, [ckpt, good, "--batch-sizes", "2", "--inputs", own])
    assert result.exit_code == 0 and result.output.splitlines()[-1].startswith("PASS: max abs"), result.output


@pytest.mark.slow
def test_off_range_release_checkpoint_tampered_files_fail_at_their_layer(tmp_path, release):
    ckpt, good, own = release
    for tamper in TAMPERS:
        bad = tmp_path / f"{tamper}.onnx"
        layer = _tampered(good, tamper, bad)
        for extra in ([], ["--inputs", own]):
            result = run(validate_main, [ckpt, bad, "--batch-sizes", "2", "--num-inputs", "2", *extra])
            assert result.exit_code == 1, (tamper, extra, result.output)
            assert result.stderr.startswith(f"Error: parity check failed: FAIL at {layer} ("), (tamper, result.stderr)


@pytest.mark.slow
def test_without_a_layer_record_an_inconclusive_check_is_not_a_pass(tmp_path, release):
    ckpt, good, _ = release
    proto = onnx.load(str(good))
    kept = [p for p in proto.metadata_props if p.key != "dcd_deploy.layers"]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    bare = tmp_path / "bare.onnx"
    onnx.save(proto, str(bare))
    result = run(validate_main, [ckpt, bare, "--batch-sizes", "2", "--json", tmp_path / "r.json"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: parity check inconclusive: INCONCLUSIVE: end to end inconclusive")
    assert "the file records no layers" in result.stderr and "--accept-inconclusive" in result.stderr
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "INCONCLUSIVE"
    result = run(validate_main, [ckpt, bare, "--batch-sizes", "2", "--accept-inconclusive"])
    assert result.exit_code == 0 and result.output.splitlines()[-1].startswith("PASS (accepted inconclusive: ")


# ------------------------------------------------------------------ fused mode, OpenVINO
@pytest.mark.slow
def test_fused_layers_are_checked_in_openvino_and_a_tampered_one_is_named(tmp_path):
    pytest.importorskip("openvino")
    arch = "mobilenetv2_035_dcd"
    model = models(arch)
    good = export_onnx(model, tmp_path / "fused.onnx", input_size=input_size(arch), mode="fused", check=False).path
    records = json.loads(next(p.value for p in onnx.load(str(good)).metadata_props if p.key == "dcd_deploy.layers"))
    fused = [r["path"] for r in records if r["layout"] == "NHWC"]
    assert fused and all(r["kind"] == "DCD" for r in records if r["layout"] == "NHWC")
    report = check_parity(model, good, backends=("onnxruntime", "openvino"), **CHECK)
    assert report and report.decided_by == "end to end", report.summary()
    openvino = {r.path for r in report.layers if r.backend == "openvino"}
    assert set(fused) <= openvino and len(openvino) == len(records)
    layer = _tampered(good, "p_1pct", tmp_path / "bad.onnx")
    assert layer in fused
    report = check_parity(model, tmp_path / "bad.onnx", backends=("onnxruntime", "openvino"), **CHECK)
    _assert_fails_at(report, layer)
    assert {r.backend for r in report.layers if r.path == layer and not r.passed} == {"onnxruntime", "openvino"}
