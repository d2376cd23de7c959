"""Convolution geometry shared by the dynamic layers and their deploy forms.

Padding, dilation and stride have ``nn.Conv2d``'s meaning. The deploy form and ONNX need
the padding as four explicit numbers ``(top, left, bottom, right)`` (ONNX's
``[x1_begin, x2_begin, x1_end, x2_end]``); ``padding="same"`` with an even effective
kernel pads one more at the bottom/right, as PyTorch does.

The centre tap (docs/design.md#the-dcd-layer): a k x k convolution reads the input at
``i·s - pad_begin + a·d`` for kernel row ``a``; its centre row ``m = (k - 1) / 2`` (odd k)
reads ``i·s - (pad_begin - m·d)``. So a 1x1 term placed at the centre tap is a 1x1
convolution with the same stride over the input padded by ``pad - m·d`` on each side,
which is negative (a crop) when the layer pads less than ``m·d`` (``"valid"``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

Pads = tuple[int, int, int, int]  # (top, left, bottom, right)

#: ``nn.Conv2d``'s padding modes; a DCD layer pads with the others ahead of its convolutions.
PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def pair(value, name: str) -> tuple[int, int]:
    """An int or a pair of ints as a pair of ints (``nn.Conv2d``'s convention)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int or a pair of ints, not {value!r}")
    if isinstance(value, int):
        return value, value
    try:
        a, b = value
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an int or a pair of ints, not {value!r}") from None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b)):
        raise ValueError(f"{name} must be an int or a pair of ints, not {value!r}")
    return int(a), int(b)


def square(value: tuple[int, int]) -> int | tuple[int, int]:
    """An int when both entries agree (what the zoo's code and the counters expect)."""
    return value[0] if value[0] == value[1] else value


def resolve_padding(padding, kernel: tuple[int, int], dilation: tuple[int, int]):
    """``padding`` as ``nn.Conv2d`` takes it: a pair of ints or ``"same"``/``"valid"``.

    None is the toolkit's default ``d·(k // 2)`` per axis (the paper's ``k // 2`` at
    dilation 1, "same" for odd k).
    """
    if padding is None:
        return tuple(d * (k // 2) for k, d in zip(kernel, dilation))
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"padding must be an int, a pair, 'same' or 'valid', not {padding!r}")
        return padding
    pads = pair(padding, "padding")
    if min(pads) < 0:
        raise ValueError(f"padding must be non-negative, got {padding!r}")
    return pads


def explicit_pads(padding, kernel: tuple[int, int], dilation: tuple[int, int]) -> Pads:
    """(top, left, bottom, right) for a resolved ``padding`` (PyTorch's "same" split)."""
    if padding == "valid":
        return 0, 0, 0, 0
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        before = [t // 2 for t in total]
        return before[0], before[1], total[0] - before[0], total[1] - before[1]
    ph, pw = padding
    return ph, pw, ph, pw


def centre_tap_pads(pads: Pads, kernel: tuple[int, int], dilation: tuple[int, int]) -> Pads:
    """Padding of the 1x1 term at the centre tap of an odd k x k kernel (may be negative)."""
    mh, mw = (dilation[0] * (kernel[0] - 1) // 2, dilation[1] * (kernel[1] - 1) // 2)
    top, left, bottom, right = pads
    return top - mh, left - mw, bottom - mh, right - mw


def is_symmetric(pads: Pads) -> bool:
    return pads[0] == pads[2] and pads[1] == pads[3]


def pad_input(x: torch.Tensor, pads: Pads) -> torch.Tensor:
    """Zero-pad (positive) or crop (negative) the two spatial axes by ``pads``."""
    if not any(pads):
        return x
    top, left, bottom, right = pads
    return F.pad(x, (left, right, top, bottom))


def padding_mode_pads(mode: str, pads: Pads) -> tuple[str, Pads | None]:
    """(``mode``, the pads it applies ahead of the convolution: None for zeros or no padding).

    Raises:
        ValueError: not one of :data:`PADDING_MODES`.
    """
    if mode not in PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {', '.join(map(repr, PADDING_MODES))}, not {mode!r}")
    return mode, (tuple(pads) if mode != "zeros" and any(pads) else None)


def mode_pad(x: torch.Tensor, pads: Pads | None, mode: str) -> torch.Tensor:
    """``x`` padded by ``pads`` in a padding mode other than zeros (``x`` when None)."""
    if pads is None:
        return x
    top, left, bottom, right = pads
    return F.pad(x, (left, right, top, bottom), mode=mode)


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias, stride, pads: Pads, dilation, groups: int) -> torch.Tensor:
    """``F.conv2d`` with explicit (possibly asymmetric or negative) padding."""
    if is_symmetric(pads) and min(pads) >= 0:
        return F.conv2d(x, weight, bias, stride, (pads[0], pads[1]), dilation, groups)
    return F.conv2d(pad_input(x, pads), weight, bias, stride, 0, dilation, groups)


def conv_like(conv: torch.nn.Conv2d, *, bias: bool) -> torch.nn.Conv2d:
    """A new ``nn.Conv2d`` of ``conv``'s geometry (channels, kernel, stride, padding,
    dilation, groups), with or without a bias, its weights uninitialised for the caller."""
    return torch.nn.Conv2d(
        conv.in_channels,
        conv.out_channels,
        conv.kernel_size,
        conv.stride,
        conv.padding,
        conv.dilation,
        conv.groups,
        bias=bias,
    )
