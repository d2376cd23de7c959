"""The DCDPointwise op contract (docs/design.md "Fused op") in float64 numpy, and random
cases for it: the oracle of the kernel tests, in OpenVINO (test_kernel.py) and in the
stand-alone driver under qemu (test_aarch64.py). Needs numpy only."""

from __future__ import annotations

import numpy as np

#: The contract's weight inputs, in order (absent ones skipped: gate without se, scale_w
#: without attention).
WEIGHT_ORDER = ("fc1", "gate", "scale_w", "phi_w", "phi_b", "q", "q_b", "p", "w0", "bias")


def hsig(v):
    return np.clip(v / 6.0 + 0.5, 0.0, 1.0)


def adaptive_bins(n):
    return [(i * n // 2, -(-((i + 1) * n) // 2)) for i in range(2)]


def reference(x, res, c, *, pool, se, attention, activation):
    """float64 numpy implementation of the op contract, straight from the spec."""
    x = x.astype(np.float64)
    c = {k: v.astype(np.float64) for k, v in c.items()}
    B, H, W, Cin = x.shape
    L = c["q"].shape[0]
    outs = []
    for b in range(B):
        xb = x[b]
        if pool == 1:
            pooled = xb.mean(axis=(0, 1))
        else:
            pooled = np.zeros(Cin * 4)
            for i, (r0, r1) in enumerate(adaptive_bins(H)):
                for j, (c0, c1) in enumerate(adaptive_bins(W)):
                    pooled[np.arange(Cin) * 4 + i * 2 + j] = xb[r0:r1, c0:c1].mean(axis=(0, 1))
        y = c["fc1"] @ pooled
        y = y * hsig(c["gate"] @ y) if se else np.maximum(y, 0)
        lam = hsig(c["scale_w"] @ y) if attention else np.ones(c["w0"].shape[0])
        phi = (c["phi_w"] @ y + c["phi_b"]).reshape(L, L)
        xf = xb.reshape(-1, Cin)
        z = xf @ c["q"].T + c["q_b"]
        out = lam * (xf @ c["w0"].T) + (z @ phi.T) @ c["p"].T + c["bias"]
        out = out.reshape(H, W, -1)
        if res is not None:
            out = out + res[b]
        if activation == "relu":
            out = np.maximum(out, 0)
        elif activation == "relu6":
            out = np.clip(out, 0, 6)
        outs.append(out)
    return np.stack(outs)


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
    c.update(phi_w=r(L * L, S, scale=0.2), phi_b=r(L * L, scale=0.2), q=r(L, Cin, scale=0.3), q_b=r(L, scale=0.3),
             p=r(Cout, L, scale=0.3), w0=r(Cout, Cin, scale=1 / np.sqrt(Cin)), bias=r(Cout, scale=0.1))
    return x, res, c


def max_relative_error(got, want) -> float:
    """Largest absolute error relative to the output's scale (at least 1)."""
    return float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
