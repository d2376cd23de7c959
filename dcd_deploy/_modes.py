"""The modes a user's model is exported and checked in: eval mode for the length of a
check, its own modes restored after; and the export's own mode, in which
``torch.onnx.is_in_onnx_export()`` is true."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode inside the block; afterwards every submodule's ``training``
    flag is what it was, so a check or an export run between training steps leaves
    BatchNorm and dropout as the training loop set them (frozen BN layers included)."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training


@contextlib.contextmanager
def onnx_exporting() -> Iterator[None]:
    """``torch.onnx.is_in_onnx_export()`` is true inside the block, as it is within
    ``torch.onnx.export``. A model with a path for export (``if
    torch.onnx.is_in_onnx_export(): return raw_head``, YOLO-style: the decoding stays
    eager) is lowered, traced and checked on that path, the one its file holds; this
    exporter's own trace does not pass through ``torch.onnx.export``, which sets the flag.
    The value before is restored (``torch.onnx.export`` itself clears it on leaving)."""
    try:
        from torch.onnx._internal.exporter import _flags
    except ImportError:  # another torch: the flag is not ours to set
        yield
        return
    before = _flags._is_onnx_exporting
    _flags._is_onnx_exporting = True
    try:
        yield
    finally:
        _flags._is_onnx_exporting = before
