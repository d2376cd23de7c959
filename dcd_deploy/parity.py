"""Parity: does the ONNX file compute what the PyTorch model computes?

The reference is the original model (training form, eval mode), never the deploy form,
so the check covers lowering, folding and emission together. ONNX Runtime runs the
file twice, with graph optimisations disabled and fully enabled (its rewrites and
layout changes are part of what ships). With ``backends=("openvino",)`` (or both),
OpenVINO's CPU plugin runs it once more, with this toolkit's fused kernels loaded when
the file has ``dcd_deploy`` nodes (:mod:`dcd_deploy.openvino`); the verdict rules are
the same for every runtime.

The verdict is conditioning-aware. fp32 arithmetic is only as good as the model and its
inputs let it be: a network fed far outside its working range amplifies rounding until
PyTorch's own fp32 result is percent away from the exact one, and then fp32 against fp32
says nothing about the export. So the original model is also evaluated in float64 (a
copy; the user's model is not touched), and both fp32 computations are measured
against that reference:

* ``err_torch = max |torch_fp32 - ref64|``: how well fp32 can do here at all;
* ``err_onnx = max |onnx - ref64|``: how well the export does;
* a comparison passes when ``err_onnx <= max(atol + rtol * scale, k * err_torch)`` with
  ``scale = max |ref64|`` over the batch and ``k =`` :data:`DEFAULT_K`.

The first bound is the classic one: folding BNs and reassociating sums across ~50 layers
moves a well-conditioned fp32 result by 1e-6..1e-4 of the output scale, ``rtol = 1e-3``
leaves a 10x margin, and a lowering mistake shows at 1e-2 or more. The second lets the
export be as good as PyTorch itself where fp32 is ill-conditioned: two fp32 evaluations
of the same function in different orders land at comparable distances from the exact
result. Measured over the zoo's DCD, DY-Conv and CondConv models on natural, noise and
5x-scaled inputs, ``err_onnx / err_torch`` stayed within 0.6-2.5 for DCD exports and
reached 8 for DY-Conv, whose deploy form sums K separately convolved kernels (larger
intermediate terms than mixing the kernels first); so ``k = 10``. It only matters where
``err_torch`` exceeds a tenth of the classic bound; a wrong weight, which moves the
function itself, lands orders of magnitude further out on inputs where fp32 is
well-conditioned. When ``err_torch`` alone exceeds the classic bound the report says so:
fp32 itself is ill-conditioned on those inputs, and a verdict on inputs from the model's
working range (``inputs=``, ``--inputs FILE``) is the one to trust.

Top-1 disagreements with the reference count only where its top-2 margin exceeds the
tolerance. Non-finite outputs for non-finite inputs pass when ONNX Runtime has them in
the same places as PyTorch; a non-finite output for a finite input means the model
itself is broken (:class:`NonFiniteOutputError`), whatever the export does.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .errors import DCDDeployError, ExportError, NonFiniteOutputError

DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-3
#: How many times PyTorch's own fp32 error (against float64) the export may be off.
DEFAULT_K = 10.0
#: ONNX Runtime graph optimisation levels compared (name -> GraphOptimizationLevel attr).
LEVELS = {"disabled": "ORT_DISABLE_ALL", "all": "ORT_ENABLE_ALL"}
#: Runtimes :func:`check_parity` can run a file in.
BACKENDS = ("onnxruntime", "openvino")
#: Version of the layout of :meth:`ParityReport.to_dict` (``dcd-validate --json``).
SCHEMA = "dcd-validate.parity/1"
#: Inputs per float64 reference batch (bounds the copy's activation memory).
REFERENCE_CHUNK = 8


@dataclass
class ParityRow:
    """One (runtime and optimisation level, batch size) comparison; errors are against the reference.

    Attributes:
        optimization: ONNX Runtime's level (``disabled``, ``all``) or ``openvino``.
        max_abs: max |onnx - reference| over finite values (``err_onnx``).
        max_rel: ``max_abs / scale``.
        torch_fp32_abs: max |PyTorch fp32 - reference| (``err_torch``): what fp32
            achieves on these inputs at all.
        scale: the reference's max magnitude.
        tolerance: the bound ``max_abs`` was held to.
        ill_conditioned: ``err_torch`` alone exceeds ``atol + rtol * scale`` (and the
            default ``atol``, so a tolerance set to zero does not call every model so).
    """

    optimization: str
    batch_size: int
    n_inputs: int
    max_abs: float
    max_rel: float
    mean_abs: float
    torch_fp32_abs: float
    scale: float
    tolerance: float
    ill_conditioned: bool
    top1_agreement: float
    top1_mismatches: int
    nonfinite: int
    nonfinite_match: bool
    passed: bool
    backend: str = "onnxruntime"

    @property
    def torch_fp32_rel(self) -> float:
        return self.torch_fp32_abs / self.scale if self.scale else 0.0


@dataclass
class ParityReport:
    """Result of :func:`check_parity`; truthy when every row passed.

    Attributes:
        reference: ``float64`` (a float64 copy of the model) or ``float32`` when the model
            cannot run in float64 (then ``err_torch`` is 0 and the classic bound decides).
        synthetic_inputs: the inputs were the built-in synthetic images, not the caller's.
    """

    onnx_path: str
    input_size: int
    atol: float
    rtol: float
    rows: list[ParityRow] = field(default_factory=list)
    k: float = DEFAULT_K
    reference: str = "float64"
    synthetic_inputs: bool = True

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

    @property
    def torch_fp32_rel(self) -> float:
        """PyTorch fp32's worst error against the reference, relative to the output scale."""
        return max((r.torch_fp32_rel for r in self.rows), default=0.0)

    @property
    def ill_conditioned(self) -> bool:
        return any(r.ill_conditioned for r in self.rows)

    def conditioning_note(self) -> str:
        """One sentence on fp32's own accuracy here ('' when it is unremarkable)."""
        if not self.ill_conditioned:
            return ""
        return (f"fp32 itself is ill-conditioned on these inputs (PyTorch fp32 is "
                f"{self.torch_fp32_rel:.2g} of the output scale off float64)")

    def summary(self) -> str:
        verdict = "PASS" if self else "FAIL"
        top1 = min((r.top1_agreement for r in self.rows), default=1.0)
        nonfinite = sum(r.nonfinite for r in self.rows)
        extra = f", {nonfinite} non-finite values propagated identically" if nonfinite and all(
            r.nonfinite_match for r in self.rows) else ", non-finite values differ" if nonfinite else ""
        note = self.conditioning_note()
        return (f"{verdict}: max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g} against {self.reference} "
                f"(PyTorch fp32: max rel {self.torch_fp32_rel:.3g}; tolerance max(atol {self.atol:g} + "
                f"rtol {self.rtol:g}·scale, {self.k:g}·PyTorch fp32 error)), top-1 agreement "
                f"{top1:.0%}{extra}{'; ' + note if note else ''}")

    def table(self) -> str:
        """One line per row; errors are against the reference, 'torch fp32' is PyTorch's own."""
        head = "ORT opt" if all(r.backend == "onnxruntime" for r in self.rows) else "runtime"
        lines = [f"{head:8s} {'batch':>5s} {'inputs':>6s} {'max abs':>10s} {'max rel':>10s} "
                 f"{'torch fp32':>10s} {'tolerance':>10s} {'top-1':>6s} {'ok':>4s}"]
        for r in self.rows:
            lines.append(f"{r.optimization:8s} {r.batch_size:5d} {r.n_inputs:6d} {r.max_abs:10.3g} "
                         f"{r.max_rel:10.3g} {r.torch_fp32_abs:10.3g} {r.tolerance:10.3g} "
                         f"{r.top1_agreement:6.0%} {'yes' if r.passed else 'NO':>4s}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The JSON document of ``dcd-validate --json`` (schema :data:`SCHEMA`)."""
        from ._version import __version__

        d = {"schema": SCHEMA, "version": __version__, **asdict(self)}
        d["passed"] = bool(self)
        d["ill_conditioned"] = self.ill_conditioned
        d["torch_fp32_rel"] = self.torch_fp32_rel
        for row, r in zip(d["rows"], self.rows):
            row["torch_fp32_rel"] = r.torch_fp32_rel
        return d


def check_parity(model: nn.Module, onnx_path, *, batch_sizes=(1, 2), n_inputs: int = 8, seed: int = 0,
                 atol: float | None = None, rtol: float | None = None, k: float | None = None,
                 inputs: torch.Tensor | None = None, backends=("onnxruntime",)) -> ParityReport:
    """Compare ``model`` (PyTorch, eval mode) with ``onnx_path`` run by ONNX Runtime (or OpenVINO).

    Args:
        model: the original model (not modified; a float64 copy serves as reference).
        onnx_path: an ONNX file exported from it.
        batch_sizes: batch sizes to run (each must fit the file's batch axis).
        n_inputs: synthetic inputs per batch size (rounded up to whole batches).
        seed: seed of the synthetic inputs.
        atol: absolute tolerance (default :data:`DEFAULT_ATOL`).
        rtol: tolerance relative to the output scale (default :data:`DEFAULT_RTOL`).
        k: how many times PyTorch's own fp32 error the export may reach (default
            :data:`DEFAULT_K`).
        inputs: explicit (N, 3, S, S) inputs instead of synthetic ones; all of them are
            used, in whole batches of each size.
        backends: runtimes to run the file in, of :data:`BACKENDS`: ``onnxruntime``
            (optimisations off and on) and ``openvino`` (CPU plugin, fp32, one thread,
            the fused-kernel extension loaded when the file needs it).

    Returns:
        A :class:`ParityReport`; it is falsy when any comparison failed.

    Raises:
        NonFiniteOutputError: the PyTorch model outputs NaN or Inf for a finite input.
        ExportError: ONNX Runtime cannot load the file.
        ExtensionError: OpenVINO or its extension is missing.
        DCDDeployError: the file's input does not fit the check (batch, spatial size), or
            OpenVINO cannot compile it.
    """
    atol = DEFAULT_ATOL if atol is None else float(atol)
    rtol = DEFAULT_RTOL if rtol is None else float(rtol)
    k = DEFAULT_K if k is None else float(k)
    onnx_path = Path(onnx_path)
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown or not backends:
        raise DCDDeployError(f"unknown parity backend {', '.join(unknown) or '(none)'}; expected {', '.join(BACKENDS)}")
    runners = _runners(onnx_path, backends)
    fixed_batch, size = _input_spec(onnx_path)
    if not isinstance(size, int):
        raise DCDDeployError(f"{onnx_path} has a dynamic spatial size; parity needs a fixed one")
    synthetic = inputs is None
    if synthetic:
        from .models import synthetic_images

        total = max(-(-n_inputs // b) * b for b in batch_sizes)  # whole batches, rounded up
        inputs = synthetic_images(total, size, seed=seed)
    inputs = inputs.float()
    report = ParityReport(onnx_path=str(onnx_path), input_size=size, atol=atol, rtol=rtol, k=k,
                          synthetic_inputs=synthetic)
    model = model.eval()
    plans = {b: _used(b, inputs.shape[0], n_inputs if synthetic else None, fixed_batch, onnx_path)
             for b in batch_sizes}
    ref64, report.reference = _reference(model, inputs[:max(plans.values())])
    for b, used in plans.items():
        chunks = [inputs[i:i + b] for i in range(0, used, b)]
        with torch.no_grad():
            ref32 = np.concatenate([model(c).numpy() for c in chunks])
        _refuse_nonfinite(inputs[:used], ref32, ref64[:used])
        for (backend, name), run in runners.items():
            out = np.concatenate([run(c.numpy()) for c in chunks])
            row = _compare(ref64[:used], ref32, out, name, b, atol=atol, rtol=rtol, k=k)
            row.backend = backend
            report.rows.append(row)
    return report


def _runners(onnx_path: Path, backends) -> dict:
    """``{(backend, label): run(batch) -> output}`` for each runtime configuration."""
    runners = {}
    if "onnxruntime" in backends:
        import onnxruntime as ort

        for name, level in LEVELS.items():
            opts = ort.SessionOptions()
            opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
            opts.intra_op_num_threads = opts.inter_op_num_threads = 1
            try:
                sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
            except Exception as exc:  # ORT raises its own exception types for unreadable files
                raise ExportError(f"ONNX Runtime cannot load {onnx_path}: {str(exc).splitlines()[0]}") from exc
            feed = sess.get_inputs()[0].name
            runners["onnxruntime", name] = lambda c, sess=sess, feed=feed: sess.run(None, {feed: c})[0]
    if "openvino" in backends:
        runners["openvino", "openvino"] = _openvino_runner(onnx_path)
    return runners


def _openvino_runner(onnx_path: Path):
    """OpenVINO CPU, one thread, fp32, compiled once per batch shape."""
    from .openvino import compile_onnx

    compiled = {}

    def run(c: np.ndarray) -> np.ndarray:
        if c.shape not in compiled:
            compiled[c.shape] = compile_onnx(onnx_path, threads=1, input_shape=c.shape).create_infer_request()
        try:
            return next(iter(compiled[c.shape].infer({0: c}).values()))
        except RuntimeError as exc:  # OpenVINO's run-time failures (a kernel refusing its input)
            from .openvino import openvino_message

            raise DCDDeployError(f"OpenVINO failed running {onnx_path}: {openvino_message(exc)}") from None

    return run


def _input_spec(onnx_path: Path) -> tuple[int | None, int]:
    """(fixed batch or None, spatial side) of the file's one image input."""
    import onnx

    proto = onnx.load(str(onnx_path), load_external_data=False)
    weights = {t.name for t in proto.graph.initializer}
    spec = next(i for i in proto.graph.input if i.name not in weights)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in spec.type.tensor_type.shape.dim]
    return dims[0], dims[2]


def _used(batch: int, available: int, n_inputs: int | None, fixed_batch: int | None, path: Path) -> int:
    """How many inputs a batch size runs: whole batches, up to ``n_inputs`` when given."""
    if fixed_batch is not None and batch != fixed_batch:
        raise DCDDeployError(f"{path} has a fixed batch of {fixed_batch}; cannot check batch {batch}")
    wanted = available if n_inputs is None else min(available, -(-n_inputs // batch) * batch)
    used = wanted // batch * batch
    if not used:
        raise DCDDeployError(f"batch size {batch} needs at least {batch} inputs; got {available}")
    return used


def _reference(model: nn.Module, inputs: torch.Tensor) -> tuple[np.ndarray, str]:
    """The model's outputs in float64 (on a copy), or in float32 where float64 cannot run."""
    try:
        ref = copy.deepcopy(model).double().eval()
        with torch.no_grad():
            out = [ref(inputs[i:i + REFERENCE_CHUNK].double()).numpy()
                   for i in range(0, inputs.shape[0], REFERENCE_CHUNK)]
        return np.concatenate(out), "float64"
    except (RuntimeError, TypeError, NotImplementedError):  # an op or buffer without float64 support
        with torch.no_grad():
            return model(inputs).double().numpy(), "float32"


def _refuse_nonfinite(inputs: torch.Tensor, ref32: np.ndarray, ref64: np.ndarray) -> None:
    finite_in = torch.isfinite(inputs).flatten(1).all(1).numpy()
    bad = finite_in & ~(np.isfinite(ref32).all(1) & np.isfinite(ref64).all(1))
    if bad.any():
        kinds = " or ".join(sorted({"NaN" if np.isnan(a[bad]).any() else "Inf"
                                    for a in (ref32, ref64) if not np.isfinite(a[bad]).all()}))
        raise NonFiniteOutputError(
            f"the PyTorch model outputs {kinds} on finite inputs: check the checkpoint ({int(bad.sum())} of "
            f"{len(bad)} inputs; a NaN or huge weight, or BatchNorm statistics that do not fit)")


def _compare(ref: np.ndarray, ref32: np.ndarray, out: np.ndarray, level: str, batch: int, *,
             atol: float, rtol: float, k: float = DEFAULT_K) -> ParityRow:
    """Judge ``out`` (ONNX Runtime) against ``ref`` (float64), given ``ref32`` (PyTorch fp32)."""
    n = ref.shape[0]
    if ref.shape != out.shape:
        return ParityRow(level, batch, n, float("inf"), float("inf"), float("inf"), 0.0, 0.0, 0.0, False,
                         0.0, n, 0, False, False)
    finite_32, finite_out = np.isfinite(ref32), np.isfinite(out)
    nonfinite = int((~finite_32).sum())
    nonfinite_match = bool(np.array_equal(finite_32, finite_out)) and bool(
        np.array_equal(ref32[~finite_32], out[~finite_out], equal_nan=True))
    both = finite_32 & finite_out & np.isfinite(ref)
    diff = np.abs(ref[both] - out[both].astype(np.float64))
    err_torch = float(np.abs(ref[both] - ref32[both].astype(np.float64)).max()) if both.any() else 0.0
    scale = float(np.abs(ref[both]).max()) if both.any() else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    classic = atol + rtol * scale
    tol = max(classic, k * err_torch)
    top1_ok, mismatches = 1.0, 0
    rows_finite = both.all(axis=1) if both.ndim > 1 else both
    if rows_finite.any() and ref.ndim > 1 and ref.shape[1] > 1:
        r, o = ref[rows_finite], out[rows_finite]
        agree = r.argmax(1) == o.argmax(1)
        top2 = np.sort(r, axis=1)[:, -2:]
        margin = top2[:, 1] - top2[:, 0]
        mismatches = int((~agree & (margin > tol)).sum())
        top1_ok = float(agree.mean())
    passed = max_abs <= tol and nonfinite_match and mismatches == 0
    return ParityRow(level, batch, n, max_abs, max_abs / scale if scale else 0.0,
                     float(diff.mean()) if diff.size else 0.0, err_torch, scale, tol,
                     err_torch > max(classic, DEFAULT_ATOL),
                     top1_ok, mismatches, nonfinite, nonfinite_match, passed)
