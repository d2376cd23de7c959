"""The DCDPointwise, DCDConvEpilogue and DCDDepthwise op contracts (docs/design.md "Fused op") in float64 numpy, and random
cases for it: the oracle of the kernel tests, in OpenVINO (test_kernel.py) and in the
stand-alone driver under qemu (test_aarch64.py). Needs numpy only."""

from __future__ import annotations

import math

import numpy as np

#: The contract's weight inputs, in order (absent ones skipped: gate without se, scale_w
#: without attention).
WEIGHT_ORDER = ("fc1", "gate", "scale_w", "phi_w", "phi_b", "q", "q_b", "p", "w0", "bias")


def hsig(v):
    return np.clip(v / 6.0 + 0.5, 0.0, 1.0)


def adaptive_bins(n):
    return [(i * n // 2, -(-((i + 1) * n) // 2)) for i in range(2)]


def _pooled(xb, pool):
    H, W, Cin = xb.shape
    if pool == 1:
        return xb.mean(axis=(0, 1))
    pooled = np.zeros(Cin * 4)
    for i, (r0, r1) in enumerate(adaptive_bins(H)):
        for j, (c0, c1) in enumerate(adaptive_bins(W)):
            pooled[np.arange(Cin) * 4 + i * 2 + j] = xb[r0:r1, c0:c1].mean(axis=(0, 1))
    return pooled


def _branch(xb, c, *, pool, se, attention):
    """Λ (C_out) and Φ' (L x L, or L x Lz for the latent input) of one sample (H, W, C_in), float64."""
    L = c["p"].shape[1]
    y = c["fc1"] @ _pooled(xb, pool)
    y = y * hsig(c["gate"] @ y) if se else np.maximum(y, 0)
    lam = hsig(c["scale_w"] @ y) if attention else np.ones(c["p"].shape[0])
    phi = (c["phi_w"] @ y + c["phi_b"]).reshape(L, -1)
    return lam, phi


def _act(out, activation, alpha=0.0):
    """The activation on float64 ``out`` (``alpha``: leaky_relu's negative slope, prelu's per
    channel)."""
    if activation == "relu":
        return np.maximum(out, 0)
    if activation == "relu6":
        return np.clip(out, 0, 6)
    if activation == "silu":
        with np.errstate(over="ignore"):  # e^-x is inf for x below about -709: x / inf = -0
            return out / (1.0 + np.exp(-out))
    if activation == "hardswish":
        return out * np.clip(out + 3.0, 0.0, 6.0) / 6.0
    if activation == "gelu":  # x Φ(x), Φ(x) = erfc(-x / √2) / 2 (math.erfc: no cancellation in the tail)
        return out * np.vectorize(math.erfc, otypes=[np.float64])(-out / math.sqrt(2.0)) / 2.0
    if activation == "mish":  # x tanh(softplus(x)), softplus as log1p(e^x) (x for x > 20, as PyTorch)
        with np.errstate(over="ignore"):
            return out * np.tanh(np.where(out > 20.0, out, np.log1p(np.exp(np.minimum(out, 20.0)))))
    # x for x >= 0, alpha x below (prelu: alpha per channel, the last axis); NaN stays NaN
    # (out < 0 is false for it)
    if activation in ("leaky_relu", "prelu"):
        return np.where(out < 0, alpha * out, out)
    return out


def reference(x, res, c, *, pool, se, attention, activation, alpha=0.0):
    """float64 numpy implementation of the op contract, straight from the spec."""
    x = x.astype(np.float64)
    c = {k: v.astype(np.float64) for k, v in c.items()}
    B, H, W, Cin = x.shape
    outs = []
    for b in range(B):
        xb = x[b]
        lam, phi = _branch(xb, c, pool=pool, se=se, attention=attention)
        xf = xb.reshape(-1, Cin)
        z = xf @ c["q"].T + c["q_b"]
        out = lam * (xf @ c["w0"].T) + (z @ phi.T) @ c["p"].T + c["bias"]
        out = out.reshape(H, W, -1)
        if res is not None:
            out = out + res[b]
        outs.append(_act(out, activation, alpha))
    return np.stack(outs)


# --------------------------------------------------------------------- DCDConvEpilogue
#: DCDConvEpilogue's weight inputs after conv, x and [residual]: DCDPointwise's without w0.
EPILOGUE_WEIGHT_ORDER = tuple(k for k in WEIGHT_ORDER if k != "w0")


def conv_nhwc(x, w, *, stride, pad):
    """float64 cross-correlation of x (B, H, W, C_in) with w (C_out, C_in, k, k), zero
    padding `pad` on every side: (B, Ho, Wo, C_out), written out tap by tap."""
    x = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    w = w.astype(np.float64)
    B, Hp, Wp, _ = x.shape
    k = w.shape[2]
    Ho, Wo = (Hp - k) // stride + 1, (Wp - k) // stride + 1
    out = np.zeros((B, Ho, Wo, w.shape[0]))
    for i in range(k):
        for j in range(k):
            patch = x[:, i : i + stride * (Ho - 1) + 1 : stride, j : j + stride * (Wo - 1) + 1 : stride, :]
            out += patch @ w[:, :, i, j].T
    return out


def epilogue_reference(x, conv, res, c, *, pool, se, attention, activation, stride, offset, alpha=0.0):
    """float64 DCDConvEpilogue: act(Λ ⊙ conv + P Φ' (Q x_s + q_b) + bias + residual), with
    x_s = x at rows/columns i * stride + offset and the branch pooling all of x."""
    x = x.astype(np.float64)
    c = {k: v.astype(np.float64) for k, v in c.items()}
    B, Ho, Wo, _ = conv.shape
    outs = []
    for b in range(B):
        lam, phi = _branch(x[b], c, pool=pool, se=se, attention=attention)
        xs = x[b, offset : offset + stride * (Ho - 1) + 1 : stride, offset : offset + stride * (Wo - 1) + 1 : stride]
        z = xs @ c["q"].T + c["q_b"]
        out = lam * conv[b].astype(np.float64) + (z @ phi.T) @ c["p"].T + c["bias"]
        if res is not None:
            out = out + res[b]
        outs.append(_act(out, activation, alpha))
    return np.stack(outs)


# ------------------------------------------------------------------------ DCDDepthwise
#: DCDDepthwise's weight inputs after x and [residual] (q and q_b absent; w0 (C, k²), r (L, k²)).
DEPTHWISE_WEIGHT_ORDER = ("fc1", "gate", "scale_w", "phi_w", "phi_b", "p", "w0", "bias", "r")


def depthwise_reference(x, res, c, *, pool, se, attention, activation, k, stride, pads, dilation, alpha=0.0):
    """float64 DCDDepthwise (paper Eq. 7 per sample): K = Λ ⊙ W0 + (P Φ') R (C x k²), then
    act(x ⊛ K + bias + residual), the depthwise cross-correlation with zero padding ``pads``
    (top, left, bottom, right), written out tap by tap."""
    c = {n: v.astype(np.float64) for n, v in c.items()}
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    B, Hp, Wp, C = xp.shape
    span = dilation * (k - 1)
    Ho, Wo = (Hp - span - 1) // stride + 1, (Wp - span - 1) // stride + 1
    outs = []
    for b in range(B):
        lam, phi = _branch(x[b].astype(np.float64), c, pool=pool, se=se, attention=attention)
        kernel = lam[:, None] * c["w0"] + (c["p"] @ phi) @ c["r"]  # (C, k²)
        out = np.zeros((Ho, Wo, C)) + c["bias"]
        for i in range(k):
            for j in range(k):
                r0, c0 = i * dilation, j * dilation
                out += (
                    xp[b, r0 : r0 + stride * (Ho - 1) + 1 : stride, c0 : c0 + stride * (Wo - 1) + 1 : stride]
                    * kernel[:, i * k + j]
                )
        if res is not None:
            out = out + res[b]
        outs.append(_act(out, activation, alpha))
    return np.stack(outs)


def make_depthwise_case(rng, *, B, H, W, C, L, S, k, pool, se, attention):
    """(x, weights by DCDDepthwise's contract name), float32."""
    x, _, c = make_case(rng, B=B, H=H, W=W, Cin=C, Cout=C, L=L, S=S, pool=pool, se=se, attention=attention, residual=0)
    for name in ("q", "q_b"):
        del c[name]
    c["w0"] = (rng.standard_normal((C, k * k)) / k).astype(np.float32)
    c["r"] = (rng.standard_normal((L, k * k)) * 0.3).astype(np.float32)
    return x, c


def make_case(rng, *, B, H, W, Cin, Cout, L, S, pool, se, attention, residual):
    """(x, residual or None, weights by contract name), float32, of the given sizes."""

    def r(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    x = r(B, H, W, Cin)
    res = r(B, H, W, Cout) if residual else None
    c = {"fc1": r(S, Cin * pool * pool, scale=0.5)}
    if se:
        c["gate"] = r(S, S, scale=0.5)
    if attention:
        c["scale_w"] = r(Cout, S, scale=0.5)
    c.update(
        phi_w=r(L * L, S, scale=0.2),
        phi_b=r(L * L, scale=0.2),
        q=r(L, Cin, scale=0.3),
        q_b=r(L, scale=0.3),
        p=r(Cout, L, scale=0.3),
        w0=r(Cout, Cin, scale=1 / np.sqrt(Cin)),
        bias=r(Cout, scale=0.1),
    )
    return x, res, c


def max_relative_error(got, want) -> float:
    """Largest absolute error relative to the output's scale (at least 1)."""
    return float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))


# ------------------------------------------------ DCDConvEpilogue with latent_input (joint)
def latent_epilogue_reference(x, conv, z, res, c, *, pool, se, attention, activation, alpha=0.0):
    """float64 DCDConvEpilogue with ``latent_input``: act(Λ ⊙ conv + P Φ' z + bias +
    residual), z (B, Ho, Wo, Lz) given, Φ' of L x Lz, the branch pooling all of x."""
    x = x.astype(np.float64)
    c = {k: v.astype(np.float64) for k, v in c.items()}
    outs = []
    for b in range(conv.shape[0]):
        lam, phi = _branch(x[b], c, pool=pool, se=se, attention=attention)
        out = lam * conv[b].astype(np.float64) + (z[b].astype(np.float64) @ phi.T) @ c["p"].T + c["bias"]
        if res is not None:
            out = out + res[b]
        outs.append(_act(out, activation, alpha))
    return np.stack(outs)


def make_latent_case(rng, *, B, H, W, Ho, Wo, Cin, Cout, L, Lz, S, pool, se, attention, residual):
    """(x, conv, z, residual or None, weights by contract name without q, q_b), float32."""
    x, _, c = make_case(
        rng, B=B, H=H, W=W, Cin=Cin, Cout=Cout, L=L, S=S, pool=pool, se=se, attention=attention, residual=0
    )
    for k in ("q", "q_b", "w0"):
        del c[k]
    c["phi_w"] = (rng.standard_normal((L * Lz, S)) * 0.2).astype(np.float32)
    c["phi_b"] = (rng.standard_normal(L * Lz) * 0.2).astype(np.float32)
    conv = rng.standard_normal((B, Ho, Wo, Cout)).astype(np.float32)
    z = rng.standard_normal((B, Ho, Wo, Lz)).astype(np.float32)
    res = rng.standard_normal((B, Ho, Wo, Cout)).astype(np.float32) if residual else None
    return x, conv, z, res, c


#: The latent-input node's weight inputs after conv, x, [residual] and z.
LATENT_WEIGHT_ORDER = tuple(k for k in EPILOGUE_WEIGHT_ORDER if k not in ("q", "q_b"))
