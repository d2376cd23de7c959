"""The DCDPointwise OpenVINO kernel against an independent float64 numpy reference of the
op contract, for every form, option and instruction-set path this CPU supports."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
onnx = pytest.importorskip("onnx")
from _fused_reference import make_case, reference  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from dcd_deploy.openvino import build_extension  # noqa: E402

ISAS = ("avx512", "avx2", "portable")


@pytest.fixture(scope="module")
def ext_path():
    return build_extension()


@pytest.fixture(scope="module")
def lib(ext_path):
    lib = ctypes.CDLL(str(ext_path))
    lib.dcd_deploy_ov_isa.restype = ctypes.c_char_p
    lib.dcd_deploy_ov_profile.restype = ctypes.c_int
    lib.dcd_deploy_ov_profile.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_int]
    return lib


@pytest.fixture(scope="module")
def core(ext_path):
    c = ov.Core()
    c.add_extension(str(ext_path))
    return c


def _cpu_isas(lib) -> list[str]:
    out = []
    old = os.environ.get("DCD_DEPLOY_ISA")
    try:
        for isa in ISAS:
            os.environ["DCD_DEPLOY_ISA"] = isa
            if lib.dcd_deploy_ov_isa().decode() == isa:
                out.append(isa)
    finally:
        if old is None:
            os.environ.pop("DCD_DEPLOY_ISA", None)
        else:
            os.environ["DCD_DEPLOY_ISA"] = old
    return out


# ------------------------------------------------------------------------------ the model
def make_model(x, res, c, *, pool, se, attention, activation, form, alpha=None):
    """One DCDPointwise node; ``alpha``: its activation_alpha, or a sequence: its
    activation_slopes (None: no such attribute)."""
    B, H, W, Cin = x.shape
    Cout = c["w0"].shape[0]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
    names = ["x"]
    if res is not None:
        inputs.append(helper.make_tensor_value_info("residual", TensorProto.FLOAT, list(res.shape)))
        names.append("residual")
    order = ["fc1", "gate", "scale_w", "phi_w", "phi_b", "q", "q_b", "p", "w0", "bias"]
    inits = [numpy_helper.from_array(c[k], k) for k in order if k in c]
    names += [k for k in order if k in c]
    if alpha is None:
        slope = {}
    elif np.ndim(alpha):
        slope = {"activation_slopes": [float(a) for a in alpha]}
    else:
        slope = {"activation_alpha": float(alpha)}
    node = helper.make_node(
        "DCDPointwise",
        names,
        ["out"],
        domain="dcd_deploy",
        pool=pool,
        se=int(se),
        attention=int(attention),
        residual=int(res is not None),
        activation=activation,
        form=form,
        **slope,
    )
    graph = helper.make_graph(
        [node], "dcd", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, [B, H, W, Cout])], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dcd_deploy", 1)])
    return model.SerializeToString()


def run_ov(core, model_bytes, x, res):
    model = core.read_model(model_bytes, b"")
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1})
    feeds = [x] if res is None else [x, res]
    return compiled(feeds)[0]


def check(
    core,
    lib,
    isa,
    monkeypatch,
    *,
    B=1,
    H=7,
    W=7,
    Cin=17,
    Cout=23,
    L=4,
    S=8,
    pool=1,
    se=0,
    attention=0,
    residual=0,
    activation="none",
    alpha=None,
    form="weight",
    seed=0,
    tol=1e-5,
):
    monkeypatch.setenv("DCD_DEPLOY_ISA", isa)
    assert lib.dcd_deploy_ov_isa().decode() == isa
    rng = np.random.default_rng(seed)
    x, res, c = make_case(
        rng, B=B, H=H, W=W, Cin=Cin, Cout=Cout, L=L, S=S, pool=pool, se=se, attention=attention, residual=residual
    )
    opts = dict(pool=pool, se=se, attention=attention, activation=activation)
    got = run_ov(core, make_model(x, res, c, **opts, form=form, alpha=alpha), x, res)
    want = reference(x, res, c, **opts, alpha=0.0 if alpha is None else np.asarray(alpha, dtype=np.float64))
    assert got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max()) / scale
    assert err < tol, f"max error {err:.2e} relative to the output scale"


def sum_bound(k):
    """Tolerance for a k-term float32 dot product against the float64 reference: 1e-5 up
    to K 1201 (every such case meets it), beyond that k * 2^-24 (Higham's gamma_k, the
    worst case relative to the terms' magnitudes), where 1e-5 is below what float32
    summation can promise."""
    return 1e-5 if k <= 1201 else k * 2.0**-24  # above 1201, k * 2^-24 > 7e-5


@pytest.fixture(scope="module")
def isas(lib):
    return _cpu_isas(lib)


def _need(isas, isa):
    if isa not in isas:
        pytest.skip(f"this CPU has no {isa}")


# --------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("form", ["weight", "latent"])
@pytest.mark.parametrize("pool", [1, 2])
@pytest.mark.parametrize("hw", [(7, 7), (5, 3), (1, 1), (14, 14)])
def test_shapes(core, lib, isas, monkeypatch, isa, form, pool, hw):
    _need(isas, isa)
    check(core, lib, isa, monkeypatch, H=hw[0], W=hw[1], pool=pool, form=form, Cin=17, Cout=23, L=4)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("form", ["weight", "latent"])
@pytest.mark.parametrize(
    "cin,cout,L", [(32, 96, 8), (96, 32, 20), (160, 96, 8), (23, 160, 20), (96, 17, 4), (200, 203, 8)]
)  # the last: B blocks over 64 KB (panel-major loop)
def test_channels(core, lib, isas, monkeypatch, isa, form, cin, cout, L):
    _need(isas, isa)
    check(core, lib, isa, monkeypatch, H=5, W=3, Cin=cin, Cout=cout, L=L, S=12, pool=2, form=form, seed=cin + cout)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("form", ["weight", "latent"])
@pytest.mark.parametrize(
    "se,attention,residual,activation",
    [
        (0, 0, 0, "none"),
        (1, 0, 0, "relu"),
        (0, 1, 1, "relu6"),
        (1, 1, 1, "none"),
        (1, 1, 0, "relu6"),
        (0, 0, 1, "relu"),
        (1, 1, 1, "silu"),
        (0, 1, 0, "hardswish"),
        (1, 0, 1, "gelu"),
        (0, 1, 1, "mish"),
    ],
)
@pytest.mark.parametrize("B", [1, 4])
def test_options(core, lib, isas, monkeypatch, isa, form, se, attention, residual, activation, B):
    _need(isas, isa)
    check(
        core,
        lib,
        isa,
        monkeypatch,
        B=B,
        H=5,
        W=3,
        Cin=23,
        Cout=17,
        L=8,
        pool=2,
        se=se,
        attention=attention,
        residual=residual,
        activation=activation,
        form=form,
        seed=B * 7 + se + 2 * attention,
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("form", ["weight", "latent"])
@pytest.mark.parametrize("S,L,cout", [(1, 1, 8), (5, 7, 24), (9, 13, 40), (13, 5, 17), (17, 12, 33), (8, 25, 9)])
def test_branch_tails(core, lib, isas, monkeypatch, isa, form, S, L, cout):
    """The branch's products at their edges: fc1 and the gate four rows at a time (S % 4),
    the heads' stream eight rows a pass (S % 8), P Φ' in tiles of MR rows (L % 6 and
    L % 12) with a last panel of one vector (cout), fc1's rows of 44 floats (vector tails)."""
    _need(isas, isa)
    check(
        core,
        lib,
        isa,
        monkeypatch,
        H=5,
        W=5,
        Cin=11,
        Cout=cout,
        L=L,
        S=S,
        pool=2,
        se=1,
        attention=1,
        form=form,
        seed=S * 31 + L,
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("hw,cout", [((1, 1), 2), ((1, 1), 1), ((3, 3), 18), ((3, 3), 17), ((7, 7), 98), ((7, 7), 97)])
def test_latent_product_order(core, lib, isas, monkeypatch, isa, hw, cout):
    """The latent form's P Φ' Z as P (Φ' Z) (from 2 H W <= Cout) and as (P Φ') Z on either
    side of that threshold, L above Cout included (Φ' then needs more room than P Φ')."""
    _need(isas, isa)
    check(
        core,
        lib,
        isa,
        monkeypatch,
        H=hw[0],
        W=hw[1],
        Cin=24,
        Cout=cout,
        L=20,
        S=12,
        pool=1,
        se=1,
        attention=1,
        form="latent",
        seed=cout,
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("pool", [1, 2])
@pytest.mark.parametrize("cin", [1, 8, 16, 24, 48, 64, 136, 144, 264, 384])
def test_pooling_widths(core, lib, isas, monkeypatch, isa, pool, cin):
    # the pooling's channel blocks (1-8 vectors, the last one partial) and pixel unrolls
    # (9 and 35 pixels: remainders for every unroll); the branch's heads with and without
    # attention (one stream of [scale_w | phi_w], or phi_w alone)
    _need(isas, isa)
    for hw, attention in (((3, 3), 1), ((5, 7), 0)):
        check(
            core,
            lib,
            isa,
            monkeypatch,
            H=hw[0],
            W=hw[1],
            Cin=cin,
            Cout=8,
            L=3,
            S=5,
            pool=pool,
            attention=attention,
            se=1,
            form="weight",
            seed=cin + pool,
        )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("cin", [3, 8, 20, 24, 40, 64])
@pytest.mark.parametrize("hw", [(6, 5), (9, 11), (2, 1)])
def test_narrow_bins(core, lib, isas, monkeypatch, isa, cin, hw):
    """The 2x2 bins of a narrow map (up to four vectors of channels: bin_rows), whose
    column bins overlap on odd widths and whose pixel pairs leave one over (3, 5 and 6
    columns per bin), one row per bin included."""
    _need(isas, isa)
    check(core, lib, isa, monkeypatch, H=hw[0], W=hw[1], Cin=cin, Cout=8, L=3, S=5, pool=2, se=1, seed=cin + hw[1])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("form", ["weight", "latent"])
@pytest.mark.parametrize("alpha", [0.1, 0.01, 0.0, -0.75, 2.5])
def test_leaky_relu_at_any_slope(core, lib, isas, monkeypatch, isa, form, alpha):
    # YOLO's 0.1, PyTorch's default 0.01, 0 (ReLU), and below 0 and above 1 (PyTorch takes
    # any); Cin 23 takes the short-K GEMM in the weight form, the tiled one in the latent form
    _need(isas, isa)
    sizes = dict(B=2, H=5, W=3, Cin=23, Cout=17, L=8, pool=2, se=1, attention=1, residual=1)
    check(
        core,
        lib,
        isa,
        monkeypatch,
        **sizes,
        activation="leaky_relu",
        alpha=alpha,
        form=form,
        seed=int(abs(alpha) * 100),
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("form", ["weight", "latent"])
@pytest.mark.parametrize("cout", [17, 40, 96])
def test_prelu_takes_each_channel_its_own_slope(core, lib, isas, monkeypatch, isa, form, cout):
    # nn.PReLU(C)'s slopes, one per output channel, below 0 and above 1 among them: C_out 17
    # ends inside a vector, 40 spans panels on AVX2 (NR 16) and 96 whole panels; Cin 23 takes
    # the short-K GEMM in the weight form, the tiled one in the latent form
    _need(isas, isa)
    slopes = np.random.default_rng(cout).uniform(-1.0, 2.0, cout).round(3)
    sizes = dict(B=2, H=5, W=3, Cin=23, Cout=cout, L=8, pool=2, se=1, attention=1, residual=1)
    check(core, lib, isa, monkeypatch, **sizes, activation="prelu", alpha=slopes, form=form, seed=cout)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("activation", ["relu", "relu6", "leaky_relu", "prelu"])
def test_the_activation_keeps_nan(core, lib, isas, monkeypatch, isa, activation):
    # a NaN in the residual reaches the epilogue alone (one pixel, one channel): relu and
    # relu6 keep it NaN, as torch.relu and np.maximum do (an instruction-level max/min
    # with its operands the other way round returns 0 or 6)
    _need(isas, isa)
    monkeypatch.setenv("DCD_DEPLOY_ISA", isa)
    rng = np.random.default_rng(12)
    x, res, c = make_case(rng, B=1, H=5, W=7, Cin=24, Cout=40, L=4, S=6, pool=1, se=0, attention=1, residual=1)
    res[0, 2, 3, 37] = np.nan
    res[0, 4, 6, 5] = np.nan
    alpha = {"leaky_relu": 0.1, "prelu": np.linspace(-0.5, 1.5, 40)}.get(activation)
    model = make_model(x, res, c, pool=1, se=0, attention=1, activation=activation, form="weight", alpha=alpha)
    got = run_ov(core, model, x, res)
    want = reference(x, res, c, pool=1, se=0, attention=1, activation=activation, alpha=0.0 if alpha is None else alpha)
    assert np.isnan(want).sum() == 2
    assert (np.isnan(got) == np.isnan(want)).all()
    ok = ~np.isnan(want)
    assert np.abs(got[ok] - want[ok]).max() < 1e-5 * max(1.0, np.abs(want[ok]).max())


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("activation", ["silu", "hardswish", "gelu", "mish"])
def test_smooth_activations_over_their_whole_range(core, lib, isas, monkeypatch, isa, activation):
    """SiLU, GELU and Mish (through the kernels' own exp and erfc) and Hardswish on pre-activations
    from -150 to 150 (the residual sets them: e^-x overflows float32 below -88), NaN kept, against
    float64 numpy: within 1e-6 of it, relative above 1 (float32 rounding alone is about
    1.3e-7 here; a polynomial coefficient of exp off by 0.4% is 1.4e-6)."""
    _need(isas, isa)
    monkeypatch.setenv("DCD_DEPLOY_ISA", isa)
    rng = np.random.default_rng(13)
    x, res, c = make_case(rng, B=2, H=5, W=7, Cin=24, Cout=40, L=4, S=6, pool=1, se=0, attention=1, residual=1)
    res[:] = np.linspace(-150, 150, res.size, dtype=np.float32).reshape(res.shape)
    res[1, 3, 3, 17] = np.nan
    model = make_model(x, res, c, pool=1, se=0, attention=1, activation=activation, form="latent")
    got = run_ov(core, model, x, res)
    want = reference(x, res, c, pool=1, se=0, attention=1, activation=activation)
    assert np.isnan(want).sum() == 1 and (np.isnan(got) == np.isnan(want)).all()
    ok = ~np.isnan(want)
    assert (
        want[ok].min() < -0.15 and want[ok].max() > 140
    )  # both tails and the dip (GELU: -0.17, Mish: -0.31) were reached
    assert (np.abs(got[ok] - want[ok]) <= 1e-6 * np.maximum(1.0, np.abs(want[ok]))).all()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("form", ["weight", "latent"])
@pytest.mark.parametrize(
    "hw,cin,cout,L,B",
    [
        ((7, 7), 400, 80, 20, 2),  # 49 rows in tiles of even height; three K blocks; an edge panel
        ((7, 7), 3100, 80, 20, 1),  # a long K: K blocks on every path, float32's summation bound
        ((7, 7), 90, 200, 12, 1),  # seven panels, the last one a single vector
        ((15, 15), 40, 70, 8, 1),  # 225 rows: a full row block (MC) and 33 rows in even tiles
        ((1, 13), 300, 48, 4, 1),  # fewer rows than a tile: no fetch of the next B block
    ],
)
def test_row_tiles_and_weight_prefetch(core, lib, isas, monkeypatch, isa, form, hw, cin, cout, L, B):
    # the GEMM's row tiles (as even as they can be) and, in the latent form, the next B
    # block fetched by each panel's first row tile, across panels and K blocks
    _need(isas, isa)
    check(
        core,
        lib,
        isa,
        monkeypatch,
        B=B,
        H=hw[0],
        W=hw[1],
        Cin=cin,
        Cout=cout,
        L=L,
        S=8,
        pool=1,
        se=1,
        attention=1,
        residual=1,
        activation="relu6",
        form=form,
        seed=cin + cout,
        tol=sum_bound(cin),
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("form", ["weight", "latent"])
@pytest.mark.parametrize("cin,cout,L", [(1, 24, 4), (7, 8, 3), (96, 24, 20), (97, 40, 20), (144, 23, 5)])
@pytest.mark.parametrize("residual,activation", [(0, "none"), (1, "relu6")])
def test_one_vector_panels(core, lib, isas, monkeypatch, isa, form, cin, cout, L, residual, activation):
    # a last panel of one vector (C_out 24 and 40 on AVX2, 8 + a masked 7 for 23) and Z's
    # columns past a full panel (L = 20): on AVX2 their tiles sum even and odd k apart
    # (rank_k_split), with an odd K and K = 1 (no pair); 35 rows: tiles of 6 and 5
    _need(isas, isa)
    check(
        core,
        lib,
        isa,
        monkeypatch,
        H=5,
        W=7,
        Cin=cin,
        Cout=cout,
        L=L,
        S=6,
        pool=1,
        attention=1,
        residual=residual,
        activation=activation,
        form=form,
        seed=cin * 3 + cout + L,
    )


@pytest.mark.parametrize("form", ["weight", "latent"])
@pytest.mark.parametrize("cin", [600, 1201, 3100])
def test_large_k(core, lib, isas, monkeypatch, form, cin):
    # Cin above the kernel's K block (1.5 x 128 on AVX-512, 1.5 x 768 on AVX2, 1.5 x 256
    # portable): partial sums go through the output
    check(
        core,
        lib,
        isas[0],
        monkeypatch,
        H=3,
        W=5,
        Cin=cin,
        Cout=40,
        L=8,
        pool=1,
        attention=1,
        residual=1,
        activation="relu",
        form=form,
        tol=sum_bound(cin),
    )


def test_auto_form_and_default_isa(core, lib, monkeypatch):
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    assert lib.dcd_deploy_ov_isa().decode() in ISAS
    monkeypatch.setenv("DCD_DEPLOY_ISA", "auto")
    isa = lib.dcd_deploy_ov_isa().decode()
    check(core, lib, isa, monkeypatch, H=6, W=6, pool=2, form="auto")


def test_forcing_a_bad_isa_fails_loudly(core, lib, isas, monkeypatch):
    rng = np.random.default_rng(1)
    x, res, c = make_case(rng, B=1, H=3, W=3, Cin=8, Cout=8, L=4, S=4, pool=1, se=0, attention=0, residual=0)
    model = make_model(x, res, c, pool=1, se=0, attention=0, activation="none", form="weight")
    bad = ["sse9"] + [i for i in ISAS if i not in isas]
    for isa in bad:
        monkeypatch.setenv("DCD_DEPLOY_ISA", isa)
        assert lib.dcd_deploy_ov_isa().decode() == "error"
        with pytest.raises(Exception, match="DCD_DEPLOY_ISA"):  # at read_model / compile_model
            run_ov(core, model, x, res)
    # set after compiling: OpenVINO's CPU plugin swallows a failing evaluate, so the kernel
    # poisons the output with NaN (and says why on stderr)
    monkeypatch.setenv("DCD_DEPLOY_ISA", "auto")
    compiled = core.compile_model(core.read_model(model, b""), "CPU", {"INFERENCE_NUM_THREADS": 1})
    assert np.isfinite(compiled([x])[0]).all()
    monkeypatch.setenv("DCD_DEPLOY_ISA", "sse9")
    assert np.isnan(compiled([x])[0]).all()


def test_profile_counters(core, lib, monkeypatch):
    monkeypatch.setenv("DCD_DEPLOY_PROFILE", "1")
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    lib.dcd_deploy_ov_profile_reset()
    rng = np.random.default_rng(2)
    x, res, c = make_case(rng, B=2, H=8, W=8, Cin=16, Cout=24, L=4, S=4, pool=2, se=0, attention=0, residual=0)
    model = core.read_model(make_model(x, res, c, pool=2, se=0, attention=0, activation="none", form="latent"), b"")
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1})
    for _ in range(3):
        compiled([x])
    buf = (ctypes.c_double * 8)()
    n = lib.dcd_deploy_ov_profile(buf, 8)
    assert n == 6
    pool_s, branch_s, form_s, gemm_s, total_s, calls = list(buf)[:6]
    assert calls == 3
    assert all(v >= 0 for v in (pool_s, branch_s, form_s, gemm_s)) and total_s > 0
    assert pool_s + branch_s + form_s + gemm_s <= total_s * 1.0001
    lib.dcd_deploy_ov_profile_reset()
    assert lib.dcd_deploy_ov_profile(buf, 8) == 6 and buf[5] == 0 and buf[4] == 0


@pytest.mark.parametrize("overload", [False, True])
def test_extension_wins_over_a_local_function_body(core, monkeypatch, overload):
    # the exporter's nodes carry a model-local function body (and an IR-10 overload) for
    # other runtimes: OpenVINO must convert the node with the extension, not inline the body
    # (here a deliberately wrong one)
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    rng = np.random.default_rng(3)
    x, res, c = make_case(rng, B=1, H=5, W=3, Cin=8, Cout=12, L=4, S=4, pool=1, se=0, attention=0, residual=0)
    model = onnx.load_from_string(make_model(x, res, c, pool=1, se=0, attention=0, activation="none", form="weight"))
    node = model.graph.node[0]
    const = [
        helper.make_node("Constant", [], [n], value=helper.make_tensor(n, TensorProto.INT64, [1], [v]))
        for n, v in (("st", 0), ("en", 12), ("ax", 3))
    ]
    body = const + [helper.make_node("Slice", [node.input[0], "st", "en", "ax"], ["out"])]
    fn = helper.make_function(
        "dcd_deploy",
        "DCDPointwise",
        list(node.input),
        ["out"],
        body,
        [helper.make_opsetid("", 17)],
        attributes=[a.name for a in node.attribute],
    )
    if overload:
        fn.overload = node.overload = "v1"
    model.functions.append(fn)
    model.ir_version = 10
    ov_model = core.read_model(model.SerializeToString(), b"")
    assert "DCDPointwise" in [op.get_type_name() for op in ov_model.get_ordered_ops()]
    got = core.compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1})([x])[0]
    want = reference(x, res, c, pool=1, se=0, attention=0, activation="none")
    assert np.abs(got - want).max() < 1e-5 * max(1.0, np.abs(want).max())


def test_ir_round_trip(core, tmp_path, monkeypatch):
    # OpExtension: the op serializes to OpenVINO IR with its attributes and reads back
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    rng = np.random.default_rng(4)
    x, res, c = make_case(rng, B=2, H=5, W=5, Cin=17, Cout=23, L=4, S=6, pool=2, se=1, attention=1, residual=1)
    model = core.read_model(make_model(x, res, c, pool=2, se=1, attention=1, activation="relu6", form="latent"), b"")
    ov.save_model(model, tmp_path / "m.xml", compress_to_fp16=False)  # (the default stores f16 weights)
    back = core.read_model(tmp_path / "m.xml")
    node = next(op for op in back.get_ordered_ops() if op.get_type_name() == "DCDPointwise")
    attrs = node.get_attributes()
    assert attrs["pool"] == 2 and attrs["se"] == 1 and attrs["activation"] == "relu6" and attrs["form"] == "latent"
    got = core.compile_model(back, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1})([x, res])[0]
    want = reference(x, res, c, pool=2, se=1, attention=1, activation="relu6")
    assert np.abs(got - want).max() < 1e-5 * max(1.0, np.abs(want).max())


