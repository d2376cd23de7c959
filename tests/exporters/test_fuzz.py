"""Fuzzed parity: random DCDConv2d configurations through to_deploy and export_onnx.

Hypothesis draws a layer (channels 1-64, kernel 1/3/5, stride 1-2, depthwise or dense,
channel fusion alone or joint fusion, B dividing the channels and L, L and L_k, Λ/Φ on
or off but not both off, pool 1/2, relu/SE gate, the release's latent BNs, squeeze
width), an input side 1-24 (odd sides and 1x1 included), random non-trivial weights
and BN statistics, and a batch size 1-4. The layer sits in a small image model::

    Conv2d(3, C_in, 1) -> DCDConv2d -> BatchNorm2d -> act -> flatten(x, 1)

(or ``act`` before the BN, so the BN is not folded), since ``export_onnx`` takes a
3-channel square image. Each example is checked

* ``to_deploy`` with the ``latent``, ``weight`` and ``auto`` strategies against the
  PyTorch model, and
* ``export_onnx`` in ``standard`` mode and in ``function`` or ``fused`` mode (drawn;
  ``check=False``), run by ONNX Runtime through :func:`dcd_deploy.parity.check_parity`
  at the drawn batch size (a fused file's function bodies, in NHWC),

with the parity tolerance (``atol + rtol * max|ref|``, DEFAULT_ATOL / DEFAULT_RTOL) and
zero tolerated misses. ``derandomize=True`` and no example database make CI runs
identical; each test prints how many examples ran and which forms they covered.

Also here: numerics edge cases (zero, tiny, huge, NaN and Inf inputs) on the zoo's
``mobilenetv2_035_dcd`` and on a single well-conditioned DCD layer.
"""

from __future__ import annotations

import copy
import math
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from dcd_deploy import create_model, export_onnx, pseudo_train, to_deploy
from dcd_deploy.exporters._deploy_dcd import DeployDCD
from dcd_deploy.layers import DCDConv2d
from dcd_deploy.layers.dcd import default_latent_dim
from dcd_deploy.models import synthetic_images
from dcd_deploy.parity import DEFAULT_ATOL, DEFAULT_RTOL, check_parity

#: Examples per property; together they keep this file around a minute on 2 cores (the
#: AMD EPYC CI machine: 40 ONNX examples took 51 s there, the file 84 s).
DEPLOY_EXAMPLES = 500
ONNX_EXAMPLES = 25  # each example exports twice through torch.export (~1 s each)
MAX_SIDE = 24

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ACTIVATIONS = {"relu6": nn.ReLU6, "relu": nn.ReLU, "identity": nn.Identity}


# -- configurations ------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One fuzzed example; ``repr`` of it is all a regression test needs."""

    c_in: int
    c_out: int
    kernel: int
    stride: int
    depthwise: bool
    joint_fusion: bool
    latent_dim: int | None
    kernel_latent_dim: int | None
    num_blocks: int
    channel_attention: bool
    channel_fusion: bool
    pool_size: int
    gate: str
    latent_bn: bool
    squeeze: int | None
    side: int
    batch: int
    act: str = "relu6"
    bn_first: bool = True  # dcd -> bn -> act (BN folded) or dcd -> act -> bn
    seed: int = 0

    def layer(self) -> DCDConv2d:
        return DCDConv2d(
            self.c_in,
            self.c_out,
            self.kernel,
            self.stride,
            groups=self.c_in if self.depthwise else 1,
            latent_dim=self.latent_dim,
            kernel_latent_dim=self.kernel_latent_dim,
            num_blocks=self.num_blocks,
            channel_attention=self.channel_attention,
            channel_fusion=self.channel_fusion,
            joint_fusion=self.joint_fusion,
            pool_size=self.pool_size,
            gate=self.gate,
            latent_bn=self.latent_bn,
            squeeze=self.squeeze,
        )


