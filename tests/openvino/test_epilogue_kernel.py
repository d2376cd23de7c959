"""The DCDConvEpilogue OpenVINO op (k x k and strided DCD layers around OpenVINO's own
convolution) against an independent float64 numpy model of its contract, on every
instruction-set path this CPU has; the convolution is either fed in (the op alone) or
OpenVINO's own Conv in the graph (the exported form: Transpose, Conv, Transpose)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
onnx = pytest.importorskip("onnx")
from _fused_reference import EPILOGUE_WEIGHT_ORDER, conv_nhwc, epilogue_reference, make_case  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from test_kernel import ISAS, _cpu_isas, _need, core, ext_path, lib  # noqa: E402,F401

CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}


@pytest.fixture(scope="module")
def isas(lib):  # noqa: F811
    return _cpu_isas(lib)


def make_epi_case(rng, *, B, H, W, Cin, Cout, L, S, k, pool, se, attention):
    """x, the k x k W0 (Cout, Cin, k, k) and the branch/latent weights (no w0), float32."""
    x, _, c = make_case(
        rng, B=B, H=H, W=W, Cin=Cin, Cout=Cout, L=L, S=S, pool=pool, se=se, attention=attention, residual=0
    )
    w0 = (rng.standard_normal((Cout, Cin, k, k)) / np.sqrt(Cin * k * k)).astype(np.float32)
    del c["w0"]
    return x, w0, c


def make_epi_model(
    x_shape, conv_shape, c, *, residual, pool, se, attention, activation, stride, offset, w0=None, pad=0
):
    """The op alone (conv a graph input) or, with w0, behind OpenVINO's Conv of x."""
    t = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", t, list(x_shape))]
    nodes, inits = [], [numpy_helper.from_array(c[k], k) for k in EPILOGUE_WEIGHT_ORDER if k in c]
    if w0 is None:
        inputs.insert(0, helper.make_tensor_value_info("conv", t, list(conv_shape)))
    else:
        inits.append(numpy_helper.from_array(w0, "w0"))
        nodes += [
            helper.make_node("Transpose", ["x"], ["x_nchw"], perm=[0, 3, 1, 2]),
            helper.make_node("Conv", ["x_nchw", "w0"], ["conv_nchw"], strides=[stride, stride], pads=[pad] * 4),
            helper.make_node("Transpose", ["conv_nchw"], ["conv"], perm=[0, 2, 3, 1]),
        ]
    names = ["conv", "x"]
    if residual:
        inputs.append(helper.make_tensor_value_info("residual", t, list(conv_shape)))
        names.append("residual")
    names += [k for k in EPILOGUE_WEIGHT_ORDER if k in c]
    nodes.append(
        helper.make_node(
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
            offset=offset,
        )
    )
    graph = helper.make_graph(nodes, "dcd", inputs, [helper.make_tensor_value_info("out", t, list(conv_shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dcd_deploy", 1)])
    return model.SerializeToString()


def check_epi(
    core,
    lib,
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
    k=3,
    stride=1,
    pad=None,
    pool=1,
    se=0,
    attention=0,
    residual=0,
    activation="none",
    in_graph=False,
    threads=1,
    seed=0,
):
    monkeypatch.setenv("DCD_DEPLOY_ISA", isa)
    assert lib.dcd_deploy_ov_isa().decode() == isa
    pad = k // 2 if pad is None else pad
    offset = k // 2 - pad  # the centre tap's input pixel of output pixel 0
    rng = np.random.default_rng(seed)
    x, w0, c = make_epi_case(
        rng, B=B, H=H, W=W, Cin=Cin, Cout=Cout, L=L, S=S, k=k, pool=pool, se=se, attention=attention
    )
    conv = conv_nhwc(x, w0, stride=stride, pad=pad)
    res = rng.standard_normal(conv.shape).astype(np.float32) if residual else None
    model = make_epi_model(
        x.shape,
        conv.shape,
        c,
        residual=residual,
        pool=pool,
        se=se,
        attention=attention,
        activation=activation,
        stride=stride,
        offset=offset,
        w0=w0 if in_graph else None,
        pad=pad,
    )
    compiled = core.compile_model(core.read_model(model, b""), "CPU", {**CONFIG, "INFERENCE_NUM_THREADS": threads})
    feeds = {"x": x}
    if not in_graph:
        feeds["conv"] = conv.astype(np.float32)
    if residual:
        feeds["residual"] = res
    got = compiled(feeds)[0]
    want = epilogue_reference(
        x, conv, res, c, pool=pool, se=se, attention=attention, activation=activation, stride=stride, offset=offset
    )
    assert got.shape == want.shape
    err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
    assert err < 2e-5, f"max error {err:.2e} relative to the output scale"


# --------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("k,stride", [(3, 1), (3, 2), (1, 2), (1, 1)])
@pytest.mark.parametrize("pool", [1, 2])
@pytest.mark.parametrize("hw", [(9, 9), (7, 5), (1, 1), (14, 14)])
def test_shapes(core, lib, isas, monkeypatch, isa, k, stride, pool, hw):
    _need(isas, isa)
    check_epi(core, lib, isa, monkeypatch, H=hw[0], W=hw[1], k=k, stride=stride, pool=pool)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("cin,cout,L", [(32, 96, 8), (96, 32, 20), (23, 160, 20), (96, 17, 4), (64, 64, 8)])
@pytest.mark.parametrize("stride", [1, 2])
def test_channels(core, lib, isas, monkeypatch, isa, cin, cout, L, stride):
    _need(isas, isa)
    check_epi(
        core, lib, isa, monkeypatch, H=7, W=6, Cin=cin, Cout=cout, L=L, S=12, stride=stride, pool=2, seed=cin + cout
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "hw,stride,cout", [((1, 1), 1, 2), ((6, 6), 2, 18), ((6, 6), 2, 17), ((7, 7), 1, 98), ((7, 7), 1, 97)]
)
def test_product_order(core, lib, isas, monkeypatch, isa, hw, stride, cout):
    """P Φ' Z as P (Φ' Z) (from 2 H' W' <= Cout) and as (P Φ') Z on either side of that
    threshold, L above Cout included."""
    _need(isas, isa)
    check_epi(
        core, lib, isa, monkeypatch, H=hw[0], W=hw[1], Cin=24, Cout=cout, L=20, S=12, stride=stride, se=1, attention=1
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "se,attention,residual,activation",
    [(0, 0, 0, "none"), (1, 0, 0, "relu"), (0, 1, 1, "relu6"), (1, 1, 1, "none"), (0, 0, 1, "relu")],
)
@pytest.mark.parametrize("B,stride", [(1, 2), (3, 1), (3, 2)])
def test_options(core, lib, isas, monkeypatch, isa, se, attention, residual, activation, B, stride):
    _need(isas, isa)
    check_epi(
        core,
        lib,
        isa,
        monkeypatch,
        B=B,
        H=8,
        W=5,
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
@pytest.mark.parametrize("k,stride,pad", [(3, 1, 1), (3, 2, 1), (1, 2, 0), (3, 1, 0), (3, 2, 0)])
def test_behind_openvinos_conv(core, lib, isas, monkeypatch, isa, k, stride, pad):
    # the exported form: OpenVINO's own Conv (NCHW between Transposes) feeds the op; pad 0
    # puts the centre tap at offset 1
    _need(isas, isa)
    check_epi(
        core,
        lib,
        isa,
        monkeypatch,
        B=2,
        H=11,
        W=10,
        Cin=16,
        Cout=24,
        L=4,
        k=k,
        stride=stride,
        pad=pad,
        pool=2,
        se=1,
        attention=1,
        residual=1,
        activation="relu",
        in_graph=True,
        seed=k + stride + pad,
    )


def test_two_threads(core, lib, monkeypatch):
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    isa = lib.dcd_deploy_ov_isa().decode()
    check_epi(
        core,
        lib,
        isa,
        monkeypatch,
        B=2,
        H=17,
        W=15,
        Cin=24,
        Cout=40,
        L=8,
        stride=2,
        pool=2,
        se=1,
        attention=1,
        residual=1,
        activation="relu",
        threads=2,
    )


def test_ir_round_trip(core, tmp_path, monkeypatch):
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    rng = np.random.default_rng(4)
    x, w0, c = make_epi_case(rng, B=2, H=9, W=7, Cin=12, Cout=20, L=4, S=6, k=3, pool=2, se=1, attention=1)
    conv = conv_nhwc(x, w0, stride=2, pad=1)
    model = core.read_model(
        make_epi_model(
            x.shape,
            conv.shape,
            c,
            residual=0,
            pool=2,
            se=1,
            attention=1,
            activation="relu6",
            stride=2,
            offset=0,
            w0=w0,
            pad=1,
        ),
        b"",
    )
    node = next(op for op in model.get_ordered_ops() if op.get_type_name() == "DCDConvEpilogue")
    assert node.get_input_size() == 3  # conv, x, the packed weights
    ov.save_model(model, tmp_path / "m.xml", compress_to_fp16=False)
    back = core.read_model(tmp_path / "m.xml")
    node = next(op for op in back.get_ordered_ops() if op.get_type_name() == "DCDConvEpilogue")
    attrs = node.get_attributes()
    assert (
        attrs["stride"] == 2 and attrs["offset"] == 0 and attrs["pool"] == 2 and list(attrs["packed"]) == [20, 12, 6, 4]
    )
    got = core.compile_model(back, "CPU", CONFIG)([x])[0]
    want = epilogue_reference(x, conv, None, c, pool=2, se=1, attention=1, activation="relu6", stride=2, offset=0)
    assert np.abs(got - want).max() < 2e-5 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize(
    "what,match",
    [
        ("p", "p has shape"),
        ("stride", "does not fit x"),
        ("conv_channels", "channels"),
        ("weights_input", "must be an f32 constant"),
    ],
)
def test_bad_models_fail_at_read_model(core, monkeypatch, what, match):
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    rng = np.random.default_rng(6)
    x, w0, c = make_epi_case(rng, B=1, H=8, W=8, Cin=8, Cout=12, L=4, S=4, k=3, pool=2, se=0, attention=1)
    conv_shape, stride = (1, 8, 8, 12), 1
    if what == "p":
        c["p"] = c["p"][:, :3]
    elif what == "stride":
        stride = 2  # an 8x8 conv output cannot come from 8x8 x at stride 2
    elif what == "conv_channels":
        conv_shape = (1, 8, 8, 11)
    model = make_epi_model(
        x.shape, conv_shape, c, residual=0, pool=2, se=0, attention=1, activation="none", stride=stride, offset=0
    )
    if what == "weights_input":
        proto = onnx.load_from_string(model)
        proto.graph.input.append(helper.make_tensor_value_info("q", TensorProto.FLOAT, [4, 8]))
        keep = [t for t in proto.graph.initializer if t.name != "q"]
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(keep)
        model = proto.SerializeToString()
    with pytest.raises(Exception, match=match):
        core.read_model(model, b"")


def test_tampered_ir_sizes_are_refused(core, tmp_path, monkeypatch):
    # the packed attribute is read from the file: sizes whose products wrap around 2^64 are
    # refused when the IR is read, never used
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    rng = np.random.default_rng(7)
    x, w0, c = make_epi_case(rng, B=1, H=6, W=6, Cin=8, Cout=12, L=4, S=4, k=3, pool=1, se=0, attention=0)
    model = core.read_model(
        make_epi_model(
            x.shape, (1, 6, 6, 12), c, residual=0, pool=1, se=0, attention=0, activation="none", stride=1, offset=0
        ),
        b"",
    )
    ov.save_model(model, tmp_path / "m.xml", compress_to_fp16=False)
    xml = (tmp_path / "m.xml").read_text()
    assert 'packed="12, 8, 4, 4"' in xml
    (tmp_path / "m.xml").write_text(
        xml.replace('packed="12, 8, 4, 4"', 'packed="12, 8, 177372507123220484, 34359738372"')
    )
    with pytest.raises(Exception, match="outside|exceed"):
        core.read_model(tmp_path / "m.xml")


def test_a_failure_inside_evaluate_is_recorded_and_poisons_the_output(core, lib, isas, monkeypatch):
    # the CPU plugin swallows what an extension's evaluate reports: the op fills its output
    # with NaN and records why (dcd_deploy_ov_error_count / _last_error), as DCDPointwise does
    lib.dcd_deploy_ov_error_count.restype = ctypes.c_ulonglong
    lib.dcd_deploy_ov_last_error.restype = ctypes.c_int
    lib.dcd_deploy_ov_last_error.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.dcd_deploy_ov_set_quiet(1)
    monkeypatch.setenv("DCD_DEPLOY_ISA", "auto")
    rng = np.random.default_rng(9)
    x, w0, c = make_epi_case(rng, B=1, H=6, W=6, Cin=8, Cout=12, L=4, S=4, k=3, pool=1, se=0, attention=0)
    model = make_epi_model(
        x.shape,
        (1, 3, 3, 12),
        c,
        residual=0,
        pool=1,
        se=0,
        attention=0,
        activation="none",
        stride=2,
        offset=0,
        w0=w0,
        pad=1,
    )
    compiled = core.compile_model(core.read_model(model, b""), "CPU", CONFIG)
    before = lib.dcd_deploy_ov_error_count()
    assert np.isfinite(compiled({"x": x})[0]).all() and lib.dcd_deploy_ov_error_count() == before
    monkeypatch.setenv("DCD_DEPLOY_ISA", "sse9")
    assert np.isnan(compiled({"x": x})[0]).all()
    assert lib.dcd_deploy_ov_error_count() == before + 1
    buf = ctypes.create_string_buffer(200)
    lib.dcd_deploy_ov_last_error(buf, 200)
    assert b"DCD_DEPLOY_ISA=sse9" in buf.value