def test_ir_round_trip_keeps_prelu_slopes(core, tmp_path, monkeypatch):
    # activation_slopes is written to IR and read back, channel by channel and exactly (as
    # text of 9 digits a slope: OpenVINO writes a float vector attribute with 6)
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    rng = np.random.default_rng(6)
    x, res, c = make_case(rng, B=2, H=5, W=5, Cin=17, Cout=23, L=4, S=6, pool=2, se=1, attention=1, residual=1)
    slopes = np.linspace(-1.0, 2.0, 23)
    opts = dict(pool=2, se=1, attention=1, activation="prelu")
    model = core.read_model(make_model(x, res, c, **opts, form="latent", alpha=slopes), b"")
    ov.save_model(model, tmp_path / "m.xml", compress_to_fp16=False)
    back = core.read_model(tmp_path / "m.xml")
    node = next(op for op in back.get_ordered_ops() if op.get_type_name() == "DCDPointwise")
    text = node.get_attributes()["activation_slopes"]
    np.testing.assert_array_equal(np.float32(text.split(",")), np.float32(slopes))
    got = core.compile_model(back, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1})([x, res])[0]
    want = reference(x, res, c, **opts, alpha=slopes)
    assert np.abs(got - want).max() < 1e-5 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("form", ["weight", "latent"])
