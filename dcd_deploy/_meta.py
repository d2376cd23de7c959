"""Shape-only work on meta tensors without PyTorch's slow meta paths.

Building a model on the meta device and running it on meta tensors gives every shape and
computes nothing (``dcd-bench complexity``, ``--list-models``, the frontier's counts).
But torch 2.13 runs several common ops on meta tensors through its Python
decompositions: weight initialisation (``normal_``, ``kaiming_uniform_``), ``batch_norm``
and ``hardtanh`` (ReLU6) took 60% of counting the 41 models of Tables 1-4 (31 s on an
Intel Xeon, 2026-11-28). None of them changes a shape, so on meta tensors the value
they would compute is never needed: :class:`FastMeta` answers them directly, an in-place
op with its own tensor and a shape-keeping function with an empty tensor like its input
(:func:`like`).
An op with a non-meta tensor argument runs as usual.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

#: In-place initialisers, fills and ReLU: on a meta tensor they return it unchanged.
_IN_PLACE = frozenset(
    {
        nn.init.normal_,
        nn.init.uniform_,
        nn.init.trunc_normal_,
        nn.init.kaiming_uniform_,
        nn.init.kaiming_normal_,
        nn.init.xavier_uniform_,
        nn.init.xavier_normal_,
        nn.init.zeros_,
        nn.init.ones_,
        nn.init.constant_,
        torch.Tensor.normal_,
        torch.Tensor.uniform_,
        torch.Tensor.zero_,
        torch.Tensor.fill_,
        torch.relu_,
    }
)

#: Functions whose output has their first argument's shape, strides and dtype (with
#: ``inplace=True``, it is that argument: torch.nn.functional passes every argument but
#: the tensor by keyword to a torch function mode).
_SHAPE_KEEPING = frozenset({F.batch_norm, F.hardtanh, F.relu6, F.relu, torch.relu})


def _all_meta(args, kwargs) -> bool:
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    return bool(tensors) and all(t.is_meta for t in tensors)


class FastMeta(TorchFunctionMode):
    """A torch function mode (``with FastMeta(): ...``) answering the ops above on meta
    tensors without running them; every other call runs unchanged."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func in _IN_PLACE or func in _SHAPE_KEEPING) and _all_meta(args, kwargs):
            # torch.nn.init passes its tensor by keyword
            x = args[0] if args else kwargs.get("tensor", kwargs.get("input"))
            if isinstance(x, torch.Tensor):
                return x if func in _IN_PLACE or kwargs.get("inplace", False) else like(x)
        return func(*args, **kwargs)


def like(t: torch.Tensor) -> torch.Tensor:
    """An empty meta tensor of ``t``'s shape, strides and dtype (``torch.empty_like`` on
    the meta device takes 50 times as long: a Python decomposition)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
