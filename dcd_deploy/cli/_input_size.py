"""``--input-size S`` or ``HxW``: the input's spatial size on the command line; and
``--channels C``, its channel count (3 unless the model takes grey, RGB-D, ... images).

One side for a square input (``224``), or height and width (``256x320``, also ``256X320``
and ``256,320``); each side in the command's range (:data:`dcd_deploy._limits.MAX_INPUT_SIZE`
at most), checked by click before any work, so a bad value is a usage error (status 2).
"""

from __future__ import annotations

import re

import click

_SIZE = re.compile(r"\s*(\d+)\s*(?:[xX,]\s*(\d+)\s*)?")


class InputSize(click.ParamType):
    """``S`` -> ``(S, S)``; ``HxW`` -> ``(H, W)``; each side in ``low..high``."""

    name = "size"

    def __init__(self, low: int, high: int):
        self.low, self.high = low, high

    def get_metavar(self, param, ctx=None) -> str:
        return "S|HxW"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        match = _SIZE.fullmatch(str(value))
        if match is None:
            self.fail(f"{value!r} is not a size: give one side (224) or height x width (256x320)", param, ctx)
        h = int(match.group(1))
        w = int(match.group(2)) if match.group(2) is not None else h
        for side in (h, w):
            if not self.low <= side <= self.high:
                self.fail(f"{value!r}: each side must be in the range {self.low}<=x<={self.high}", param, ctx)
        return h, w


def api_size(size: tuple[int, int]) -> int | tuple[int, int]:
    """What the Python API takes: the side of a square input, else ``(H, W)``."""
    h, w = size
    return h if h == w else (h, w)


def format_size(size: tuple[int, int]) -> str:
    """``224x224``, ``256x320``."""
    return f"{size[0]}x{size[1]}"


#: ``--channels``' default: RGB images.
DEFAULT_CHANNELS = 3


def channels_option(more: str = ""):
    """``--channels C``: the model's input channels (a user's grey or RGB-D network);
    ``more`` completes the help with what the command does differently for C != 3."""
    from .._limits import MAX_CHANNELS

    return click.option(
        "--channels",
        type=click.IntRange(1, MAX_CHANNELS),
        default=DEFAULT_CHANNELS,
        show_default=True,
        help="Input channels of the model (1 for grey, 4 for RGB-D, ...)." + (" " + more if more else ""),
    )
