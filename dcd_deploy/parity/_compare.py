"""The comparison rule of one output (see the package docstring) and the NaN refusal."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import NonFiniteOutputError
from ._report import DEFAULT_ATOL, DEFAULT_K, DISCRETE_FRACTION, ParityRow


def _per_sample(a: np.ndarray) -> np.ndarray:
    """(N, -1): one row per sample, whatever the rank."""
    return a.reshape(a.shape[0], -1) if a.ndim else a.reshape(1, 1)


def refuse_nonfinite(inputs: list[torch.Tensor], ref32: list[np.ndarray], ref64: list[np.ndarray]) -> None:
    """A NaN or Inf output for a sample whose inputs are all finite: the model is broken."""
    n = inputs[0].shape[0]
    finite_in = np.ones(n, dtype=bool)
    for x in inputs:
        if x.is_floating_point():
            finite_in &= torch.isfinite(x).reshape(n, -1).all(1).numpy()
    bad = np.zeros(n, dtype=bool)
    kinds = set()
    for a32, a64 in zip(ref32, ref64):
        for a in (a32, a64):
            finite = np.isfinite(_per_sample(a)).all(1)
            hit = finite_in & ~finite
            if hit.any():
                kinds.add("NaN" if np.isnan(_per_sample(a)[hit]).any() else "Inf")
            bad |= hit
    if bad.any():
        raise NonFiniteOutputError(
            f"the PyTorch model outputs {' or '.join(sorted(kinds))} on finite inputs: check the checkpoint "
            f"({int(bad.sum())} of {n} inputs; a NaN or huge weight, or BatchNorm statistics that do not fit)"
        )


def compare(
    ref: np.ndarray,
    ref32: np.ndarray,
    out: np.ndarray,
    level: str,
    batch: int,
    *,
    atol: float,
    rtol: float,
    k: float = DEFAULT_K,
    output: str = "",
    nan_to_number: bool = False,
) -> ParityRow:
    """Judge ``out`` (the runtime's) against ``ref`` (float64), given ``ref32`` (PyTorch fp32).

    Any shape; top-1 agreement is computed for (N, classes) outputs only.

    Args:
        nan_to_number: the runtime may turn non-finite values into numbers (OpenVINO's CPU
            plugin does, in its fused activations and pooling, even for standard ops):
            where PyTorch has NaN or Inf and the runtime a number, the value is not
            compared but counted (``nonfinite_replaced``); everywhere else non-finite
            values must match.
    """
    n = ref.shape[0] if ref.ndim else 1
    if ref.shape != out.shape:
        return _shape_mismatch(level, batch, n, output)
    if is_discrete(ref32) or is_discrete(out):
        return _compare_discrete(ref, ref32, out, level, batch, k=k, output=output)
    ref32, out = ref32.astype(np.float64, copy=False), out.astype(np.float64, copy=False)
    finite_32, finite_out = np.isfinite(ref32), np.isfinite(out)
    replaced = ~finite_32 & finite_out if nan_to_number else np.zeros_like(finite_32)
    nonfinite = int((~finite_32).sum())
    kept = ~finite_32 & ~replaced
    nonfinite_match = bool(np.array_equal(finite_32 | replaced, finite_out)) and bool(
        np.array_equal(ref32[kept], out[kept], equal_nan=True)
    )
    both = finite_32 & finite_out & np.isfinite(ref)
    diff = np.abs(ref[both] - out[both])
    err_torch = float(np.abs(ref[both] - ref32[both]).max()) if both.any() else 0.0
    scale = float(np.abs(ref[both]).max()) if both.any() else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    classic = atol + rtol * scale
    tol = max(classic, k * err_torch)
    top1_ok, mismatches = _top1(ref, out, both, tol)
    passed = max_abs <= tol and nonfinite_match and mismatches == 0
    return ParityRow(
        level,
        batch,
        n,
        max_abs,
        max_abs / scale if scale else 0.0,
        float(diff.mean()) if diff.size else 0.0,
        err_torch,
        scale,
        tol,
        err_torch > max(classic, DEFAULT_ATOL),
        top1_ok,
        mismatches,
        nonfinite,
        nonfinite_match,
        passed,
        output=output,
        classifier=ref.ndim == 2 and ref.shape[1] > 1,
        nonfinite_replaced=int(replaced.sum()),
    )


def is_discrete(a: np.ndarray) -> bool:
    """A bool or integer array: a decision (``p > 0.5``, ``argmax``), not a measurement."""
    return a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer)


def _compare_discrete(
    ref: np.ndarray, ref32: np.ndarray, out: np.ndarray, level: str, batch: int, *, k: float, output: str
) -> ParityRow:
    """A bool or integer output, judged by the share of its elements that differ.

    A decision taken on a float within rounding of its threshold (a mask's ``p > 0.5``, an
    argmax's near tie) flips under any other summation order, so a correct file may differ
    in an element or two; a wrong one flips a share of them. The row's errors are shares
    of the elements (scale 1): the runtime's against the float64 reference (``max_abs``),
    PyTorch fp32's (``torch_fp32_abs``); it passes at most ``max(DISCRETE_FRACTION,
    k * PyTorch fp32's share)`` and is ill-conditioned, like a float row, when PyTorch
    fp32's own share exceeds :data:`DISCRETE_FRACTION`.
    """
    n = ref.shape[0] if ref.ndim else 1
    size = max(ref.size, 1)
    differ = int(np.count_nonzero(out != ref))
    torch_share = np.count_nonzero(ref32 != ref) / size
    share = differ / size
    tol = max(DISCRETE_FRACTION, k * torch_share)
    return ParityRow(
        level,
        batch,
        n,
        share,
        share,
        share,
        torch_share,
        1.0,
        tol,
        torch_share > DISCRETE_FRACTION,
        1.0,
        0,
        0,
        True,
        share <= tol,
        output=output,
        classifier=False,
        discrete=True,
        elements=int(ref.size),
        differ=differ,
    )


def _shape_mismatch(level: str, batch: int, n: int, output: str) -> ParityRow:
    """The row of an output whose shape is not the reference's: failed, nothing compared."""
    inf = float("inf")
    return ParityRow(level, batch, n, inf, inf, inf, 0.0, 0.0, 0.0, False, 0.0, n, 0, False, False, output=output)


def _top1(ref: np.ndarray, out: np.ndarray, both: np.ndarray, tol: float) -> tuple[float, int]:
    """(top-1 agreement, disagreements where the reference's top-2 margin exceeds ``tol``)
    of an (N, classes) output over its all-finite rows; (1.0, 0) for any other output."""
    if ref.ndim != 2 or ref.shape[1] <= 1:
        return 1.0, 0
    rows_finite = both.all(axis=1)
    if not rows_finite.any():
        return 1.0, 0
    r, o = ref[rows_finite], out[rows_finite]
    agree = r.argmax(1) == o.argmax(1)
    top2 = np.sort(r, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    return float(agree.mean()), int((~agree & (margin > tol)).sum())
