"""Layer-wise parity: every layer the export emitted, checked on its own input.

An end-to-end comparison loses its power where the network amplifies rounding (a model
fed images unlike those its BatchNorm statistics describe can put PyTorch's own fp32
result tens of percent off float64, and any tolerance that lets a correct file pass
there lets a wrong one pass too). One layer does not amplify: its fp32 error stays
about 1e-6 of its output scale whatever comes before it. So each layer is judged on
its own, like Polygraphy's ``--onnx-outputs mark all`` and "which layer diverges first":

1. The exporter records, in the file's ``metadata_props`` key ``dcd_deploy.layers``, a
   JSON list in graph order with one entry per layer it emitted (each DCD, DY-Conv and
   CondConv layer, each Conv and Linear; one per call of a layer called more than once): ``path`` (module path in the original model),
   ``kind`` (``DCD``, ``DYConv``, ``CondConv``, ``Conv``, ``Linear``), ``form``
   (``latent``, ``weight`` or null), ``input`` and ``output`` (ONNX tensor names; the
   output is after a folded BatchNorm and after a fused epilogue), ``bn`` (path of the
   BatchNorm folded into the layer, or null), ``residual`` (tensor added in a fused
   epilogue, or null), ``activation`` (a name of ``dcd_deploy._activations.ACTIVATIONS``),
   ``activation_alpha`` (its parameter, LeakyReLU's negative slope) or
   ``activation_slopes`` (PReLU's slope per channel, a list), only for an activation that
   takes one, and ``layout`` (``NCHW``, or ``NHWC`` for the fused op's tensors).
2. The file runs once more per runtime with those tensors as extra outputs.
3. Each layer is re-evaluated in float64: the module at ``path`` of a float64 copy of
   the original model, on the file's own input tensor, then the BatchNorm at ``bn``,
   the residual (the file's tensor) and the activation, as recorded; and the same in
   PyTorch fp32 (``err_torch`` of the layer).
4. A layer passes when ``max |file - ref64| <= max(LAYER_ATOL + LAYER_RTOL * scale,
   k * err_torch)``, ``scale`` the float64 output's largest magnitude.

The bound comes from measurement (``docs/design.md#parity``): over the zoo's DCD,
DY-Conv and CondConv models, in every mode (standard, function, fused), on ONNX Runtime
(both levels) and OpenVINO (with the fused kernels), the largest layer error of a
correct file was 4e-6 of the layer's output scale on natural images and 1.5e-5 on white
noise; :data:`LAYER_RTOL` = 1e-4 leaves a margin of 25x (7x), while the smallest
lowering mistake of the tamper tests (a DCD layer's P off by 1%, a BatchNorm folded
with eps 1e-3 instead of 1e-5) moves its layer by 5e-4 of scale or more. On inputs far
outside the working range (3x white noise, [0, 255] pixels into an ImageNet-normalised
model) a fused layer reached 5.3e-5 while PyTorch's own fp32 evaluation of the same
layer was 1.2e-4 off: the ``k * err_torch`` term (k as end to end) keeps such a layer,
ill-conditioned in fp32 itself, from failing a correct file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .._activations import ACTIVATIONS, ALPHA_ATTRIBUTE, SLOPES_ATTRIBUTE, torch_activation
from ..errors import DCDDeployError

#: metadata_props key of the exporter's layer record.
LAYERS_KEY = "dcd_deploy.layers"
#: Kinds whose per-sample weights make the end-to-end check ill-conditioned.
DYNAMIC_KINDS = ("DCD", "DYConv", "CondConv")
KINDS = DYNAMIC_KINDS + ("Conv", "Linear")
#: A layer's bound: ``LAYER_ATOL + LAYER_RTOL * scale`` (see the module docstring).
LAYER_RTOL = 1e-4
LAYER_ATOL = 1e-7
#: Largest PyTorch fp32 error of a layer (relative to scale, beyond ``LAYER_ATOL``) that
#: is rounding: 80x the largest measured (1.2e-4, far-outside inputs). Beyond it the fp32
#: model and its float64 copy compute different layers (weights the calls themselves make
#: or change), the ``k * err_torch`` term would let any file pass, and the layer fails
#: as unchecked, saying so.
LAYER_FP32_LIMIT = 1e-2
#: Samples the layer-wise run uses (at least one batch of the largest batch size checked):
#: a wrong weight moves its layer on any input, and each sample costs a float64 pass.
LAYER_SAMPLES = 2


@dataclass(frozen=True)
class LayerRecord:
    """One entry of the exporter's ``dcd_deploy.layers`` record (see the module docstring)."""

    path: str
    kind: str
    form: str | None
    input: str
    output: str
    bn: str | None = None
    residual: str | None = None
    activation: str = "none"
    layout: str = "NCHW"
    activation_alpha: float = 0.0
    activation_slopes: list | None = None

    @property
    def dynamic(self) -> bool:
        return self.kind in DYNAMIC_KINDS

    @property
    def label(self) -> str:
        """``DCD, weight form`` / ``Conv``: how a report names the layer."""
        return f"{self.kind}, {self.form} form" if self.form else self.kind


