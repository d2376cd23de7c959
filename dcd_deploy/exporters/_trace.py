"""The trace: ``torch.export`` and ``torch.onnx``'s translation, dynamic layers as placeholders.

Every layer with an ``emit`` method (the deploy layers) is swapped for a
:class:`~._placeholder.Placeholder` for the duration of the trace, the module is
traced by ``torch.export`` (non-strict: any Python the model runs eagerly, control
flow on shapes included) with a symbolic batch axis (and height and width when asked),
and the exported program is translated to ONNX by ``torch.onnx``'s translator
(onnxscript's torchlib) and optimised by onnxscript's optimizer.

Speed: ``torch.onnx.export(..., dynamo=True)`` traces the training IR and then decomposes
it, which re-traces the whole graph (MobileNetV2 x1.0: 1.5 s + 2.5 s on the benchmark
VM). Tracing straight to the ATen IR the translator reads (``pre_dispatch=False``) takes
one pass (1.5 s). That entry point and the translator's are private in torch 2.13 (the
pinned release); when they are missing or refuse a graph, the public
``torch.onnx.export`` is used instead, which gives the same graph more slowly. The fast
path's translator registry holds only the ops the graph calls (:mod:`._registry`).

"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import onnx
import torch
from torch import nn

from .._forward import forward_parameters
from .._hooks import carry_hooks
from .._modes import onnx_exporting
from .._outputs import dataclasses_as_nodes
from ..errors import ExportError
from ._fake_activations import fast_activations
from ._placeholder import Placeholder, geometry, onnx_translation
from ._registry import called_ops, op_key, registry_for, translated_ops

#: The default-domain opset torch.onnx's translator writes.
NATIVE_OPSET = 18


@dataclass
class Traced:
    proto: onnx.ModelProto
    #: module path -> the deploy layer a placeholder stands for
    emitters: dict[str, nn.Module]
    fast_path: bool


def emitters_of(model: nn.Module) -> dict[str, nn.Module]:
    """Outermost modules with an ``emit`` method, by path."""
    out: dict[str, nn.Module] = {}
    for path, m in model.named_modules():
        if any(path.startswith(p + ".") for p in out):
            continue
        if path and callable(getattr(m, "emit", None)):
            out[path] = m
    return out


@contextlib.contextmanager
def _placeholders(model: nn.Module, emitters: dict[str, nn.Module]):
    """Swap each emitter for its placeholder; restore the modules afterwards."""
    swapped = []
    try:
        for path, m in emitters.items():
            parent, _, name = path.rpartition(".")
            owner = model.get_submodule(parent) if parent else model
            setattr(owner, name, carry_hooks(m, Placeholder(path, geometry(m))))
            swapped.append((owner, name, m))
        yield
    finally:
        for owner, name, m in reversed(swapped):
            setattr(owner, name, m)


def _dynamic_shapes(example: tuple[torch.Tensor, ...], *, batch: int | None, dynamic_size: bool):
    from torch.export import Dim

    batch_dim = Dim("batch", min=1) if batch is None else None
    specs = []
    for t in example:
        spec = {}
        if batch_dim is not None and t.dim() >= 1:
            spec[0] = batch_dim
        if dynamic_size and t.dim() == 4:
            # DYNAMIC, not a named Dim: a network's strides bound the sizes it takes from
            # below (H / 32 >= 1 ...), which torch.export may then infer instead of refusing
            spec[2], spec[3] = Dim.DYNAMIC, Dim.DYNAMIC
        specs.append(spec or None)
    return tuple(specs)


def _as_signature(model: nn.Module, specs: tuple):
    """``specs`` (one per positional input) grouped as ``forward`` takes them: torch.export
    binds the inputs to its parameters, so those ``*views`` takes are one tuple of specs."""
    params = forward_parameters(model)
    star = next((i for i, p in enumerate(params) if p.kind == p.VAR_POSITIONAL), None)
    if star is None or star > len(specs):
        return specs
    return (*specs[:star], tuple(specs[star:]))


def trace_example(example: tuple[torch.Tensor, ...], batch: int | None) -> tuple[torch.Tensor, ...]:
    """The example at the batch traced: fixed ``batch``, else 2 (a batch of 1 would be
    specialised to a constant by the tracer)."""
    n = batch or 2
    out = []
    for t in example:
        if t.dim() == 0:
            out.append(t)
        elif t.shape[0] == n:
            out.append(t)
        else:
            reps = -(-n // t.shape[0])
            out.append(t.repeat(reps, *([1] * (t.dim() - 1)))[:n])
    return tuple(out)


def untraceable(model: nn.Module, exc: BaseException, what: str = "torch.export cannot trace it") -> ExportError:
    """One line naming what ``torch.export`` could not trace, and where in the model's code."""
    import os
    import traceback

    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    first = next(
        (
            ln
            for ln in lines
            if not ln.startswith(
                ("Traceback", "File ", "The above", "For more information", "Set TORCH_LOGS", "from user code")
            )
        ),
        type(exc).__name__,
    )
    first = first.split("  (Size-like symbols")[0]
    if len(first) > 300:
        first = first[:297] + "..."
    torch_dir = os.path.dirname(torch.__file__)
    ours = os.path.dirname(__file__)
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith((torch_dir, ours)) and "site-packages" not in f.filename
    ]
    where = ""
    if frames:
        f = frames[-1]
        where = (
            f" (at {os.path.basename(f.filename)}:{f.lineno} in {f.name}"
            + (f": {f.line.strip()}" if f.line else "")
            + ")"
        )
    return ExportError(f"cannot export {type(model).__name__}: {what}: {first}{where}")


