"""``--inputs FILE`` holding one array per ``forward`` argument (an ``.npz``, a ``.pt``
dict, list or tuple): how ``dcd-export`` and ``dcd-validate`` feed a model of several
inputs, or of one input that is no image.

The set replaces every option that describes an image: its arrays give each input's
shape, dtype and values, taken as the model takes them.
"""

from __future__ import annotations

import click

#: The options a set of inputs makes meaningless, by parameter name.
IMAGE_OPTIONS = {
    "input_size": "--input-size",
    "channels": "--channels",
    "preset": "--preprocess",
    "mean": "--mean",
    "std": "--std",
    "scale": "--scale",
    "bgr": "--bgr",
}


def refuse_image_options(path, **given) -> None:
    """A usage error for any image option given beside a set of inputs (``channels`` is
    given when it is not 3, the default)."""
    named = [IMAGE_OPTIONS[k] for k, v in given.items() if v is not None and not (k == "channels" and v == 3)]
    if named:
        raise click.UsageError(
            f"{', '.join(named)} describe{'s' if len(named) == 1 else ''} one image input; {path} gives "
            "every input's shape and values (taken as the model takes them)"
        )


def largest_side(tensors) -> int:
    """The largest spatial side among the 4-D inputs (1 for none): the memory budget's size."""
    return max((max(t.shape[2:]) for t in tensors if t.dim() == 4), default=1)


def shapes_text(tensors, names, batch, *, dynamic_size: bool = False) -> str:
    """``rgb Nx3x64x80, depth Nx1x64x80``: the file's inputs, batch axis (and with
    ``dynamic_size`` the image sides) as exported."""
    names = names or [f"#{i}" for i in range(len(tensors))]
    n = "N" if batch is None else str(batch)

    def dims(t) -> list[str]:
        rest = [str(d) for d in t.shape[1:]]
        return rest[:1] + ["H", "W"] if dynamic_size and t.dim() == 4 else rest

    return ", ".join(f"{name} {'x'.join([n, *dims(t)])}" for name, t in zip(names, tensors))
