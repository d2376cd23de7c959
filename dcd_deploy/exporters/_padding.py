"""A padding mode other than zeros in ONNX: the input padded ahead of a layer's convolutions.

``nn.Conv2d``'s ``"reflect"`` and ``"replicate"`` are one ``Pad`` (``reflect``, ``edge``);
``"circular"`` is Pad's ``wrap``, which is opset 19 (we write 18), so it is written as
Slices of the far rows and columns and a Concat per axis. The dynamic layers call this
with their ``mode_pads`` (:func:`dcd_deploy.layers.padding_mode_pads`); their
convolutions then pad nothing.
"""

from __future__ import annotations

#: A Slice end past any axis's length.
_TO_THE_END = 2**62


def emit_mode_pad(s, x: str, in_shape, pads, mode: str) -> tuple[str, tuple]:
    """``x`` padded by ``pads`` (top, left, bottom, right; None: not padded) in ``mode``,
    and its shape (``in_shape`` grown by the pads; a symbolic side, ``dynamic_size``, stays
    symbolic: the emission reads such sides at run time)."""
    if pads is None:
        return x, in_shape
    top, left, bottom, right = pads
    grown = [n + a + b if isinstance(n, int) else None for n, a, b in zip(in_shape[2:], (top, left), (bottom, right))]
    shape = (*in_shape[:2], *grown)
    if mode != "circular":
        pad_by = s.ints("mode_pads", [0, 0, top, left, 0, 0, bottom, right])
        return s.op("Pad", [x, pad_by], mode={"reflect": "reflect", "replicate": "edge"}[mode]), shape
    for axis, before, after in ((2, top, bottom), (3, left, right)):
        parts = [x]
        if before:  # the last `before` rows (columns) wrap round to the front
            ends = [s.ints("start", [-before]), s.ints("end", [_TO_THE_END]), s.ints("axis", [axis])]
            parts.insert(0, s.op("Slice", [x, *ends]))
        if after:  # and the first `after` to the back
            parts.append(s.op("Slice", [x, s.ints("start", [0]), s.ints("end", [after]), s.ints("axis", [axis])]))
        x = s.op("Concat", parts, axis=axis) if len(parts) > 1 else x  # (B, C, H + pads, W + pads)
    return x, shape
