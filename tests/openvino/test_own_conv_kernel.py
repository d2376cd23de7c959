"""DCDConvEpilogue with ``own_conv`` (the op's own 3x3 convolution, conv3x3_kernels.inc)
against an independent float64 numpy model: the convolution written out tap by tap
(``conv_nhwc``) and the contract's epilogue on it, on every instruction-set path this CPU
has."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
onnx = pytest.importorskip("onnx")
from _fused_reference import EPILOGUE_WEIGHT_ORDER, conv_nhwc, epilogue_reference  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from test_epilogue_kernel import CONFIG, make_epi_case  # noqa: E402
from test_kernel import ISAS, _cpu_isas, _need, core, ext_path, lib  # noqa: E402,F401

#: The op's inputs after x and residual: the epilogue's weights with w0 after p.
OWN_ORDER = EPILOGUE_WEIGHT_ORDER[: EPILOGUE_WEIGHT_ORDER.index("p") + 1] + ("w0", "bias")


@pytest.fixture(scope="module")
def isas(lib):  # noqa: F811
    return _cpu_isas(lib)


def own_conv_model(x_shape, out_shape, c, *, residual, pool, se, attention, activation, stride):
    t = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", t, list(x_shape))]
    names = ["x"]
    if residual:
        inputs.append(helper.make_tensor_value_info("residual", t, list(out_shape)))
        names.append("residual")
    names += [k for k in OWN_ORDER if k in c]
    node = helper.make_node(
        "DCDConvEpilogue",
        names,
        ["out"],
        domain="dcd_deploy",
        pool=pool,
        se=int(se),
        attention=int(attention),
        residual=int(residual),
        activation=activation,
        stride=stride,
        offset=0,
        own_conv=1,
    )
    inits = [numpy_helper.from_array(c[k], k) for k in OWN_ORDER if k in c]
    graph = helper.make_graph([node], "dcd", inputs, [helper.make_tensor_value_info("out", t, list(out_shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dcd_deploy", 1)])
    return model.SerializeToString()


def check_own(
    core,  # noqa: F811
    lib,  # noqa: F811
    isa,
    monkeypatch,
    *,
    B=1,
    H=9,
    W=9,
    Cin=17,
    Cout=23,
    L=4,
    S=8,
    stride=1,
    pool=1,
    se=0,
    attention=0,
    residual=0,
    activation="none",
    threads=1,
    seed=0,
    nan_at=None,
):
    monkeypatch.setenv("DCD_DEPLOY_ISA", isa)
    assert lib.dcd_deploy_ov_isa().decode() == isa
    rng = np.random.default_rng(seed)
    x, w0, c = make_epi_case(
        rng, B=B, H=H, W=W, Cin=Cin, Cout=Cout, L=L, S=S, k=3, pool=pool, se=se, attention=attention
    )
    if nan_at is not None:
        x[nan_at] = np.nan
    conv = conv_nhwc(x, w0, stride=stride, pad=1)  # (B, Ho, Wo, Cout), float64
    res = rng.standard_normal(conv.shape).astype(np.float32) if residual else None
    model = own_conv_model(
        x.shape,
        conv.shape,
        {**c, "w0": w0},
        residual=residual,
        pool=pool,
        se=se,
        attention=attention,
        activation=activation,
        stride=stride,
    )
    compiled = core.compile_model(core.read_model(model, b""), "CPU", {**CONFIG, "INFERENCE_NUM_THREADS": threads})
    feeds = {"x": x} | ({"residual": res} if residual else {})
    got = compiled(feeds)[0]
    want = epilogue_reference(
        x, conv, res, c, pool=pool, se=se, attention=attention, activation=activation, stride=stride, offset=0
    )
    assert got.shape == want.shape
    clean = [b for b in range(B) if nan_at is None or b != nan_at[0]]  # the samples without the NaN
    err = float(np.abs(got[clean] - want[clean]).max()) / max(1.0, float(np.abs(want[clean]).max()))
    assert err < 2e-5, f"max error {err:.2e} relative to the output scale"
    return got, conv


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("hw", [(9, 9), (7, 5), (1, 1), (2, 3), (14, 14), (5, 30)])
def test_borders_and_sizes(core, lib, isas, monkeypatch, isa, stride, hw):  # noqa: F811
    # odd sizes, maps narrower than a row tile, one pixel (every tap but the centre in the padding)
    _need(isas, isa)
    check_own(core, lib, isa, monkeypatch, H=hw[0], W=hw[1], stride=stride, seed=hw[0] * 31 + hw[1])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("cin,cout,L", [(32, 96, 8), (96, 32, 20), (3, 160, 2), (64, 64, 16)])
@pytest.mark.parametrize("stride", [1, 2])
def test_channels(core, lib, isas, monkeypatch, isa, cin, cout, L, stride):  # noqa: F811
    # edge panels (C_out not a multiple of the panel width), a 3-channel input
    _need(isas, isa)
    check_own(core, lib, isa, monkeypatch, H=7, W=13, Cin=cin, Cout=cout, L=L, S=12, stride=stride, pool=2, seed=cin)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "se,attention,residual,activation", [(0, 0, 0, "none"), (1, 1, 1, "relu"), (0, 1, 1, "relu6"), (1, 0, 0, "relu")]
)
@pytest.mark.parametrize("B,stride", [(1, 1), (3, 1), (2, 2)])
def test_options(core, lib, isas, monkeypatch, isa, se, attention, residual, activation, B, stride):  # noqa: F811
    _need(isas, isa)
    check_own(
        core,
        lib,
        isa,
        monkeypatch,
        B=B,
        H=8,
        W=14,
        Cin=19,
        Cout=29,
        L=6,
        stride=stride,
        pool=2,
        se=se,
        attention=attention,
        residual=residual,
        activation=activation,
        seed=B * 7 + se + 2 * attention,
    )


@pytest.mark.parametrize("isa", ISAS)
def test_nan_reaches_the_pixels_that_read_it(core, lib, isas, monkeypatch, isa):  # noqa: F811
    # a NaN input pixel reaches exactly the outputs whose 3x3 window reads it (ReLU keeps
    # NaN, as PyTorch's; the branch's ReLU, shared with the other ops, maps a NaN feature
    # to 0), and nothing of the other sample of the batch (checked against the oracle)
    _need(isas, isa)
    got, conv = check_own(
        core, lib, isa, monkeypatch, B=2, H=6, W=7, nan_at=(1, 2, 3, 4), residual=1, activation="relu"
    )
    assert np.isnan(conv[1]).sum() == 9 * conv.shape[-1]  # the oracle's window: 3x3 pixels
    assert (np.isnan(got[1]) == np.isnan(conv[1])).all()


@pytest.mark.parametrize("isa", ISAS)
def test_two_threads(core, lib, isas, monkeypatch, isa):  # noqa: F811
    _need(isas, isa)
    check_own(core, lib, isa, monkeypatch, B=2, H=14, W=14, Cin=32, Cout=64, L=8, threads=2, residual=1)
