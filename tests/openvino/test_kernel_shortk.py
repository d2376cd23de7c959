"""The short-K GEMM (csrc/openvino/shortk_kernels.inc: the weight form with K <= 128, the
MobileNetV2 expansions) against the float64 numpy reference of the op contract, on every
instruction-set path this CPU supports.

The path takes full panels of NR output channels (32 on AVX-512, 16 on AVX2, 8 portable)
in register tiles of one, two or three panels side by side, row blocks of MR pixels (12,
6, 6); a narrower last panel and the last row block of fewer than MR pixels go through the
generic tile. The shapes below cover 1-7 full panels (every grouping into threes, twos and
ones), a narrow or masked last panel, row counts that are and are not multiples of MR, K
from 1 to the path's limit 128 and just above it (the generic GEMM again)."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
from _fused_reference import make_case, reference  # noqa: E402
from test_kernel import ISAS, _cpu_isas, check, make_model, run_ov  # noqa: E402

from dcd_deploy.openvino import build_extension  # noqa: E402


@pytest.fixture(scope="module")
def lib():
    import ctypes

    lib = ctypes.CDLL(str(build_extension()))
    lib.dcd_deploy_ov_isa.restype = ctypes.c_char_p
    return lib


@pytest.fixture(scope="module")
def core():
    c = ov.Core()
    c.add_extension(str(build_extension()))
    return c


@pytest.fixture(scope="module")
def isas(lib):
    return _cpu_isas(lib)


def _need(isas, isa):
    if isa not in isas:
        pytest.skip(f"this CPU has no {isa}")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "cin,cout",
    [
        (16, 96),  # 3 panels of 32 (AVX-512): one 4 x 6 tile per 4 rows
        (24, 144),  # 4 full + a 16-wide panel
        (32, 192),  # 6 full
        (8, 48),  # 1 full + a 16-wide panel
        (16, 160),  # 5 full: 3 + 2
        (1, 224),  # 7 full: 3 + 3 + 1; K = 1
        (96, 117),  # 3 full + a masked 21-wide panel
        (128, 64),  # K at the limit
        (129, 96),  # K above it: the generic GEMM
        (64, 40),  # 1 full + 8 masked
    ],
)
def test_short_k_shapes(core, lib, isas, monkeypatch, isa, cin, cout):
    _need(isas, isa)
    # 7 x 7 = 49 pixels: 4 row blocks of 12 and one pixel; 4 x 6 = 24: 2 whole blocks (AVX-512)
    for h, w in ((7, 7), (4, 6)):
        check(
            core,
            lib,
            isa,
            monkeypatch,
            H=h,
            W=w,
            Cin=cin,
            Cout=cout,
            L=8,
            S=6,
            pool=1,
            attention=1,
            activation="relu6",
            form="weight",
            seed=cin * 7 + cout + h,
        )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("residual,activation", [(0, "none"), (1, "relu"), (1, "relu6"), (1, "none")])
@pytest.mark.parametrize("B", [1, 3])
def test_short_k_epilogue(core, lib, isas, monkeypatch, isa, residual, activation, B):
    # bias (the accumulators' initial value), residual and activation, several samples
    _need(isas, isa)
    check(
        core,
        lib,
        isa,
        monkeypatch,
        B=B,
        H=5,
        W=11,
        Cin=24,
        Cout=176,
        L=8,
        S=6,
        pool=2,
        se=1,
        attention=1,
        residual=residual,
        activation=activation,
        form="weight",
        seed=B + 3 * residual + len(activation),
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("activation", ["relu", "relu6"])
def test_short_k_keeps_nan(core, lib, isas, monkeypatch, isa, activation):
    # a NaN in the residual, in a full panel of a 3-panel tile and in the narrow panel: relu
    # and relu6 keep it NaN, as torch.relu and np.maximum do
    _need(isas, isa)
    monkeypatch.setenv("DCD_DEPLOY_ISA", isa)
    rng = np.random.default_rng(21)
    x, res, c = make_case(rng, B=1, H=6, W=8, Cin=16, Cout=112, L=4, S=6, pool=1, se=0, attention=1, residual=1)
    res[0, 1, 2, 70] = np.nan
    res[0, 5, 7, 100] = np.nan
    model = make_model(x, res, c, pool=1, se=0, attention=1, activation=activation, form="weight")
    got = run_ov(core, model, x, res)
    want = reference(x, res, c, pool=1, se=0, attention=1, activation=activation)
    assert np.isnan(want).sum() == 2
    assert (np.isnan(got) == np.isnan(want)).all()
    ok = ~np.isnan(want)
    assert np.abs(got[ok] - want[ok]).max() < 1e-5 * max(1.0, np.abs(want[ok]).max())