@dataclass
class LayerRow:
    """One layer in one runtime configuration; errors are against float64 on the file's input.

    Attributes:
        backend: ``onnxruntime`` or ``openvino``; optimization: ``disabled``, ``all`` or
            ``openvino``.
        max_abs: max |file - float64| of the layer's output.
        scale: the float64 output's largest magnitude.
        bound: what ``max_abs`` was held to.
        torch_fp32_rel: PyTorch fp32's own error on the same input, relative to scale.
        note: why a layer could not be evaluated (then it fails).
    """

    path: str
    kind: str
    form: str | None
    backend: str
    optimization: str
    max_abs: float
    max_rel: float
    scale: float
    bound: float
    torch_fp32_rel: float
    passed: bool
    note: str = ""

    @classmethod
    def unchecked(cls, record: LayerRecord, note: str, backend: str = "", optimization: str = "") -> LayerRow:
        """A failing row for a layer that could not be evaluated, saying why."""
        inf = float("inf")
        return cls(
            record.path, record.kind, record.form, backend, optimization, inf, inf, 0.0, 0.0, 0.0, False, note=note
        )

    @property
    def bound_rel(self) -> float:
        return self.bound / self.scale if self.scale else self.bound

    @property
    def label(self) -> str:
        return f"{self.kind}, {self.form} form" if self.form else self.kind


def read_layers(onnx_path: Path, proto) -> list[LayerRecord] | None:
    """The file's layer record, or None when it has none (a file from another exporter).

    Args:
        proto: the file's ``ModelProto``.

    Raises:
        DCDDeployError: the record is there but malformed.
    """
    raw = next((p.value for p in proto.metadata_props if p.key == LAYERS_KEY), None)
    if raw is None:
        return None
    try:
        entries = json.loads(raw)
        records = [LayerRecord(**{k: e.get(k) for k in LayerRecord.__dataclass_fields__ if k in e}) for e in entries]
    except (ValueError, TypeError, AttributeError) as exc:
        raise DCDDeployError(f"{onnx_path}: malformed {LAYERS_KEY} metadata ({exc})") from None
    for r, e in zip(records, entries):
        if (
            r.kind not in KINDS
            or r.activation not in ACTIVATIONS
            or not _parameter_ok(r, e)
            or r.layout not in ("NCHW", "NHWC")
            or not isinstance(r.path, str)
            or not isinstance(r.input, str)
            or not isinstance(r.output, str)
        ):
            raise DCDDeployError(f"{onnx_path}: malformed {LAYERS_KEY} entry for {r.path!r}")
    return records


def _parameter_ok(record: LayerRecord, entry: dict) -> bool:
    """The activation's parameter under its key: a finite number (a non-empty list of them,
    per channel) where it takes one; no parameter otherwise."""
    key = ACTIVATIONS[record.activation].attribute
    if {ALPHA_ATTRIBUTE, SLOPES_ATTRIBUTE} & set(entry) != ({key} if key else set()):
        return False
    if key is None:
        return True
    value = entry[key]
    if key == SLOPES_ATTRIBUTE:
        return isinstance(value, list) and bool(value) and all(_finite_number(v) for v in value)
    return _finite_number(value)


def _finite_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _parameter(record: LayerRecord) -> float | tuple[float, ...]:
    if ACTIVATIONS[record.activation].per_channel:
        return tuple(record.activation_slopes)
    return record.activation_alpha


def tensors(records: list[LayerRecord]) -> tuple[str, ...]:
    """Every tensor the check reads, each once, in record order."""
    names = [n for r in records for n in (r.input, r.output, r.residual) if n]
    return tuple(dict.fromkeys(names))


def _nchw(a: np.ndarray, layout: str) -> np.ndarray:
    return a.transpose(0, 3, 1, 2) if layout == "NHWC" and a.ndim == 4 else a