@st.composite
def configs(draw) -> Config:
    kernel = draw(st.sampled_from([1, 3, 5]))
    form = "channel" if kernel == 1 else draw(st.sampled_from(["channel", "depthwise", "joint"]))
    # B divides C_in, C_out and L: draw it first, then multiples of it (channel fusion only).
    nb = draw(st.sampled_from([1, 1, 1, 2, 3, 4, 8])) if form == "channel" else 1
    c_in = nb * draw(st.integers(1, 64 // nb))
    if form == "depthwise" and c_in == 1:  # groups == in == out == 1 is a dense layer
        c_in = draw(st.integers(2, 64))
    c_out = c_in if form == "depthwise" else nb * draw(st.integers(1, 64 // nb))
    kernel_latent_dim = None
    if form == "depthwise":
        latent_dim = draw(st.none() | st.integers(1, kernel * kernel))
    elif form == "joint":
        latent_dim = draw(st.none() | st.integers(1, 8))
        kernel_latent_dim = draw(st.none() | st.integers(1, kernel * kernel))
    else:
        latent_dim = nb * draw(st.integers(1, 16 // nb))
        if nb == 1 or default_latent_dim(min(c_in, c_out)) % nb == 0:
            latent_dim = draw(st.none() | st.just(latent_dim))  # sometimes the paper's default L
    channel_attention, channel_fusion = draw(st.sampled_from([(True, True), (True, False), (False, True)]))
    return Config(
        c_in=c_in,
        c_out=c_out,
        kernel=kernel,
        stride=draw(st.sampled_from([1, 1, 2])),
        depthwise=form == "depthwise",
        # joint_fusion is ignored for k = 1 and depthwise layers: drawn there too, harmlessly.
        joint_fusion=form == "joint" or (form != "channel" or kernel == 1) and draw(st.booleans()),
        latent_dim=latent_dim,
        kernel_latent_dim=kernel_latent_dim,
        num_blocks=nb,
        channel_attention=channel_attention,
        channel_fusion=channel_fusion,
        pool_size=draw(st.sampled_from([1, 2])),
        gate=draw(st.sampled_from(["relu", "se"])),
        latent_bn=form == "channel" and draw(st.booleans()),
        squeeze=draw(st.none() | st.integers(1, 16)),
        side=draw(st.integers(1, MAX_SIDE)),
        batch=draw(st.integers(1, 4)),
        act=draw(st.sampled_from(sorted(ACTIVATIONS))),
        bn_first=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


# -- the model under test --------------------------------------------------------------


class FuzzNet(nn.Module):
    """A 3-channel image model around one DCD layer; the output is the flattened map."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.bn_first = cfg.bn_first
        self.stem = nn.Conv2d(3, cfg.c_in, 1)
        self.dcd = cfg.layer()
        self.bn = nn.BatchNorm2d(cfg.c_out)
        self.act = ACTIVATIONS[cfg.act]()

    def forward(self, x):
        x = self.dcd(self.stem(x))
        x = self.act(self.bn(x)) if self.bn_first else self.bn(self.act(x))
        return torch.flatten(x, 1)


def randomize(model: nn.Module, seed: int) -> nn.Module:
    """Non-trivial values for every parameter and BN buffer (the dynamic heads included)."""
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=g) * std

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=g)

    with torch.no_grad():
        bn_params = set()
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                n = mod.num_features
                sign = torch.where(torch.rand(n, generator=g) < 0.2, -1.0, 1.0)  # some negative scales
                mod.weight.copy_(sign * uniform(n, 0.5, 1.5))
                mod.bias.copy_(normal(n, 0.5))
                mod.running_mean.copy_(normal(n, 0.5))
                mod.running_var.copy_(uniform(n, 0.25, 2.0))
                bn_params.update({id(mod.weight), id(mod.bias)})
        for name, p in model.named_parameters():
            if id(p) in bn_params:
                continue
            if p.dim() == 1:  # conv biases
                p.copy_(normal(p.shape, 0.3))
                continue
            gain = 2.0 if name.endswith(("fc_phi.weight", "fc_scale.weight")) else 1.0  # Λ and Φ vary
            p.copy_(normal(p.shape, gain / math.sqrt(p[0].numel())))
    return model.eval()


def build(cfg: Config) -> FuzzNet:
    return randomize(FuzzNet(cfg), cfg.seed)


def fuzz_inputs(cfg: Config, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(cfg.seed + 1)
    return torch.randn(n, 3, cfg.side, cfg.side, generator=g)


def assert_close(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """The parity criterion: max |got - ref| <= atol + rtol * max |ref|."""
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    scale = ref.abs().max().item()
    err = (got.double() - ref.double()).abs().max().item()
    tol = DEFAULT_ATOL + DEFAULT_RTOL * scale
    assert err <= tol, f"{what}: max abs {err:.3g} > tolerance {tol:.3g} (scale {scale:.3g})"


def form_of(cfg: Config) -> str:
    if cfg.depthwise:
        return "depthwise"
    return "joint" if cfg.joint_fusion and cfg.kernel > 1 else "channel"


def report(capsys, title: str, n: int, coverage: Counter) -> None:
    with capsys.disabled():
        print(f"\n[fuzz] {title}: {n} examples, " + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items())))


# -- the properties --------------------------------------------------------------------


def test_both_heads_off_is_refused_by_design():
    """Λ and Φ both off is a static conv (ValueError by design), so the fuzzer never draws it."""
    with pytest.raises(ValueError, match="static"):
        DCDConv2d(8, 8, 1, channel_attention=False, channel_fusion=False)


def test_fuzz_to_deploy_matches_pytorch(capsys):
    seen: list[Config] = []
    coverage: Counter = Counter()

    @settings(FUZZ, max_examples=DEPLOY_EXAMPLES)
    @given(cfg=configs())
    def prop(cfg: Config):
        seen.append(cfg)
        model = build(cfg)
        x = fuzz_inputs(cfg, cfg.batch)
        with torch.no_grad():
            ref = model(x)
        assert torch.isfinite(ref).all()
        for strategy in ("latent", "weight", "auto"):
            deploy = to_deploy(model, strategy=strategy, input_size=cfg.side)
            (form,) = deploy.strategies.values()
            if strategy == "latent" or not DeployDCD.supports_weight_form(model.dcd):
                assert form == "latent", (strategy, form)
            elif strategy == "weight":
                assert form == "weight"
            assert not any(isinstance(m, nn.BatchNorm2d) for m in deploy.modules()) or not cfg.bn_first
            with torch.no_grad():
                assert_close(deploy(x), ref, f"to_deploy({strategy}) {cfg!r}")
            coverage[f"{form_of(cfg)}/{form}"] += 1

    prop()
    report(capsys, "to_deploy latent/weight/auto vs PyTorch", len(seen), coverage)
    assert len(seen) >= DEPLOY_EXAMPLES
    assert {k.split("/")[0] for k in coverage} == {"channel", "depthwise", "joint"}
    assert coverage["channel/weight"] > 0


def test_fuzz_onnx_matches_pytorch(capsys):
    seen: list[Config] = []
    coverage: Counter = Counter()

    @settings(FUZZ, max_examples=ONNX_EXAMPLES)
    # "weight" falls back to "latent" where the weight form does not apply: weighted up.
    @given(
        cfg=configs(),
        strategy=st.sampled_from(["weight", "weight", "latent", "auto"]),
        fixed_batch=st.booleans(),
        simplify=st.booleans(),
        custom=st.sampled_from(["function", "fused"]),
    )
    def prop(cfg: Config, strategy: str, fixed_batch: bool, simplify: bool, custom: str):
        seen.append(cfg)
        model = build(cfg)
        reference = copy.deepcopy(model.state_dict())
        x = fuzz_inputs(cfg, 2 * cfg.batch)  # two batches per check
        with tempfile.TemporaryDirectory() as tmp:
            for mode in ("standard", custom):
                path = Path(tmp) / f"{mode}.onnx"
                result = export_onnx(
                    model,
                    path,
                    input_size=cfg.side,
                    batch=cfg.batch if fixed_batch else None,
                    mode=mode,
                    strategy=strategy,
                    check=False,
                    simplify=simplify,
                )
                assert path.is_file() and result.parity is None
                parity = check_parity(model, path, batch_sizes=(cfg.batch,), inputs=x)
                assert parity, f"{mode}/{strategy} {cfg!r}\n{parity.summary()}\n{parity.table()}"
                assert all(r.nonfinite == 0 for r in parity.rows)
                coverage[f"{mode}/{next(iter(result.strategies.values()))}"] += 1
                coverage[f"{mode}/DCDPointwise node"] += result.op_histogram.get("dcd_deploy.DCDPointwise", 0)
                coverage[form_of(cfg)] += 1
            assert sorted(p.name for p in Path(tmp).iterdir()) == sorted([f"{custom}.onnx", "standard.onnx"])
        for key, value in model.state_dict().items():  # export leaves the model as it was
            assert torch.equal(value, reference[key]), key

    prop()
    report(capsys, "export_onnx standard + function or fused vs PyTorch (ORT, both opt levels)", len(seen), coverage)
    assert len(seen) >= ONNX_EXAMPLES
    assert coverage["standard/weight"] > 0 and coverage["function/latent"] > 0


# -- numerics edge cases on a zoo DCD model -----------------------------------------------

ZOO_SIZE = 64


@pytest.fixture(scope="module")
def zoo_onnx(tmp_path_factory):
    model = pseudo_train(create_model("mobilenetv2_035_dcd"), seed=0, input_size=ZOO_SIZE)
    path = tmp_path_factory.mktemp("zoo") / "m.onnx"
    result = export_onnx(model, path, input_size=ZOO_SIZE, check=False)
    assert set(result.strategies.values()) == {"latent", "weight"}  # both forms are exercised
    return model, path


def _images(n=4):
    return synthetic_images(n, ZOO_SIZE, seed=3)


@pytest.mark.parametrize(
    "name, make",
    [
        ("all zero", lambda x: torch.zeros_like(x)),
        ("tiny 1e-6", lambda x: x * 1e-6),
        ("tiny 1e-30 (subnormal range inside)", lambda x: x * 1e-30),
    ],
)
def test_zoo_parity_with_degenerate_inputs(zoo_onnx, name, make):
    model, path = zoo_onnx
    report = check_parity(model, path, batch_sizes=(1, 4), inputs=make(_images()))
    assert report, f"{name}: {report.summary()}\n{report.table()}"
    assert all(r.nonfinite == 0 for r in report.rows)
    assert "PASS" in report.summary() and "non-finite" not in report.summary()


def _nan_pixel(x):
    x = x.clone()
    x[1, 0, 5, 5] = float("nan")
    return x, {1}


def _inf_image(x):
    x = x.clone()
    x[0] = float("inf")
    return x, {0}


def _neg_inf_image(x):
    x = x.clone()
    x[3] = -float("inf")
    return x, {3}


def _nan_and_inf(x):
    x = x.clone()
    x[0, 2, 0, 0] = float("nan")
    x[2] = float("inf")
    return x, {0, 2}


@pytest.mark.parametrize(
    "make",
    [_nan_pixel, _inf_image, _neg_inf_image, _nan_and_inf],
    ids=["nan-pixel", "inf-image", "neg-inf-image", "nan-and-inf"],
)
def test_zoo_parity_propagates_non_finite_inputs(zoo_onnx, make):
    """A non-finite input poisons its own sample (through the pooled dynamic branch) and
    no other; both runtimes agree on where, and the report says so instead of crashing."""
    model, path = zoo_onnx
    x, poisoned = make(_images())
    with torch.no_grad():
        ref = model(x)
    bad_rows = {i for i in range(x.shape[0]) if not torch.isfinite(ref[i]).all()}
    assert bad_rows == poisoned  # per-sample independence on the PyTorch side
    report = check_parity(model, path, batch_sizes=(1, 2, 4), inputs=x)
    assert report, report.table()
    per_run = len(poisoned) * ref.shape[1]
    assert all(r.nonfinite == per_run and r.nonfinite_match for r in report.rows)
    assert f"{6 * per_run} non-finite values propagated identically" in report.summary()
    assert all(np.isfinite([r.max_abs, r.max_rel, r.mean_abs]).all() for r in report.rows)


def test_zoo_parity_a_single_inf_pixel_is_absorbed(zoo_onnx):
    """One +Inf pixel saturates (ReLU6, hard sigmoids) rather than poisoning: both sides agree."""
    model, path = zoo_onnx
    x = _images()
    x[2, 1, 7, 9] = float("inf")
    report = check_parity(model, path, batch_sizes=(1, 4), inputs=x)
    assert report, report.table()
    with torch.no_grad():
        assert torch.isfinite(model(x)).all()


def test_zoo_parity_huge_inputs_are_reported_not_crashed(zoo_onnx):
    """Inputs 1e4 x the calibration scale: the model is ill-conditioned in fp32 there.

    The dynamic terms grow with the square of the input scale and cancel, so PyTorch's
    own fp32 result is far from an fp64 evaluation of the same weights, and fp32 against
    fp32 at 1e-3 would be a coin toss. What must hold: the check runs, every number in the
    report is finite, it names the ill-conditioning, and ONNX Runtime is as close to the
    fp64 truth as PyTorch fp32 is (within a small factor), i.e. the export adds no error
    of its own, so the conditioning-aware verdict passes it.
    """
    model, path = zoo_onnx
    x = _images() * 1e4
    report = check_parity(model, path, batch_sizes=(1, 4), inputs=x)
    assert all(np.isfinite([r.max_abs, r.max_rel]).all() and r.nonfinite == 0 for r in report.rows)
    assert report.ill_conditioned and report, report.table()
    # end to end has no power there: the verdict says so, and the layers decided it
    assert report.inconclusive and "end to end inconclusive" in report.summary()
    assert report.decided_by == "layers", report.summary()
    import onnxruntime as ort

    with torch.no_grad():
        truth = copy.deepcopy(model).double()(x.double())
        fp32 = model(x).double()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1  # the check's own settings
    onnx_out = torch.from_numpy(
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, {"input": x.numpy()})[0]
    )
    # The reported errors are the real ones: the optimised graph at batch 4 and PyTorch fp32,
    # each against the float64 evaluation.
    row = next(r for r in report.rows if (r.optimization, r.batch_size) == ("all", 4))
    assert row.max_abs == pytest.approx((onnx_out.double() - truth).abs().max().item(), rel=1e-6)
    assert row.torch_fp32_abs == pytest.approx((fp32 - truth).abs().max().item(), rel=1e-6)
    assert row.ill_conditioned == (row.torch_fp32_abs > DEFAULT_ATOL + DEFAULT_RTOL * row.scale)
    scale = truth.abs().max()
    torch_err = ((fp32 - truth).abs().max() / scale).item()
    onnx_err = ((onnx_out.double() - truth).abs().max() / scale).item()
    assert onnx_err <= 5 * torch_err + DEFAULT_RTOL, (onnx_err, torch_err)
    # The same comparison at the calibration scale passes at the default tolerance.
    assert check_parity(model, path, batch_sizes=(4,), inputs=_images())


# -- tolerances scale with the output magnitude --------------------------------------------


class _Quadratic(nn.Module):
    """A well-conditioned DCD net with no saturating activation: outputs scale with inputs²."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 1, bias=False)
        self.dcd = DCDConv2d(16, 24, 1, channel_attention=False, latent_dim=4)
        self.bn = nn.BatchNorm2d(24)

    def forward(self, x):
        return torch.flatten(self.bn(self.dcd(self.stem(x))), 1)


def test_parity_tolerance_scales_with_output_magnitude(tmp_path):
    model = randomize(_Quadratic(), seed=5)
    with torch.no_grad():
        model.bn.bias.zero_()
        model.bn.running_mean.zero_()
    path = tmp_path / "q.onnx"
    export_onnx(model, path, input_size=9, check=False, strategy="weight")
    x = torch.randn(4, 3, 9, 9, generator=torch.Generator().manual_seed(0))
    reports = {s: check_parity(model, path, batch_sizes=(2,), inputs=x * s) for s in (1e-3, 1.0, 1e4)}
    for s, report in reports.items():
        assert report, f"scale {s:g}: {report.summary()}"
        assert report.max_rel < 1e-5, (s, report.max_rel)
    big = reports[1e4]
    assert big.max_abs > 100 * DEFAULT_ATOL  # an absolute-only tolerance would have failed
    with torch.no_grad():
        assert model(x * 1e4).abs().max() > 1e6
