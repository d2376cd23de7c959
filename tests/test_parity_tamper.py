"""The gate's sensitivity: every way a lowering bug looks is caught, on every kind of layer.

Each case takes a correct export (which passes), breaks the ONNX file the way a lowering
mistake would (a weight tensor negated or scaled by 5%, a bias dropped, Φ transposed)
or re-exports with a BatchNorm fold that uses the wrong eps, and asserts that
``check_parity`` fails, on the default synthetic inputs and on the caller's inputs.
A gate that passes correct files (the conditioning-aware rule) is only worth having if
these still fail.
"""

from __future__ import annotations

import onnx
import pytest
import torch

from dcd_deploy import check_parity, export_onnx
from dcd_deploy.exporters import _deploy_dcd, _deploy_mixture, _fold
from dcd_deploy.exporters import onnx as onnx_exporter
from dcd_deploy.models import synthetic_images

from _tamper import TAMPERS
from _zoo import ZooCache, input_size

#: One model per layer kind: DCD MobileNetV2, DCD ResNet, DY-Conv, CondConv. The ONNX
#: tampers of DCD MobileNetV2 run through dcd-validate on a release checkpoint
#: (tests/cli/test_export_validate.py), so here it only gets the BN-fold case.
MODELS = ("mobilenetv2_050_dcd", "resnet10_dcd", "mobilenetv2_050_dyconv", "mobilenetv2_035_condconv")
FILE_TAMPER_MODELS = MODELS[1:]
#: A BN fold bug: TensorFlow's default eps (1e-3) instead of the model's (1e-5).
WRONG_EPS = 1e-3

models = ZooCache(keep_one=True)


def _model(arch):
    return models(arch)


#: Cheap but complete: two batches of two, both ORT optimisation levels.
CHECK = {"batch_sizes": (2,), "n_inputs": 4}


@pytest.fixture(scope="module")
def correct(tmp_path_factory):
    """``correct(arch)``: (model, path of a correct export that passes), built once per arch."""
    cache = {}

    def get(arch):
        if arch not in cache:
            cache.clear()
            model = _model(arch)
            path = tmp_path_factory.mktemp(arch) / "good.onnx"
            export_onnx(model, path, input_size=input_size(arch), check=False)
            for inputs in (None, user_inputs(arch)):
                assert check_parity(model, path, inputs=inputs, **CHECK), "the untouched export must pass"
            cache[arch] = model, path
        return cache[arch]

    return get


def user_inputs(arch):
    """The caller's own images: other content than the defaults, and a little noisier."""
    size = input_size(arch)
    return 0.7 * synthetic_images(4, size, seed=11) + 0.1 * torch.randn(
        4, 3, size, size, generator=torch.Generator().manual_seed(3))


#: Every (model, tamper) that applies: Φ exists in DCD layers only.
FILE_CASES = [(arch, tamper) for arch in FILE_TAMPER_MODELS for tamper in TAMPERS
              if tamper != "transpose_phi" or arch.endswith("_dcd")]


@pytest.mark.slow
@pytest.mark.parametrize("arch, tamper", FILE_CASES)
def test_tampered_onnx_file_fails(tmp_path, correct, arch, tamper):
    model, good = correct(arch)
    proto = onnx.load(str(good))
    TAMPERS[tamper](proto)
    bad = tmp_path / "bad.onnx"
    onnx.save(proto, str(bad))
    for inputs in (None, user_inputs(arch)):
        report = check_parity(model, bad, inputs=inputs, **CHECK)
        assert not report, (tamper, report.table())
        assert not report.ill_conditioned  # caught on inputs where fp32 is trustworthy


@pytest.mark.slow
@pytest.mark.parametrize("arch", MODELS)
def test_bn_fold_with_the_wrong_eps_fails(tmp_path, monkeypatch, arch):
    right = _fold.bn_affine

    def wrong_eps(bn, channels):
        if bn is None:
            return right(bn, channels)
        scale = bn.weight.detach() / torch.sqrt(bn.running_var + WRONG_EPS)
        return scale, bn.bias.detach() - bn.running_mean * scale

    for module in (onnx_exporter, _deploy_dcd, _deploy_mixture):
        monkeypatch.setattr(module, "bn_affine", wrong_eps)
    monkeypatch.setattr(_fold, "bn_affine", wrong_eps, raising=True)
    model = _model(arch)
    bad = export_onnx(model, tmp_path / "bad.onnx", input_size=input_size(arch), check=False).path
    for inputs in (None, user_inputs(arch)):
        report = check_parity(model, bad, inputs=inputs, **CHECK)
        assert not report, report.table()
