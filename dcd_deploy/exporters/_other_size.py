"""A ``dynamic_size`` export checked at a size it was not traced at.

The parity check runs the file at the traced size, where a size fixed inside the graph
goes unnoticed: torch.export keeps the input's height and width symbolic yet may give an
op a constant size derived from them (a user's CRNN: the LSTM's sequence length, 32 for
the traced 128 columns, became a constant ``Reshape`` to (-1, 32, 37)). At another width
that file fails, or, where the element count happens to divide, returns a wrong shape.
So the export runs its own check once more at a second size (onnxsim's lesson: a
transform checks its own output), on the first of :data:`STEPS` the PyTorch model itself
takes, and refuses a file that does not compute the model there.
"""

from __future__ import annotations

import torch
from torch import nn

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


def check_other_size(model: nn.Module, path, other: tuple[torch.Tensor, ...], *, traced_hw, preprocess) -> None:
    """Check the file at ``path`` against ``model`` at ``other``'s size in ONNX Runtime (one
    batch of 1, two synthetic inputs, layer by layer); raise :class:`ExportError` unless it
    passes."""
    from ..parity import check_parity

    h, w = next(t.shape[2:] for t in other if t.dim() == 4)
    try:
        report = check_parity(model, path, batch_sizes=(1,), n_inputs=2, example_inputs=other, preprocess=preprocess)
        why = None if report else report.summary()
    except DCDDeployError as exc:  # the file does not even run there
        why = str(exc)
    if why is not None:
        suspects = size_fixing_modules(model)
        where = (
            f"; of this model's layers perhaps {', '.join(suspects)}"
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


def _resized(t: torch.Tensor, dh: int, dw: int) -> torch.Tensor:
    if t.dim() != 4:
        return t
    n, c, h, w = t.shape
    return torch.zeros(n, c, h + dh, w + dw, dtype=t.dtype)
