"""torch.onnx's translator registry, holding only the ops a traced graph uses.

``ONNXRegistry.from_torchlib()`` (what ``torch.onnx.export`` builds) makes an entry for
each of the ~550 torchlib functions, and onnxscript re-parses the source of each traced
function to read its domain on the way (``TracedOnnxFunction.function_ir``): 0.4-0.5 s
of CPU per process, for a registry of which MobileNetV2 uses a dozen ops. Here the
entries come from the same two sources (torch's own torchlib, then onnxscript's
torchlib), keyed, ordered and filtered by opset the same way, but an op's entries are
made only when a graph calls it (:func:`registry_for` of :func:`called_ops`). Before the trace, only which
ops have a translation is needed (:func:`translated_ops`: the trace keeps those whole).

``ONNXRegistry``, ``OnnxDecompMeta`` and ``_get_overload`` are private in torch 2.13
(the pinned release), as is the fast path that uses this module (:mod:`._trace`): any
drift makes that path fall back to the public ``torch.onnx.export``, and
``tests/exporters/test_translator_registry.py`` compares these entries with ``from_torchlib``'s.
"""

from __future__ import annotations

import functools
import logging

import torch


def op_key(target):
    """The registry's key of an op: its qualified name for an ATen-style overload (what
    ``ONNXRegistry`` uses: overload objects compare unreliably), else the callable."""
    return target.name() if isinstance(target, torch._ops.OpOverload) else target


def _registered_ops() -> int:
    """How many ops the dispatcher knows (5-10 ms): ops registered since a registry was made
    (``torch.compile`` imports ``quantized_decomposed``'s) make it again, as
    ``from_torchlib`` would."""
    return len(torch._C._dispatch_get_all_op_names())


def _sources() -> dict:
    """key -> [(target, torch's ready entry or None, onnxscript function, is_complex)] in
    ``from_torchlib``'s registration order, with the opset each entry needs."""
    return _sources_among(_registered_ops())


@functools.lru_cache(maxsize=1)
def _sources_among(registered: int) -> dict:
    """:func:`_sources` while the dispatcher knows ``registered`` ops."""
    from onnxscript.function_libs.torch_lib import ops, registration  # importing ops registers them
    from torch.onnx._internal.exporter import _registration
    from torch.onnx._internal.exporter._torchlib import _torchlib_registry

    del ops
    sources: dict = {}
    for meta in _torchlib_registry.get_torchlib_ops():
        sources.setdefault(op_key(meta.fx_target), []).append((meta.fx_target, meta, None, meta.is_complex))
    log = logging.getLogger(_registration.__name__)
    level = log.level
    log.setLevel(logging.ERROR)  # torchvision's ops are named but torchvision is not a dependency
    try:
        for name, overloaded in registration.default_registry.items():
            if name.startswith("internal::"):
                continue
            target = _registration._get_overload(name)
            if target is None:
                continue
            for function in overloaded.overloads:
                sources.setdefault(op_key(target), []).append((target, None, function, False))
            for function in overloaded.complex:
                sources.setdefault(op_key(target), []).append((target, None, function, True))
    finally:
        log.setLevel(level)
    return sources


def _opset() -> int:
    from torch.onnx._internal.exporter import _constants

    return _constants.TORCHLIB_OPSET


def _default_opset_introduced() -> int:
    from torch.onnx._internal.exporter import _registration

    return _registration.OnnxDecompMeta.__dataclass_fields__["opset_introduced"].default


def translated_ops() -> set:
    """Every op the full registry translates (what ``get_onnx_implemented_overloads`` of
    ``from_torchlib``'s registry returns)."""
    opset, default = _opset(), _default_opset_introduced()
    return {
        entries[0][0]
        for entries in _sources().values()
        if any((meta.opset_introduced if meta is not None else default) <= opset for _, meta, _, _ in entries)
    }


@functools.cache
def _entries(key, registered: int) -> tuple:
    """The ``OnnxDecompMeta`` entries of one op, made once per process (and number of
    ``registered`` ops, :func:`_registered_ops`)."""
    from torch.onnx._internal.exporter import _registration

    out = []
    for target, meta, function, is_complex in _sources_among(registered).get(key, ()):
        if meta is None:
            try:  # as from_torchlib: a function whose signature cannot be read is skipped
                meta = _registration.OnnxDecompMeta(
                    onnx_function=function, fx_target=target, signature=None, is_custom=False, is_complex=is_complex
                )
            except Exception:
                continue
        out.append(meta)
    return tuple(out)


def called_ops(graph_module: torch.fx.GraphModule) -> set:
    """The targets of every ``call_function`` node, nested graphs (``cond`` branches) included."""
    return {
        node.target
        for gm in graph_module.modules()
        if isinstance(gm, torch.fx.GraphModule)
        for node in gm.graph.nodes
        if node.op == "call_function"
    }


def registry_for(ops, custom: dict):
    """An ``ONNXRegistry`` with the entries of ``ops`` (e.g. :func:`called_ops`) as
    ``from_torchlib()`` has them, plus ``custom`` ({op: translation}) as ``register_op``
    adds them."""
    from torch.onnx._internal.exporter import _registration

    registry, registered = _registration.ONNXRegistry(), _registered_ops()
    for key in dict.fromkeys(op_key(t) for t in ops):
        for meta in _entries(key, registered):
            registry._register(meta.fx_target, meta)
    for op, translation in custom.items():
        registry.register_op(op, translation)
    registry._cleanup_registry_based_on_opset_version()
    return registry
