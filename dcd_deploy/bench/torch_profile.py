"""Where the time goes in eager PyTorch: per-op times of a deploy form, in ONNX Runtime's groups.

:func:`profile_torch` runs a deploy-form model (:func:`~dcd_deploy.exporters.to_deploy`)
under a :class:`~torch.overrides.TorchFunctionMode` that times every top-level torch
call (``F.conv2d``, ``torch.matmul``, ``Tensor.__mul__``, ...) and sorts it into the
groups of :mod:`dcd_deploy.bench.profile`, so the paper's conditions (oneDNN off) and
ONNX Runtime read side by side. Nested calls are not seen (the mode is off inside its
own handler), so every op is counted once.

How an op is grouped:

* outside dynamic layers: convs, FCs and products -> ``static_conv``; activations and
  adds -> ``elementwise``; pooling, reshapes and the rest -> ``layout_other``;
* inside a DCD layer (:class:`~dcd_deploy.exporters.DeployDCD`) or a DY-Conv/CondConv
  layer (``DeployMixture``), by what the op reads: everything inside ``branch()`` /
  ``attention()``, and any op reading only the branch's output or the branch's weights
  (``scale_w``, ``phi_w``) -> ``dynamic_branch``; the conv or FC reading ``w0`` (a
  mixture's stacked ``weight``) -> ``static_conv``; ops reading ``q``, ``p``, ``r`` or
  the latent tensors made from them -> ``latent_path`` (latent form) or ``weight_build``
  (weight form, where they form W(x)); the product of the formed W(x) with the input ->
  ``weight_apply``; an add or product of the layer's activations with a dynamic part
  (Λ scaling, adding the latent output, the bias) -> ``elementwise``.

The result is a :class:`~dcd_deploy.bench.profile.TraceBreakdown` (``nodes`` = op calls
per run, ``unmapped`` always empty); the timer's own cost (a few µs per op) is in the
profiled run (``wall_ms``) but not in the op times.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ._runners import onednn_disabled
from .profile import GROUPS, GroupTime, TraceBreakdown

_PRODUCTS = frozenset({"conv2d", "conv1d", "linear", "matmul", "bmm", "mm", "addmm", "__matmul__"})
_ELEMENTWISE = frozenset(
    {
        "add",
        "__add__",
        "__iadd__",
        "__radd__",
        "mul",
        "__mul__",
        "__rmul__",
        "sub",
        "__sub__",
        "relu",
        "relu_",
        "relu6",
        "hardtanh",
        "hardtanh_",
        "hardsigmoid",
        "hardswish",
        "sigmoid",
        "softmax",
        "clamp",
        "clip",
        "div",
        "__truediv__",
    }
)
_BRANCH_WEIGHTS = frozenset({"scale_w", "phi_w", "phi_b", "fc1", "gate", "fc1_w", "fc1_b", "fc2_w", "fc2_b"})
_LATENT_WEIGHTS = frozenset({"q", "q_b", "p", "r"})
_STATIC_WEIGHTS = frozenset({"w0", "b0", "weight", "kbias"})


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _is_dynamic(module: nn.Module) -> bool:
    return type(module).__name__ in ("DeployDCD", "DeployMixture")


class _OpTimer(TorchFunctionMode):
    """Times and groups every top-level torch call (see the module docstring)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.hints: dict[int, str] = {}  # id(weight) -> its name in its layer
        for module in model.modules():
            if _is_dynamic(module):
                for name, t in list(module.named_buffers(recurse=False)) + list(module.named_parameters(recurse=False)):
                    if t is not None:
                        self.hints[id(t)] = name
        self.stack: list[nn.Module] = []
        self.in_branch = False
        self.tags: dict[int, str] = {}  # id(tensor made inside a dynamic layer) -> its kind
        self.keep: list[torch.Tensor] = []  # keeps tagged tensors alive, so ids are not reused in a run
        self.run: dict[str, float] = defaultdict(float)
        self.ops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.calls: dict[str, int] = defaultdict(int)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        start = time.perf_counter_ns()
        out = func(*args, **kwargs)
        ms = (time.perf_counter_ns() - start) / 1e6
        name = getattr(func, "__name__", str(func))
        group, tag = self._group(name, _tensors(args) + _tensors(kwargs))
        self.run[group] += ms
        self.ops[group][name] += ms
        self.calls[group] += 1
        if tag is not None:
            for t in _tensors(out):
                self.tags[id(t)] = tag
                self.keep.append(t)
        return out

    def _group(self, name: str, inputs: list[torch.Tensor]) -> tuple[str, str | None]:
        """(group, tag of the output) of one call."""
        layer = next((m for m in reversed(self.stack) if _is_dynamic(m)), None)
        if layer is None:
            if name in _PRODUCTS:
                return "static_conv", None
            return ("elementwise" if name in _ELEMENTWISE else "layout_other"), None
        if self.in_branch:
            return "dynamic_branch", "branch"
        hints = {self.hints[id(t)] for t in inputs if id(t) in self.hints}
        tags = {self.tags[id(t)] for t in inputs if id(t) in self.tags}
        plain = any(id(t) not in self.hints and id(t) not in self.tags for t in inputs)
        weight_form = getattr(layer, "strategy", None) == "weight" and getattr(layer, "kind", "") != "linear"
        if hints & _BRANCH_WEIGHTS or (tags == {"branch"} and not plain and not hints - {"bias"}):
            return "dynamic_branch", "branch"
        if hints & _STATIC_WEIGHTS and plain and name in _PRODUCTS:
            return "static_conv", None
        if "apply" in tags or (weight_form and "weight" in tags and plain):
            return "weight_apply", "apply"
        if weight_form and (hints & (_LATENT_WEIGHTS | _STATIC_WEIGHTS | {"bias"}) or "weight" in tags):
            return "weight_build", "weight"
        if hints & _LATENT_WEIGHTS or "latent" in tags:
            return ("elementwise", None) if plain and name in _ELEMENTWISE else ("latent_path", "latent")
        if hints and not plain and not tags:  # a view of a layer weight (the bias): stays a weight
            return "layout_other", None
        return ("elementwise" if plain else "layout_other"), None


