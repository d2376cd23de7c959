"""The paper's ablation variants (Tables 1, 2, 3a, 3b) export and keep parity.

The zoo tests cover the registered models; these rows are the same families built with
the variant knobs (DCD on depthwise layers, Λ or Φ off, B > 1, a smaller L), whose deploy
forms take other code paths (Eq. 7's R and P, grouped Q/P, no Φ head, no Λ head).
Oracle: the original PyTorch model in eval mode, against ONNX Runtime on the exported file.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from _zoo import ZooCache

from dcd_deploy import export_onnx
from dcd_deploy.exporters import to_deploy
from dcd_deploy.layers import DCDConv2d, DCDLinear
from dcd_deploy.models import synthetic_images

SIZE = 96  # MobileNetV2 x0.5 has no fixed pool: any multiple of 32 works
ATOL, RTOL = 1e-5, 1e-3  # the parity contract (dcd_deploy.parity), applied by hand

VARIANTS = {
    "3b DW": dict(roles=("dw",)),
    "3b DW+PW+CLS": dict(roles=("dw", "pw", "cls")),
    "1a ΛW0": dict(channel_fusion=False),
    "1a W0+PΦQᵀ": dict(channel_attention=False),
    "3a B=4": dict(num_blocks=4),
    "2 L x0.5": dict(latent_mult=0.5),
}
DW_VARIANTS = [name for name in VARIANTS if "DW" in name]

_trained = ZooCache(size=lambda arch: SIZE, seed=1)


def _built(name: str):
    return _trained("mobilenetv2_050_dcd", **VARIANTS[name])


@pytest.fixture(params=list(VARIANTS), ids=list(VARIANTS))
def variant(request):
    return request.param, _built(request.param)


@pytest.fixture(params=DW_VARIANTS, ids=DW_VARIANTS)
def dw_variant(request):
    return request.param, _built(request.param)


def _run(path, x: torch.Tensor, level) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


@pytest.mark.parametrize("mode", ["standard", "function"])
def test_variant_exports_with_parity(variant, mode, tmp_path):
    name, model = variant
    path = tmp_path / "m.onnx"
    result = export_onnx(model, path, input_size=SIZE, mode=mode, check=False)
    graph = onnx.load(str(path))
    onnx.checker.check_model(graph, full_check=True)
    dynamic = [m for m in model.modules() if isinstance(m, (DCDConv2d, DCDLinear))]
    calls = [n for n in graph.graph.node if n.domain == "dcd_deploy"]
    assert len(calls) == (len(dynamic) if mode == "function" else 0)
    assert result.num_nodes == len(graph.graph.node)
    x = synthetic_images(3, SIZE, seed=7)  # batch 3 through the dynamic batch axis
    with torch.no_grad():
        ref = model(x).numpy()
        ref64 = copy.deepcopy(model).double()(x.double()).numpy()
    scale = float(np.abs(ref).max())
    # Precondition: the reference itself is stable under fp32 rounding (well conditioned).
    np.testing.assert_allclose(ref, ref64, atol=ATOL + RTOL * scale, rtol=0)
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        out = _run(path, x, level)
        np.testing.assert_allclose(out, ref, atol=ATOL + RTOL * scale, rtol=0, err_msg=name)
    assert (out.argmax(1) == ref.argmax(1)).all()


def test_depthwise_variant_uses_the_release_branch(dw_variant):
    """DW DCD layers get the release's SE-gated branch and their deploy form is Eq. 7's."""
    name, model = dw_variant
    dws = [m for m in model.modules() if isinstance(m, DCDConv2d) and m.form.depthwise]
    assert dws and all(m.latent_dim == 4 for m in dws)  # L_k = floor(3² / 2)
    assert all(type(m.fc[1]).__name__ == "SEGate" for m in dws)
    deploy = to_deploy(model, input_size=SIZE)
    kinds = [m.kind for m in deploy.modules() if type(m).__name__ == "DeployDCD"]
    assert kinds.count("depthwise") == len(dws)


def test_depthwise_dynamic_path_matters(dw_variant):
    """Pseudo-trained DW DCD layers change the logits: Φ's share is not negligible."""
    name, model = dw_variant
    x = synthetic_images(4, SIZE, seed=3)
    static = copy.deepcopy(model)
    for m in static.modules():
        if isinstance(m, DCDConv2d) and m.form.depthwise:
            torch.nn.init.zeros_(m.fc_phi.weight)  # Φ = 0: W(x) = Λ W0
    with torch.no_grad():
        full, cut = model(x), static(x)
    assert ((full - cut).norm() / full.norm()).item() > 0.05