def trace(
    model: nn.Module,
    example: tuple[torch.Tensor, ...],
    *,
    batch: int | None,
    dynamic_size: bool,
    input_names: list[str] | None,
    output_names: list[str] | None,
    output_types: tuple[type, ...] = (),
    worker=None,
    meanwhile=None,
) -> Traced:
    """Trace ``model`` (a deploy form) and translate it to ONNX with placeholders.

    ``output_types``: dataclass types among its outputs, flattened by their fields
    (:mod:`dcd_deploy._outputs`) in whichever process traces.

    ``worker``: a :class:`~._trace_worker.TraceWorker` to trace in (this process traces
    when it cannot), running ``meanwhile`` here in the meantime.

    Raises:
        ExportError: the model cannot be traced (the message is torch.export's first line).
    """
    emitters = emitters_of(model)
    if worker is not None:
        done = worker.trace(
            model,
            example,
            meanwhile=meanwhile,
            batch=batch,
            dynamic_size=dynamic_size,
            input_names=input_names,
            output_names=output_names,
            output_types=output_types,
        )
        if done is not None:
            return Traced(done[0], emitters, done[1])
    args = trace_example(example, batch)
    shapes = _as_signature(model, _dynamic_shapes(args, batch=batch, dynamic_size=dynamic_size))
    op, translate = onnx_translation()
    with (
        onnx_exporting(),  # also in the trace worker: the model's path for export
        _placeholders(model, emitters),
        dataclasses_as_nodes(output_types),
        _no_stack_traces(),
        _InPlaceAsCopy(),
        fast_activations(),
    ):
        try:
            proto, fast = _fast(model, args, shapes, op, translate), True
        except _Fallback:
            proto, fast = _public(model, args, shapes, op, translate), False
    _rename_values(proto, input_names, output_names)
    return Traced(proto, emitters, fast)


@contextlib.contextmanager
def _no_stack_traces():
    """Skip recording a Python stack per traced node (a third of the trace's time)."""
    config = torch.fx.config
    before = getattr(config, "do_not_emit_stack_traces", None)
    if before is not None:
        config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        if before is not None:
            config.do_not_emit_stack_traces = before


