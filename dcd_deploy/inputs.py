"""The user's own inputs for a parity check: a ``.npy`` or ``.pt`` file of images.

Synthetic images are a stand-in; the inputs that decide whether a model is in its
working range are the user's own (a few preprocessed images from the validation set).
Polygraphy spells the same idea ``--load-inputs``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from .errors import UnsupportedInputError

#: Legend: at most this many images, and this many float32 values in all (256 MiB, e.g.
#: 445 images of 224x224), so a parity check on them fits beside the model in a few GiB.
MAX_IMAGES = 4096
MAX_VALUES = 1 << 26
SUFFIXES = (".npy", ".pt", ".pth")
NPY_MAGIC = b"\x93NUMPY"


def load_inputs(path: str | os.PathLike, *, input_size: int | None = None) -> torch.Tensor:
    """Read an (N, 3, H, W) float tensor of images from a ``.npy`` or ``.pt`` file.

    ``.npy`` is read without pickle; ``.pt`` with ``torch.load(weights_only=True)`` and
    must hold one tensor. Any floating dtype is accepted and converted to float32.

    Args:
        path: the file.
        input_size: the model's square input side; H and W must equal it when given.

    Returns:
        A float32 CPU tensor of shape (N, 3, S, S).

    Raises:
        UnsupportedInputError: a missing or unreadable file, or a tensor that is not a
            batch of square 3-channel float images of the model's size.
    """
    path = _checked_path(path)
    data = _read(path)
    if not data.is_floating_point():
        raise UnsupportedInputError(f"inputs file {path} holds {data.dtype} values; expected floating-point images")
    shape = tuple(data.shape)
    if data.dim() != 4 or shape[1] != 3:
        raise UnsupportedInputError(f"inputs file {path} holds a tensor of shape {shape}; expected N x 3 x H x W")
    n, _, h, w = shape
    if n < 1 or h < 1 or w < 1:
        raise UnsupportedInputError(f"inputs file {path} holds an empty tensor of shape {shape}")
    if n > MAX_IMAGES:
        raise UnsupportedInputError(f"inputs file {path} holds {n} images; at most {MAX_IMAGES} are checked")
    if h != w:
        raise UnsupportedInputError(f"inputs file {path} holds {h}x{w} images; the export takes square inputs")
    if input_size is not None and h != input_size:
        raise UnsupportedInputError(
            f"inputs file {path} holds {h}x{w} images, but the model takes {input_size}x{input_size}"
        )
    return data.to(torch.float32).contiguous()


def _read(path: Path) -> torch.Tensor:
    if path.suffix.lower() == ".npy":
        with open(path, "rb") as fh:
            if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:
                raise UnsupportedInputError(f"inputs file {path} is not a NumPy .npy file")
        _check_npy_header(path)
        try:  # memory-mapped: the shape is checked before anything is read into memory
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise UnsupportedInputError(
                f"inputs file {path} is not a readable NumPy .npy file: "
                f"{(str(exc).splitlines() or [type(exc).__name__])[0]}"
            ) from None
        _check_size(path, array.shape)
        if array.dtype.kind != "f":
            raise UnsupportedInputError(
                f"inputs file {path} holds {array.dtype} values; expected floating-point images"
            )
        return torch.from_numpy(np.array(array, dtype=np.float32))
    _check_pt_bytes(path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many types for foreign or damaged files
        raise UnsupportedInputError(
            f"cannot read inputs file {path} as a tensor: {(str(exc).splitlines() or [type(exc).__name__])[0]}"
        ) from None
    if not isinstance(data, torch.Tensor):
        raise UnsupportedInputError(f"inputs file {path} holds a {type(data).__name__}, not one tensor")
    _check_dense(path, data)
    _check_size(path, tuple(data.shape))
    return data.detach().cpu()


def _check_size(path: Path, shape: tuple) -> None:
    values = int(np.prod(shape, dtype=np.float64)) if shape else 1
    if values > MAX_VALUES:
        raise UnsupportedInputError(f"inputs file {path} holds {values} values; at most {MAX_VALUES} are checked")


def load_images(
    path: str | os.PathLike, *, input_size: int | tuple[int, int] | None = None, preprocess=None, channels: int = 3
) -> tuple[torch.Tensor, str]:
    """Read a batch of images for a parity check, in whichever form they were saved.

    * floating-point, (N, C, H, W) or (N, H, W, C): taken as the model takes them
      (already preprocessed); NHWC is transposed;
    * uint8, either layout, 3 channels: pixels on [0, 255], put through ``preprocess``
      (the model's preprocessing, :class:`~dcd_deploy.preprocess.Preprocess`; default
      ``imagenet``, which describes RGB images).

    A 4-D array whose axis 1 has C entries is NCHW, else one whose last axis has C is NHWC.

    Args:
        path: a ``.npy`` (read without pickle) or ``.pt`` (``weights_only``) file.
        input_size: the model's input side or (H, W); the images must have it.
        preprocess: a ``Preprocess``, a preset name, or None (``imagenet``).
        channels: the model's input channels C.

    Returns:
        (float32 (N, C, H, W) tensor, a description for reports: file, dtype, layout and
        the preprocessing applied).

    Raises:
        UnsupportedInputError: a missing or unreadable file, not a batch of C-channel
            images of the model's size, or uint8 pixels for a model of other than 3.
    """
    from .preprocess import make_preprocess

    path = _checked_path(path)
    data = _read_uint8_npy(path)
    if data is None:
        data = _read(path)
    shape = tuple(data.shape)
    if data.dtype != torch.uint8 and not data.is_floating_point():
        raise UnsupportedInputError(
            f"inputs file {path} holds {data.dtype} values; expected floating-point "
            "(preprocessed) or uint8 (pixel) images"
        )
    if data.dim() != 4 or channels not in (shape[1], shape[3]):
        raise UnsupportedInputError(
            f"inputs file {path} holds a tensor of shape {shape}; "
            f"expected N x {channels} x H x W or N x H x W x {channels}"
        )
    if data.dtype == torch.uint8 and channels != 3:
        raise UnsupportedInputError(
            f"inputs file {path} holds uint8 pixels; the preprocessing presets describe 3-channel "
            f"images, so for a {channels}-channel model pass the preprocessed float32 inputs"
        )
    layout = "NCHW" if shape[1] == channels else "NHWC"
    if layout == "NHWC":
        data = data.permute(0, 3, 1, 2)
    n, _, h, w = data.shape
    if n < 1 or h < 1 or w < 1:
        raise UnsupportedInputError(f"inputs file {path} holds an empty tensor of shape {shape}")
    if n > MAX_IMAGES:
        raise UnsupportedInputError(f"inputs file {path} holds {n} images; at most {MAX_IMAGES} are checked")
    if input_size is not None:
        want = (input_size, input_size) if isinstance(input_size, int) else tuple(input_size)
        if (h, w) != want:
            raise UnsupportedInputError(
                f"inputs file {path} holds {h}x{w} images, but the model takes {want[0]}x{want[1]}"
            )
    if data.dtype == torch.uint8:
        pre = make_preprocess(preprocess)
        images = pre.apply(data.to(torch.float32) / 255.0).contiguous()
        return images, f"{path} (uint8 {layout} pixels, preprocessed: {pre.describe()})"
    images = data.to(torch.float32).contiguous()
    return images, f"{path} ({str(data.dtype).removeprefix('torch.')} {layout}, taken as preprocessed)"


def _checked_path(path) -> Path:
    """``path`` as a Path: an existing regular file named ``.npy`` or ``.pt``."""
    path = Path(path)
    if not path.is_file():
        raise UnsupportedInputError(
            f"inputs file {path}: no such file" if not path.exists() else f"inputs file {path} is not a regular file"
        )
    if path.suffix.lower() not in SUFFIXES:
        raise UnsupportedInputError(f"inputs file {path}: expected a .npy or .pt file")
    return path


def _read_uint8_npy(path: Path) -> torch.Tensor | None:
    """A ``.npy`` of uint8 pixels, or None for any other file (read by ``_read``)."""
    if path.suffix.lower() != ".npy":
        return None
    with open(path, "rb") as fh:
        if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:
            return None  # _read says what is wrong with it
    _check_npy_header(path)  # a lying header is refused before NumPy maps the file
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError):
        return None  # _read says what is wrong with it
    if array.dtype != np.uint8:
        return None
    _check_size(path, array.shape)
    return torch.from_numpy(np.array(array))


# -- limits: every size in the file is checked before anything is inflated or allocated --


def _check_npy_header(path: Path) -> None:
    """The .npy header's shape, read before NumPy maps the file: non-negative integers,
    at most :data:`MAX_VALUES` values, and no more than the file holds."""
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read:
                raise ValueError(f"unsupported .npy version {version}")
            shape, _, dtype = read[version](fh, max_header_size=10_000)
            offset = fh.tell()
    except (ValueError, OSError, EOFError, OverflowError, SyntaxError, TypeError) as exc:
        raise UnsupportedInputError(
            f"inputs file {path} is not a readable NumPy .npy file: "
            f"{(str(exc).splitlines() or [type(exc).__name__])[0][:200]}"
        ) from None
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise UnsupportedInputError(
            f"inputs file {path}: its header's shape {str(shape)[:100]} has a negative dimension; the file is damaged"
        )
    _check_size(path, shape)
    need = offset + int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    if need > path.stat().st_size:
        raise UnsupportedInputError(
            f"inputs file {path} is truncated: its header's shape {shape} needs {need} bytes, "
            f"the file has {path.stat().st_size}"
        )


def _check_pt_bytes(path: Path) -> None:
    """The checkpoint loader's limits (:mod:`dcd_deploy._safe_pickle`) for a .pt input:
    no zip member inflating far beyond what is stored (a 9 MB file of 2.4e9 deflated
    zeros), no pickle nesting too deep or asking for more than the file holds."""
    import zipfile

    from ._safe_pickle import check_regular_file, check_zip, scan_pickle
    from .errors import CheckpointError

    try:
        size = check_regular_file(path).st_size
        with open(path, "rb") as fh:
            if zipfile.is_zipfile(fh):
                with zipfile.ZipFile(fh) as zf:
                    check_zip(zf, path=path, file_size=size)
                    pkl = next((n for n in zf.namelist() if n.endswith("data.pkl")), None)
                    if pkl is not None:
                        scan_pickle(path, file_size=size, member=zf.read(pkl))
            elif (
                fh.seek(0) == 0 and fh.read(1) == b"\x80"
            ):  # a pickle (torch's legacy format); anything else torch refuses
                scan_pickle(path, file_size=size, count=5)
    except CheckpointError as exc:
        raise UnsupportedInputError(f"inputs file {exc}") from None
    except (OSError, zipfile.BadZipFile, EOFError, NotImplementedError) as exc:
        raise UnsupportedInputError(
            f"cannot read inputs file {path}: {(str(exc).splitlines() or [type(exc).__name__])[0][:200]}"
        ) from None


def _check_dense(path: Path, data: torch.Tensor) -> None:
    """A plain tensor in memory: not sparse (a layout the model never takes), not on the
    meta device (no values)."""
    if data.layout != torch.strided:
        layout = str(data.layout).replace("torch.", "")
        raise UnsupportedInputError(f"inputs file {path} holds a {layout} tensor; expected a dense tensor of images")
    if data.device.type != "cpu":
        raise UnsupportedInputError(
            f"inputs file {path} holds a tensor on device {data.device.type}, without values; expected images"
        )