def test_two_threads(core, monkeypatch, form):
    # the big GEMMs split their rows over OpenVINO's threads: same result
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    rng = np.random.default_rng(5)
    x, res, c = make_case(rng, B=2, H=13, W=11, Cin=23, Cout=40, L=8, S=6, pool=2, se=1, attention=1, residual=1)
    model = core.read_model(make_model(x, res, c, pool=2, se=1, attention=1, activation="relu", form=form), b"")
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 2})
    got = compiled([x, res])[0]
    want = reference(x, res, c, pool=2, se=1, attention=1, activation="relu")
    assert np.abs(got - want).max() < 1e-5 * max(1.0, np.abs(want).max())


def _regions(core, lib, *, seed, threads, runs, form, activation, pool, se, residual, **shape) -> int:
    """The parallel regions (``dcd_deploy_ov_split_calls``) ``runs`` calls of a layer opened,
    its outputs checked against the float64 reference on the way."""
    lib.dcd_deploy_ov_split_calls.restype = ctypes.c_long
    lib.dcd_deploy_ov_split_calls.argtypes = [ctypes.c_int]
    x, res, c = make_case(np.random.default_rng(seed), pool=pool, se=se, attention=1, residual=residual, **shape)
    model = core.read_model(make_model(x, res, c, pool=pool, se=se, attention=1, activation=activation, form=form), b"")
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads})
    want = reference(x, res, c, pool=pool, se=se, attention=1, activation=activation)
    lib.dcd_deploy_ov_split_calls(1)
    for _ in range(runs):
        got = compiled([x, res] if residual else [x])[0]
        assert np.abs(got - want).max() < 1e-5 * max(1.0, np.abs(want).max())
    return lib.dcd_deploy_ov_split_calls(1)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_gemms_split_over_openvinos_threads(core, lib, monkeypatch, threads):
    # evaluate sees INFERENCE_NUM_THREADS (the CPU plugin runs the op inside its TBB arena):
    # with 2 threads each call opens one parallel region (ov::parallel_for) for all its
    # phases, the latent form's two GEMMs included; with 1 never
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    shape = dict(B=1, H=16, W=16, Cin=24, Cout=48, L=8, S=6)
    got = _regions(
        core, lib, seed=10, threads=threads, runs=3, form="latent", activation="none", pool=1, se=0, residual=0, **shape
    )
    assert got == (3 if threads == 2 else 0)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("form", ["weight", "latent"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("regions", ["call", "stage", "none"])
def test_the_serial_phases_split_too(core, lib, isas, monkeypatch, isa, form, threads, regions):
    # a layer whose pooling, fc1, heads product (and, in the weight form, forming W(x))
    # are large enough to be split: one region per call and sample with 2 threads (the
    # phases are its stages, stages.inc), none with 1; B = 2 gives two per call. With
    # DCD_DEPLOY_REGIONS=stage (the measured alternative) a region per split phase
    # instead: weight pool, fc1, heads, forming, GEMM; latent pool, fc1, heads, Z + GEMM.
    # DCD_DEPLOY_REGIONS=none (measuring what the split buys): no region at all
    _need(isas, isa)
    monkeypatch.setenv("DCD_DEPLOY_ISA", isa)
    monkeypatch.setenv("DCD_DEPLOY_REGIONS", regions)
    shape = dict(B=2, H=16, W=16, Cin=192, Cout=192, L=8, S=160)
    got = _regions(
        core, lib, seed=11, threads=threads, runs=3, form=form, activation="none", pool=2, se=1, residual=1, **shape
    )
    per_sample = {"call": 1, "stage": 5 if form == "weight" else 4, "none": 0}[regions]
    assert got == (3 * 2 * per_sample if threads == 2 else 0)


@pytest.mark.parametrize("form", ["weight", "latent"])
def test_a_small_call_opens_no_region(core, lib, monkeypatch, form):
    # below 2^18 multiply-adds (here 8 x 8 pixels, 16 -> 24 channels: about 25 thousand)
    # a region's hand-off would cost more than it saves: the call runs on one thread
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    shape = dict(B=1, H=8, W=8, Cin=16, Cout=24, L=4, S=4)
    got = _regions(
        core, lib, seed=12, threads=2, runs=1, form=form, activation="relu", pool=1, se=0, residual=0, **shape
    )
    assert got == 0


def test_inconsistent_weights_fail_at_read_model(core, monkeypatch):
    # shape errors surface when the model is read (OpenVINO's CPU plugin would swallow an
    # exception from evaluate)
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    rng = np.random.default_rng(6)
    x, res, c = make_case(rng, B=1, H=3, W=3, Cin=8, Cout=12, L=4, S=4, pool=2, se=0, attention=1, residual=0)
    c["p"] = c["p"][:, :3]  # (Cout, L - 1)
    with pytest.raises(Exception, match="p has shape"):
        core.read_model(make_model(x, res, c, pool=2, se=0, attention=1, activation="none", form="weight"), b"")


def test_constant_weights_are_packed_into_one_input(core, monkeypatch):
    # the ONNX conversion packs the ten weight Constants into one input (the CPU plugin's
    # per-call cost grows with the op's input count)
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    rng = np.random.default_rng(7)
    x, res, c = make_case(rng, B=1, H=4, W=4, Cin=8, Cout=12, L=4, S=4, pool=1, se=1, attention=1, residual=1)
    model = core.read_model(make_model(x, res, c, pool=1, se=1, attention=1, activation="none", form="weight"), b"")
    node = next(op for op in model.get_ordered_ops() if op.get_type_name() == "DCDPointwise")
    assert node.get_input_size() == 3
    assert list(node.get_attributes()["packed"]) == [12, 8, 4, 4]


@pytest.mark.parametrize("form", ["weight", "latent"])
def test_weights_as_graph_inputs(core, monkeypatch, form):
    # weights that are not Constants keep the contract's inputs (no packing), and a second
    # call with other weights at the same place gives the new result (the prepared cache)
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    rng = np.random.default_rng(8)
    x, res, c = make_case(rng, B=1, H=5, W=4, Cin=9, Cout=13, L=4, S=5, pool=2, se=1, attention=1, residual=1)
    proto = onnx.load_from_string(make_model(x, res, c, pool=2, se=1, attention=1, activation="relu", form=form))
    names = [t.name for t in proto.graph.initializer]
    for t in proto.graph.initializer:
        proto.graph.input.append(helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)))
    del proto.graph.initializer[:]
    model = core.read_model(proto.SerializeToString(), b"")
    node = next(op for op in model.get_ordered_ops() if op.get_type_name() == "DCDPointwise")
    assert node.get_input_size() == 2 + len(names)
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1})
    request = compiled.create_infer_request()
    for seed in (8, 9):
        _, _, c2 = make_case(
            np.random.default_rng(seed), B=1, H=5, W=4, Cin=9, Cout=13, L=4, S=5, pool=2, se=1, attention=1, residual=1
        )
        feeds = {"x": x, "residual": res, **{k: c2[k] for k in names}}
        got = request.infer(feeds)[0].copy()
        want = reference(x, res, c2, pool=2, se=1, attention=1, activation="relu")
        assert np.abs(got - want).max() < 1e-5 * max(1.0, np.abs(want).max())
