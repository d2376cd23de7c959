"""A ``dynamic_size`` export checked at a size it was not traced at.

The parity check runs the file at the traced size, where a size fixed inside the graph
goes unnoticed: torch.export keeps the input's height and width symbolic yet may give an
op a constant size derived from them (a user's CRNN: the LSTM's sequence length, 32 for
the traced 128 columns, became a constant ``Reshape`` to (-1, 32, 37)). At another width
that file fails, or, where the element count happens to divide, returns a wrong shape.
So the export runs its own check once more at a second size (onnxsim's lesson: a
transform checks its own output), on the first of :data:`STEPS` the PyTorch model itself
takes, and refuses a file that does not compute the model there, naming the model's
layers and functional calls that may have fixed the size.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from ..errors import DCDDeployError, ExportError

#: (rows, columns) added to the traced size, in the order tried: multiples of 32 keep a
#: network's stride divisibility; height and width move apart to catch a swapped axis.
STEPS = ((32, 64), (0, 64), (32, 0))


def other_size_example(model: nn.Module, example: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...] | None:
    """``example`` with every (N, C, H, W) input at the first size of :data:`STEPS` the model
    runs at (its forward raises nothing); None when it runs at none of them."""
    for dh, dw in STEPS:
        moved = tuple(_resized(t, dh, dw) for t in example)
        try:
            with torch.no_grad():
                model(*moved)
        except Exception:  # noqa: BLE001 - the model's own refusal of this size, whatever it raises
            continue
        return moved
    return None


def check_other_size(
    model: nn.Module, path, other: tuple[torch.Tensor, ...], *, traced: tuple[torch.Tensor, ...], preprocess
) -> None:
    """Check the file at ``path`` against ``model`` at ``other``'s size in ONNX Runtime (one
    batch of 1, two synthetic inputs, layer by layer); raise :class:`ExportError` unless it
    passes, naming the layers and calls of ``model`` (run on ``traced``, the example it was
    traced with) that may have fixed a size."""
    from ..parity import check_parity

    traced_hw = next(tuple(t.shape[2:]) for t in traced if t.dim() == 4)
    h, w = next(t.shape[2:] for t in other if t.dim() == 4)
    try:
        report = check_parity(model, path, batch_sizes=(1,), n_inputs=2, example_inputs=other, preprocess=preprocess)
        why = None if report else report.summary()
    except DCDDeployError as exc:  # the file does not even run there
        why = str(exc)
    if why is not None:
        suspects = size_fixing_modules(model) + size_fixing_calls(model, traced)
        where = (
            f"; of this model's layers and calls perhaps {', '.join(suspects)}"
            if suspects
            else ", e.g. an LSTM's sequence length, an adaptive pool's windows, a torch.linspace over a side"
        )
        raise ExportError(
            f"the file's height and width are symbolic, but it does not compute the model at {h}x{w} "
            f"(traced at {traced_hw[0]}x{traced_hw[1]}): {why}; a size is fixed inside the traced "
            f"graph (torch.export gave an op a constant size{where}): export without --dynamic-size "
            "(dynamic_size=False)"
        )


def size_fixing_modules(model: nn.Module) -> list[str]:
    """The layers of ``model`` whose traced form holds a size taken from the traced input:
    recurrent layers (their sequence length) and adaptive pools to other than 1x1 (their
    windows), as ``path (Kind)``; what a functional call fixes is not seen here."""
    found = []
    for path, m in model.named_modules():
        if isinstance(m, nn.RNNBase):
            found.append(f"{path} ({type(m).__name__})")
        elif isinstance(m, (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d, nn.AdaptiveAvgPool1d, nn.AdaptiveMaxPool1d)):
            size = m.output_size if isinstance(m.output_size, tuple) else (m.output_size,)
            if any(s not in (1, None) for s in size):
                found.append(f"{path} ({type(m).__name__} to {m.output_size})")
    return found


#: Functional calls whose traced form holds a size taken from the traced input, with the
#: argument that says so (name, position): an adaptive pool's output size (its windows),
#: the number of points of a linspace or logspace (torch.export specializes it).
_SIZE_FIXING_CALLS = {
    **{
        f: ("output_size", 1)
        for f in (
            F.adaptive_avg_pool1d,
            F.adaptive_avg_pool2d,
            F.adaptive_avg_pool3d,
            F.adaptive_max_pool1d,
            F.adaptive_max_pool2d,
            F.adaptive_max_pool3d,
            # what F.adaptive_max_poolNd dispatches to, by return_indices
            F.adaptive_max_pool1d_with_indices,
            F.adaptive_max_pool2d_with_indices,
            F.adaptive_max_pool3d_with_indices,
            F._adaptive_max_pool1d,
            F._adaptive_max_pool2d,
            F._adaptive_max_pool3d,
        )
    },
    torch.linspace: ("steps", 2),
    torch.logspace: ("steps", 2),
}


def size_fixing_calls(model: nn.Module, example: tuple[torch.Tensor, ...]) -> list[str]:
    """The functional calls of :data:`_SIZE_FIXING_CALLS` that fix a size, as ``F.name(size)
    at file.py:line in function`` (the caller in the model's own code), from one run of
    ``model`` on ``example``; none if that run fails."""
    log = _CallLog()
    try:
        with torch.no_grad(), log:
            model(*(t.clone() for t in example))
    except Exception:  # noqa: BLE001 - the model's own failure: nothing to name
        return []
    return list(dict.fromkeys(log.found))


class _CallLog(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SIZE_FIXING_CALLS:
            name, pos = _SIZE_FIXING_CALLS[func]
            size = kwargs[name] if name in kwargs else args[pos] if len(args) > pos else None
            caller = _caller() if _fixes_a_size(size) else None
            if caller is not None:
                where = "torch" if func in (torch.linspace, torch.logspace) else "F"
                call = func.__name__.removesuffix("_with_indices").lstrip("_")
                self.found.append(f"{where}.{call}({size!r}) at {caller}")
        return func(*args, **kwargs)


def _fixes_a_size(size) -> bool:
    """An adaptive pool's output size (int or tuple) with an entry other than 1 and None, or
    linspace's point count above 1."""
    sizes = size if isinstance(size, (tuple, list)) else (size,)
    return any(isinstance(s, int) and s > 1 for s in sizes)


def _caller() -> str | None:
    """``file.py:line in function`` of the code that made the call being logged; None when
    that is torch's own (an ``nn.AdaptiveAvgPool2d``'s forward: named as a layer)."""
    torch_dir = str(Path(torch.__file__).parent)
    dispatch = tuple(str(Path(torch_dir, f)) for f in ("overrides.py", "_jit_internal.py", "nn/functional.py"))
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(dispatch):
        frame = frame.f_back
    if frame is None or frame.f_code.co_filename.startswith(torch_dir):
        return None
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} in {frame.f_code.co_name}"


def _resized(t: torch.Tensor, dh: int, dw: int) -> torch.Tensor:
    if t.dim() != 4:
        return t
    n, c, h, w = t.shape
    return torch.zeros(n, c, h + dh, w + dw, dtype=t.dtype)
