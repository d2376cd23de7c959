"""The activations' output shapes during the trace, without their Python decompositions.

Under symbolic shapes (the exported file's dynamic batch) torch's fake tensors work out
the output of ``relu``, ``hardtanh`` (ReLU6), ``hardswish``, ``leaky_relu``, ``gelu``
and their like by running the op's Python decomposition (``torch._refs``) on fake
tensors: 15-60 ms of symbolic-shape arithmetic per call with a new shape, against
about 1 ms for ``silu`` or ``sigmoid``, whose C++ meta kernels serve them. A MobileNetV2
export spent a third of its trace there (docs/performance.md, "The activations' shapes
in the trace").

An elementwise activation's output has its input's shape, dtype, device and strides.
:func:`fast_activations` tells the fake tensors so for the duration of the trace, through
the table torch keeps for exactly this (``fake_impls.FAST_OP_IMPLEMENTATIONS``: shape
functions tried before any decomposition, torch's own holding ``add``, ``mul`` and the
like). Where the answer is not plain (a non-floating input, strides that are not
certainly contiguous or channels-last) the op's decomposition runs as before. The traced
graph is the same op for op; only the time to trace it changes.

The table is private in torch 2.13 (the pinned release): where it is missing the trace
runs as before. Entries are added only for ops torch has none for, and removed when
the trace ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

#: The ATen activations given a shape function: elementwise, the output of the
#: input's dtype for a floating input, each decomposed in Python by torch 2.13's fake
#: tensors under symbolic shapes (measured, 20 layers of new shapes each: relu 24 ms a
#: call, hardtanh and relu6 60, hardswish 55, elu 34, leaky_relu 30, gelu 23).
ACTIVATIONS = (
    "relu.default",
    "relu6.default",
    "hardtanh.default",
    "hardswish.default",
    "hardsigmoid.default",
    "leaky_relu.default",
    "elu.default",
    "celu.default",
    "selu.default",
    "gelu.default",
    "mish.default",
    "softplus.default",
    "threshold.default",
)


def _overloads() -> list[torch._ops.OpOverload]:
    out = []
    for name in ACTIVATIONS:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None:
            out.append(op)
    return out


def _shape_function(decomposition: Callable) -> Callable:
    """The fake output of an elementwise op: an empty meta tensor with the input's
    shape, dtype and strides; the op's ``decomposition`` where that is not certain."""
    from torch._prims_common import is_contiguous_for_memory_format_or_false
    from torch._subclasses.fake_tensor import FakeTensor

    def fake(mode, x, *args, **kwargs):
        if isinstance(x, FakeTensor) and x.is_floating_point():
            formats = (torch.contiguous_format, torch.channels_last) if x.dim() == 4 else (torch.contiguous_format,)
            # is_contiguous_for_memory_format_or_false: False where symbolic sizes leave it open
            if any(is_contiguous_for_memory_format_or_false(x, memory_format=f) for f in formats):
                meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
                return FakeTensor(mode, meta, device=x.device)
        with mode:
            return decomposition(x, *args, **kwargs)

    return fake


@contextlib.contextmanager
def fast_activations() -> Iterator[None]:
    """Shape functions for :data:`ACTIVATIONS` in torch's fake-tensor fast path, for
    the duration of the block (torch's own entries are never replaced)."""
    try:
        from torch._decomp import decomposition_table, meta_table
        from torch._subclasses.fake_impls import get_fast_op_impls

        table = get_fast_op_impls()
        # where torch would run the decomposition: no entry of its own, no Python meta first
        functions = {
            op: _shape_function(decomposition_table[op])
            for op in _overloads()
            if op not in table and op in decomposition_table and op not in meta_table
        }
    except (ImportError, AttributeError):  # another torch release: trace as before
        yield
        return
    table.update(functions)
    try:
        yield
    finally:
        for op, fake in functions.items():
            if table.get(op) is fake:
                del table[op]