class _InPlaceAsCopy(torch.overrides.TorchFunctionMode):
    """An activation called with ``inplace=True`` traced as the out-of-place call and a ``copy_``.

    The same values land in the same tensor and the exported graph is the same, but
    torch.export traces the in-place form through the activation's Python decomposition
    and its symbolic-shape checks, about 0.15 s a layer with a dynamic batch: a
    torchvision-style MobileNetV2 (35 ``ReLU6(inplace=True)``) traced in 13.0 s, 5.5 s
    this way (docs/performance.md, "In-place activations in the trace").
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # torch.nn.functional hands a mode every argument but the input by keyword
        # (as dcd_deploy._meta relies on too), whatever the caller wrote
        if func in _INPLACE_ACTIVATIONS and kwargs.get("inplace") and isinstance(args[0], torch.Tensor):
            return args[0].copy_(func(*args, **{**kwargs, "inplace": False}))
        return func(*args, **kwargs)


_F = torch.nn.functional
#: The functional activations with an ``inplace`` argument.
_INPLACE_ACTIVATIONS = frozenset(
    (_F.threshold, _F.relu, _F.hardtanh, _F.relu6, _F.elu, _F.selu, _F.celu, _F.leaky_relu, _F.rrelu)
    + (_F.hardsigmoid, _F.hardswish, _F.silu, _F.mish)
)


class _Fallback(Exception):
    """The private fast path is unavailable or refused the graph."""


def _export_error(model, exc):
    from torch._dynamo.exc import UserError

    if isinstance(exc, ExportError):
        return exc
    if isinstance(exc, UserError) and "specialized" in str(exc):
        return ExportError(
            f"cannot export {type(model).__name__} with the requested dynamic axes: "
            + next(
                (ln.strip() for ln in str(exc).splitlines() if ln.strip().startswith("-")), str(exc).splitlines()[0]
            ).lstrip("- ")
        )
    return untraceable(model, exc)


def _fast(model, args, shapes, op, translate) -> onnx.ModelProto:
    try:
        from torch.export._trace import _export
        from torch.onnx._internal.exporter import _core, _fx_passes
    except ImportError as exc:  # another torch release: the public path
        raise _Fallback from exc
    try:
        from torch.export.exported_program import _override_composite_implicit_decomp

        keep = _kept_whole(op)
    except (ImportError, AttributeError, TypeError) as exc:
        raise _Fallback from exc
    try:
        # ops the translator writes as one ONNX op (interpolate: Resize) stay whole
        with _override_composite_implicit_decomp(keep):
            ep = _export(model, args, dynamic_shapes=shapes, strict=False, pre_dispatch=False)
    except TypeError as exc:  # signature drift
        raise _Fallback from exc
    except Exception as exc:
        raise _export_error(model, exc) from exc
    try:
        with torch.fx.experimental._config.patch(backed_size_oblivious=True):
            ep = _decompose_untranslated(ep, op)
            gm = ep.graph_module
            _fx_passes.insert_type_promotion_nodes(gm)
            ep._graph_module = _fx_passes.remove_assertion_nodes(gm)
        registry = registry_for(called_ops(ep.graph_module), {op: translate})
        with _quiet_notices():
            program = _core._exported_program_to_onnx_program(ep, registry=registry)
        program.optimize()
        return program.model_proto
    except Exception as exc:  # anything else this path cannot translate: the public path (and its errors)
        raise _Fallback from exc


def _decompose_untranslated(ep, op):
    """``ep`` with the ops the translator has no function for decomposed (the ATen trace
    keeps a core op such as ``adaptive_max_pool2d`` whole), by the decomposition table
    ``torch.onnx.export`` uses (``decompose_with_registry``: entries for exactly the ops
    without a translation); ``ep`` itself when every op has one, the common case.

    Without this such a graph failed translation and took the public path, which traces
    the model again and builds the whole registry: the same graph, 0.5-3 s later.

    A ``split`` of a symbolic size (``torch.chunk`` over an axis the export keeps dynamic)
    is decomposed too, into ``split_with_sizes`` of computed sizes (an ONNX Split with a
    sizes input): translated whole it is a SplitToSequence on which onnxscript's optimizer
    (0.7) fails ("'NoneType' object has no attribute 'ndim'").
    """
    import warnings

    translated = _translated_keys(op)
    ops = called_ops(ep.graph_module)
    table = {}
    if any(
        n.target is torch.ops.aten.split.Tensor and not isinstance(n.args[1], int) for n in ep.graph_module.graph.nodes
    ):
        from torch._decomp import get_decompositions

        table.update(get_decompositions([torch.ops.aten.split.Tensor]))
    if not table and all(op_key(t) in translated for t in ops if isinstance(t, torch._ops.OpOverload)):
        return ep
    with warnings.catch_warnings():  # torch's own deprecation notices, as the public path hides them
        warnings.simplefilter("ignore", FutureWarning)
        return ep.run_decompositions({**_decomposition_table(op), **table})


@functools.lru_cache(maxsize=1)
def _translated_keys(op) -> frozenset:
    """The keys (:func:`op_key`) of every op the registry translates, ``op`` included."""
    return frozenset(op_key(t) for t in translated_ops()) | {op_key(op)}


@functools.lru_cache(maxsize=1)
def _decomposition_table(op) -> dict:
    """``torch.onnx.export``'s decomposition table for the registry's ops and ``op``:
    entries for exactly the ops without a translation. Built once per process; callers
    take a copy, since torch's helpers edit the table they are given."""
    from torch.onnx._internal.exporter import _decomp

    return _decomp.create_onnx_friendly_decomposition_table(translated_ops() | {op})