def _watch(model: nn.Module, timer: _OpTimer) -> list[Any]:
    """Hooks keeping the module stack, and wrappers flagging the dynamic branch."""
    handles: list[Any] = []

    def push(module, _inputs):
        timer.stack.append(module)

    def pop(module, _inputs, _output):
        timer.stack.pop()

    for module in model.modules():
        handles.append(module.register_forward_pre_hook(push))
        handles.append(module.register_forward_hook(pop))
        for method in ("branch", "attention"):
            if _is_dynamic(module) and hasattr(module, method):
                original = getattr(module, method)

                def flagged(x, _original=original):
                    timer.in_branch = True
                    try:
                        return _original(x)
                    finally:
                        timer.in_branch = False

                setattr(module, method, flagged)
                handles.append((module, method))
    return handles


def _unwatch(handles: list[Any]) -> None:
    for h in handles:
        if isinstance(h, tuple):
            delattr(*h)  # the instance wrapper; the class method shows through again
        else:
            h.remove()


def profile_torch(model: nn.Module, x, *, runs: int, warmup: int, onednn: bool = True) -> TraceBreakdown:
    """Profile eager ``model(x)``: per group (and per op within it), the median over ``runs``
    of its op time per run.

    Args:
        model: a deploy form (:func:`~dcd_deploy.exporters.to_deploy`).
        x: the input, or a tuple of them in ``forward``'s order.
        runs: profiled runs kept; ``warmup`` more run first and are dropped.
        onednn: False: oneDNN off during the runs (the paper's conditions).
    """
    from ._runners import input_tuple

    xs = input_tuple(x)
    timer = _OpTimer(model)
    handles = _watch(model, timer)
    per_run: list[dict[str, float]] = []
    per_run_ops: list[dict[tuple[str, str], float]] = []
    walls: list[float] = []
    try:
        with torch.inference_mode():
            for i in range(warmup + runs):
                timer.run, timer.tags, timer.keep = defaultdict(float), {}, []
                timer.calls, timer.ops = defaultdict(int), defaultdict(lambda: defaultdict(float))
                start = time.perf_counter_ns()
                if onednn:
                    with timer:
                        model(*xs)
                else:
                    with onednn_disabled(), timer:
                        model(*xs)
                if i >= warmup:
                    walls.append((time.perf_counter_ns() - start) / 1e6)
                    per_run.append(dict(timer.run))
                    per_run_ops.append({(g, op): ms for g, ops in timer.ops.items() for op, ms in ops.items()})
    finally:
        _unwatch(handles)
    med = {g: float(np.median([r.get(g, 0.0) for r in per_run])) for g in GROUPS}
    total = sum(med.values())
    op_keys = {k for r in per_run_ops for k in r}
    op_med = {k: float(np.median([r.get(k, 0.0) for r in per_run_ops])) for k in op_keys}
    groups = {
        g: GroupTime(
            ms=med[g],
            pct=100.0 * med[g] / total if total else 0.0,
            nodes=timer.calls.get(g, 0),
            ops=dict(sorted(((op, v) for (gg, op), v in op_med.items() if gg == g), key=lambda kv: -kv[1])),
        )
        for g in GROUPS
    }
    forms: dict[str, int] = defaultdict(int)
    for form in (getattr(model, "strategies", None) or {}).values():
        forms[form] += 1
    return TraceBreakdown(
        runs=runs, wall_ms=float(np.median(walls)), nodes_ms=total, groups=groups, layer_forms=dict(forms)
    )
