"""Parity: does the ONNX file compute what the PyTorch model computes?

The reference is the original model (training form, eval mode), never the deploy form,
so the check covers lowering, folding and emission together. ONNX Runtime runs the
file twice, with graph optimisations disabled and fully enabled (its rewrites and
layout changes are part of what ships).

Tolerance (fp32): a comparison passes when ``max |onnx - torch| <= atol + rtol * scale``
with ``scale = max |torch|`` over the batch. Folding BNs and reassociating sums across
~50 layers moves fp32 results by 1e-6..1e-4 of the output scale; the default
``rtol = 1e-3`` leaves a 10x margin, while a lowering mistake shows up at 1e-2 or more.
Top-1 disagreements count only where the reference's top-2 margin exceeds the tolerance.
Non-finite outputs (NaN/Inf inputs) pass when both sides have them in the same places.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .errors import DCDDeployError, ExportError

DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-3
#: ONNX Runtime graph optimisation levels compared (name -> GraphOptimizationLevel attr).
LEVELS = {"disabled": "ORT_DISABLE_ALL", "all": "ORT_ENABLE_ALL"}


@dataclass
class ParityRow:
    """One (optimisation level, batch size) comparison."""

    optimization: str
    batch_size: int
    n_inputs: int
    max_abs: float
    max_rel: float
    mean_abs: float
    top1_agreement: float
    top1_mismatches: int
    nonfinite: int
    nonfinite_match: bool
    passed: bool


@dataclass
class ParityReport:
    """Result of :func:`check_parity`; truthy when every row passed."""

    onnx_path: str
    input_size: int
    atol: float
    rtol: float
    rows: list[ParityRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rows) and all(r.passed for r in self.rows)

    @property
    def passed(self) -> bool:
        return bool(self)

    @property
    def max_abs(self) -> float:
        return max((r.max_abs for r in self.rows), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((r.max_rel for r in self.rows), default=0.0)

    def summary(self) -> str:
        verdict = "PASS" if self else "FAIL"
        top1 = min((r.top1_agreement for r in self.rows), default=1.0)
        nonfinite = sum(r.nonfinite for r in self.rows)
        extra = f", {nonfinite} non-finite values propagated identically" if nonfinite and all(
            r.nonfinite_match for r in self.rows) else ", non-finite values differ" if nonfinite else ""
        return (f"{verdict}: max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g} "
                f"(tolerance atol {self.atol:g} + rtol {self.rtol:g}·scale), top-1 agreement "
                f"{top1:.0%}{extra}")

    def table(self) -> str:
        lines = [f"{'ORT opt':8s} {'batch':>5s} {'inputs':>6s} {'max abs':>10s} {'max rel':>10s} "
                 f"{'mean abs':>10s} {'top-1':>6s} {'ok':>4s}"]
        for r in self.rows:
            lines.append(f"{r.optimization:8s} {r.batch_size:5d} {r.n_inputs:6d} {r.max_abs:10.3g} "
                         f"{r.max_rel:10.3g} {r.mean_abs:10.3g} {r.top1_agreement:6.0%} "
                         f"{'yes' if r.passed else 'NO':>4s}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["passed"] = bool(self)
        return d


def check_parity(model: nn.Module, onnx_path, *, batch_sizes=(1, 2), n_inputs: int = 8, seed: int = 0,
                 atol: float | None = None, rtol: float | None = None,
                 inputs: torch.Tensor | None = None) -> ParityReport:
    """Compare ``model`` (PyTorch, eval mode) with ``onnx_path`` run by ONNX Runtime.

    Args:
        model: the original model.
        onnx_path: an ONNX file exported from it.
        batch_sizes: batch sizes to run (each must fit the file's batch axis).
        n_inputs: inputs per batch size (rounded up to whole batches).
        seed: seed of the synthetic inputs.
        atol: absolute tolerance (default :data:`DEFAULT_ATOL`).
        rtol: tolerance relative to the output scale (default :data:`DEFAULT_RTOL`).
        inputs: explicit (N, 3, S, S) inputs instead of synthetic ones.

    Returns:
        A :class:`ParityReport`; it is falsy when any comparison failed.
    """
    import onnxruntime as ort

    from .models import synthetic_images

    atol = DEFAULT_ATOL if atol is None else float(atol)
    rtol = DEFAULT_RTOL if rtol is None else float(rtol)
    onnx_path = Path(onnx_path)
    sessions = {}
    for name, level in LEVELS.items():
        opts = ort.SessionOptions()
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        try:
            sessions[name] = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own exception types for unreadable files
            raise ExportError(f"ONNX Runtime cannot load {onnx_path}: {str(exc).splitlines()[0]}") from exc
    spec = sessions["disabled"].get_inputs()[0]
    fixed_batch = spec.shape[0] if isinstance(spec.shape[0], int) else None
    size = spec.shape[2]
    if not isinstance(size, int):
        raise DCDDeployError(f"{onnx_path} has a dynamic spatial size; parity needs a fixed one")
    if inputs is None:
        total = max(-(-n_inputs // b) * b for b in batch_sizes)  # whole batches, rounded up
        inputs = synthetic_images(total, size, seed=seed)
    inputs = inputs.float()
    report = ParityReport(onnx_path=str(onnx_path), input_size=size, atol=atol, rtol=rtol)
    model = model.eval()
    for b in batch_sizes:
        if fixed_batch is not None and b != fixed_batch:
            raise DCDDeployError(f"{onnx_path} has a fixed batch of {fixed_batch}; cannot check batch {b}")
        used = min(inputs.shape[0], -(-n_inputs // b) * b) if inputs.shape[0] >= b else 0
        chunks = [inputs[i:i + b] for i in range(0, used - b + 1, b)]
        if not chunks:
            raise DCDDeployError(f"batch size {b} needs at least {b} inputs; got {inputs.shape[0]}")
        with torch.no_grad():
            refs = [model(c).numpy() for c in chunks]
        for name, sess in sessions.items():
            outs = [sess.run(None, {spec.name: c.numpy()})[0] for c in chunks]
            report.rows.append(_compare(np.concatenate(refs), np.concatenate(outs), name, b, atol, rtol))
    return report


def _compare(ref: np.ndarray, out: np.ndarray, level: str, batch: int, atol: float, rtol: float) -> ParityRow:
    if ref.shape != out.shape:
        return ParityRow(level, batch, ref.shape[0], float("inf"), float("inf"), float("inf"), 0.0,
                         ref.shape[0], 0, False, False)
    finite_ref, finite_out = np.isfinite(ref), np.isfinite(out)
    nonfinite = int((~finite_ref).sum())
    nonfinite_match = bool(np.array_equal(finite_ref, finite_out)) and bool(
        np.array_equal(ref[~finite_ref], out[~finite_out], equal_nan=True))
    both = finite_ref & finite_out
    diff = np.abs(ref[both].astype(np.float64) - out[both])
    scale = float(np.abs(ref[both]).max()) if both.any() else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    tol = atol + rtol * scale
    top1_ok, mismatches = 1.0, 0
    rows_finite = finite_ref.all(axis=1) & finite_out.all(axis=1)
    if rows_finite.any() and ref.shape[1] > 1:
        r, o = ref[rows_finite], out[rows_finite]
        agree = r.argmax(1) == o.argmax(1)
        top2 = np.sort(r, axis=1)[:, -2:]
        margin = top2[:, 1] - top2[:, 0]
        mismatches = int((~agree & (margin > tol)).sum())
        top1_ok = float(agree.mean())
    passed = max_abs <= tol and nonfinite_match and mismatches == 0
    return ParityRow(level, batch, ref.shape[0], max_abs, max_abs / scale if scale else 0.0,
                     float(diff.mean()) if diff.size else 0.0, top1_ok, mismatches, nonfinite,
                     nonfinite_match, passed)