@functools.lru_cache(maxsize=1)
def _kept_whole(op):
    """What the trace does with composite ops: keep those the translator writes whole,
    decompose the others (what ``torch.onnx.export``'s own decomposition pass decides),
    from the names of the ops the registry translates (:mod:`._registry`)."""
    from torch.export.exported_program import _split_decomp_table_to_cia_and_python_decomp

    cia, _ = _split_decomp_table_to_cia_and_python_decomp(dict(_decomposition_table(op)))
    return cia


#: torch.onnx's log lines the export expects: a ``None`` output (``return y, None``) is
#: left out of the graph, as the exporter names the outputs and the parity check matches them.
_EXPECTED_NOTICES = ("has None output", "Skipping constant argument ConstantArgument(name='', value=None)")


def _not_expected(record) -> bool:
    return not any(text in record.getMessage() for text in _EXPECTED_NOTICES)


@contextlib.contextmanager
def _quiet_notices():
    """Leave out the exporter's notices about ``None`` outputs (:data:`_EXPECTED_NOTICES`)."""
    import logging

    core = logging.getLogger("torch.onnx._internal.exporter._core")
    core.addFilter(_not_expected)
    try:
        yield
    finally:
        core.removeFilter(_not_expected)


@contextlib.contextmanager
def _quiet_registration():
    """Silence the registry's warnings about torchvision ops (torchvision is not a
    dependency) and the exporter's expected notices (:func:`_quiet_notices`)."""
    import logging

    log = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with _quiet_notices():
            yield
    finally:
        log.setLevel(level)


def _public(model, args, shapes, op, translate) -> onnx.ModelProto:
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with _quiet_registration():
                program = torch.onnx.export(
                    model,
                    args,
                    dynamo=True,
                    custom_translation_table={op: translate},
                    dynamic_shapes=shapes,
                    opset_version=NATIVE_OPSET,
                    optimize=True,
                    verbose=False,
                    report=False,
                )
    except Exception as exc:
        cause, passes = exc, False
        while cause.__cause__ is not None and not isinstance(cause, torch._dynamo.exc.UserError):
            passes = passes or type(cause).__name__ == "PassError"  # onnx_ir's, around the optimizer's passes
            cause = cause.__cause__
        if passes:
            raise untraceable(model, cause, "torch.onnx's optimizer (onnxscript) fails on its graph") from exc
        if "ConversionError" in type(exc).__name__ and "torch.export" not in str(exc).split("\n")[0]:
            raise untraceable(model, cause, "torch.onnx cannot translate it") from exc
        raise _export_error(model, cause) from exc
    return program.model_proto


def _rename_values(proto: onnx.ModelProto, input_names, output_names) -> None:
    """Graph inputs and outputs by the names asked for; symbolic dims ``batch``, ``height``, ``width``."""
    rename = {}
    for vi, new in zip(proto.graph.input, input_names or []):
        rename[vi.name] = new
    for vi, new in zip(proto.graph.output, output_names or []):
        rename[vi.name] = new
    rename = {k: v for k, v in rename.items() if k != v}
    if rename:
        for n in proto.graph.node:
            for i, t in enumerate(n.input):
                if t in rename:
                    n.input[i] = rename[t]
            for i, t in enumerate(n.output):
                if t in rename:
                    n.output[i] = rename[t]
        for vi in list(proto.graph.input) + list(proto.graph.output) + list(proto.graph.value_info):
            if vi.name in rename:
                vi.name = rename[vi.name]
    dims = {}
    for k, vi in enumerate(proto.graph.input):
        shape = vi.type.tensor_type.shape.dim
        suffix = "" if k == 0 else f"_{k}"
        for axis, label in ((0, "batch"), (2, "height" + suffix), (3, "width" + suffix)):
            if axis < len(shape) and shape[axis].dim_param and shape[axis].dim_param not in dims:
                dims[shape[axis].dim_param] = "batch" if axis == 0 else label
    if dims:
        for vi in list(proto.graph.input) + list(proto.graph.output) + list(proto.graph.value_info):
            for d in vi.type.tensor_type.shape.dim:
                if d.dim_param in dims:
                    d.dim_param = dims[d.dim_param]