def _apply(record: LayerRecord, model: nn.Module, x: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    """The layer as recorded, in ``model``'s precision: module, folded BN, residual, activation."""
    # a dynamic layer's tensors are its fused node's own, between the user's pre-hooks and
    # hooks; a Conv or Linear record spans the module's call, its hooks included
    # (dcd_deploy._hooks)
    module = model.get_submodule(record.path)
    y = module.forward(x) if record.dynamic else module(x)
    if record.bn:
        y = model.get_submodule(record.bn)(y)
    if residual is not None:
        y = y + residual
    parameter = _parameter(record)
    if isinstance(parameter, tuple) and (y.dim() < 2 or len(parameter) != y.shape[1]):
        raise DCDDeployError(
            f"malformed {LAYERS_KEY} entry for {record.path!r}: {len(parameter)} activation_slopes "
            f"for a layer of {y.shape[1] if y.dim() > 1 else 1} channels"
        )
    return torch_activation(record.activation, parameter)(y)


def compare_layers(
    records: list[LayerRecord],
    values: dict[str, list[np.ndarray]],
    *,
    ref64: nn.Module,
    model: nn.Module,
    backend: str,
    optimization: str,
    k: float,
    fp32_errors: dict[str, float] | None = None,
) -> list[LayerRow]:
    """Judge each layer of one run: ``values`` maps a tensor name to its chunks' arrays.

    Args:
        fp32_errors: PyTorch fp32's error per layer (relative to scale), filled by the
            first run and reused by the next: it describes the layer, not the runtime,
            and measuring it costs a pass of its own.
    """
    rows = []
    for r in records:
        try:
            row = _compare_layer(r, values, ref64=ref64, model=model, k=k, fp32_errors=fp32_errors)
        except (RuntimeError, ValueError, AttributeError, KeyError) as exc:  # shapes or paths that do not fit
            row = LayerRow.unchecked(r, f"cannot evaluate: {(str(exc).splitlines() or [type(exc).__name__])[0][:160]}")
        row.backend, row.optimization = backend, optimization
        rows.append(row)
    return rows


def _evaluate(r: LayerRecord, x: np.ndarray, res: np.ndarray | None, *, ref64: nn.Module, model: nn.Module | None):
    """The layer in float64 and (``model`` given) in PyTorch fp32 on the file's input;
    without ``model`` the fp32 value is the float64 one (its error is known already)."""
    with torch.no_grad():
        y64 = _apply(r, ref64, torch.from_numpy(x).double(), None if res is None else torch.from_numpy(res).double())
        if model is None:
            return y64.numpy(), y64.numpy()
        x32 = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        r32 = None if res is None else torch.from_numpy(np.ascontiguousarray(res, np.float32))
        return y64.numpy(), _apply(r, model, x32, r32).numpy()


def _not_rounding(rel: float) -> str:
    return (
        f"PyTorch's own fp32 and float64 evaluations of the layer differ by {rel:.2g} of scale, "
        "beyond rounding: the model's copies hold different weights (made or changed by its calls?)"
    )


def _compare_layer(
    r: LayerRecord, values, *, ref64: nn.Module, model: nn.Module, k: float, fp32_errors: dict[str, float] | None
) -> LayerRow:
    max_abs = err_torch = scale = 0.0
    known = fp32_errors is not None and r.path in fp32_errors
    for i, x in enumerate(values[r.input]):
        x = _nchw(x, r.layout)
        res = _nchw(values[r.residual][i], r.layout) if r.residual else None
        got = _nchw(values[r.output][i], r.layout)
        y64, y32 = _evaluate(r, x, res, ref64=ref64, model=None if known else model)
        if y64.shape != got.shape:
            raise ValueError(f"the file's output has shape {got.shape}, the layer's {y64.shape}")
        if np.isfinite(y64).all() and np.isfinite(got).all():  # the common case: no masks to build
            max_abs = max(max_abs, float(np.abs(got - y64).max(initial=0.0)))
            if not known:
                err_torch = max(err_torch, float(np.abs(y32 - y64).max(initial=0.0)))
            scale = max(scale, float(np.abs(y64).max(initial=0.0)))
            continue
        ok = np.isfinite(y64)
        if not np.array_equal(ok, np.isfinite(got)):
            return LayerRow.unchecked(r, "non-finite values where float64 has none (or the reverse)")
        if ok.any():
            max_abs = max(max_abs, float(np.abs(got[ok] - y64[ok]).max()))
            err_torch = max(err_torch, float(np.abs(y32[ok].astype(np.float64) - y64[ok]).max()))
            scale = max(scale, float(np.abs(y64[ok]).max()))
    if known:
        err_torch = fp32_errors[r.path] * scale
    elif fp32_errors is not None:
        fp32_errors[r.path] = err_torch / scale if scale else 0.0
    if err_torch > LAYER_ATOL + LAYER_FP32_LIMIT * scale:
        return LayerRow.unchecked(r, _not_rounding(err_torch / scale if scale else math.inf))
    bound = max(LAYER_ATOL + LAYER_RTOL * scale, k * err_torch)
    return LayerRow(
        r.path,
        r.kind,
        r.form,
        "",
        "",
        max_abs,
        max_abs / scale if scale else 0.0,
        scale,
        bound,
        err_torch / scale if scale else 0.0,
        max_abs <= bound,
    )
