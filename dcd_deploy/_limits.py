"""Ranges of every size-like input, and the peak memory an export or check may need.

Each limit is checked before anything is allocated, so a mistyped option
(``--input-size 10000``, ``--batch 100000``) or a hostile file (an ONNX model whose
metadata claims a 20000-pixel input, a config with 1e12 classes) ends in one line
instead of a many-gigabyte allocation. The CLI shows the ranges in ``--help``.

Memory model (measured on mobilenetv2_100_dcd, the largest zoo model at a given size):
the process itself (Python, torch, ONNX Runtime, the model) takes about
:data:`BASE_BYTES`; every image of a batch adds :data:`BYTES_PER_PIXEL` per input pixel
(activations in PyTorch plus ONNX Runtime's two sessions, rounded up from ~650); every
synthetic input held for the parity check adds its float32 pixels twice (torch and numpy
copies). A run estimated above :data:`MAX_PEAK_BYTES` is refused: 8 GiB leaves room on a
24 GB machine shared with other work.
"""

from __future__ import annotations

import math

from .errors import DCDDeployError, UnsupportedInputError

#: Square input side accepted by every command (and read from an ONNX file's metadata).
MAX_INPUT_SIZE = 1024
#: Images per batch (``--batch``, ``--batch-sizes``).
MAX_BATCH = 1024
#: Input channels (``--channels``; an ONNX file's channel axis): grey, RGB, RGB-D, stacks.
MAX_CHANNELS = 64
#: Synthetic inputs per batch size in dcd-validate.
MAX_INPUTS = 10_000
#: Threads of a benchmark backend; each OpenMP thread maps its own stack, so thousands
#: of threads abort inside libgomp under a memory cap.
MAX_THREADS = 64
#: Seeds: torch's generators take 64-bit seeds, and BN calibration multiplies the seed by
#: 1000, so 32 bits keeps every derived seed in range.
MAX_SEED = 2**32 - 1
#: Classes of a model built from a file's config (ImageNet-21k has 21841).
MAX_NUM_CLASSES = 100_000
#: protobuf cannot parse a model larger than 2 GiB (bigger ones need external data).
MAX_ONNX_BYTES = 2**31

BASE_BYTES = 1 << 30
BYTES_PER_PIXEL = 1000
MAX_PEAK_BYTES = 8 << 30


def estimate_peak_bytes(*, input_size: int, batch: int, n_inputs: int = 0) -> int:
    """Rough peak memory of exporting or checking a model at ``input_size`` and ``batch``.

    Args:
        input_size: square input side.
        batch: the largest batch run at once.
        n_inputs: synthetic inputs held at once (parity check).
    """
    pixels = input_size * input_size
    return BASE_BYTES + BYTES_PER_PIXEL * pixels * batch + 2 * 3 * 4 * pixels * n_inputs


def check_memory(*, input_size: int, batch: int, n_inputs: int = 0, what: str = "this run") -> None:
    """Refuse a run whose :func:`estimate_peak_bytes` exceeds :data:`MAX_PEAK_BYTES`.

    Raises:
        UnsupportedInputError: the estimate is above the limit (the message names it).
    """
    need = estimate_peak_bytes(input_size=input_size, batch=batch, n_inputs=n_inputs)
    if need > MAX_PEAK_BYTES:
        extra = f" and {n_inputs} inputs" if n_inputs else ""
        raise UnsupportedInputError(
            f"{what} at input size {input_size} with batch {batch}{extra} would need about "
            f"{need / 2**30:.0f} GiB of memory, above the {MAX_PEAK_BYTES >> 30} GiB limit; "
            "use a smaller input size, batch or input count"
        )


def check_input_size_range(size: int, *, source: str) -> int:
    """``size`` if it is an integer in 1..:data:`MAX_INPUT_SIZE`.

    Raises:
        UnsupportedInputError: out of range (``source`` says where it came from).
    """
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_INPUT_SIZE:
        raise UnsupportedInputError(f"{source}: input size {size!r} is outside 1-{MAX_INPUT_SIZE}")
    return size


def check_config(config: dict, *, source: str, error: type[DCDDeployError]) -> dict:
    """Validate model knobs read from a file before a model is built from them.

    Only the knobs whose bad values cost memory or silently break a model are checked
    here (``num_classes``, ``dropout``, ``fc_squeeze``, ``latent_mult``, ``num_kernels``,
    ``num_blocks``); the model's constructor rejects unknown ones.

    Raises:
        error: a knob with the wrong type or out of range (one line).
    """
    bad_keys = [k for k in config if not isinstance(k, str) or not k.isidentifier()]
    if bad_keys:
        raise error(f"{source}: config key {bad_keys[0]!r} is not a knob name")
    ints = {"num_classes": MAX_NUM_CLASSES, "fc_squeeze": 1024, "num_kernels": 64, "num_blocks": 64}
    for key, top in ints.items():
        value = config.get(key)
        if value is None and key == "num_kernels":
            continue
        if key in config and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top):
            raise error(f"{source}: config {key}={value!r} is not an integer in 1-{top}")
    floats = {"dropout": (0.0, 1.0, True), "latent_mult": (0.0, 1.0, False)}
    for key, (low, high, low_ok) in floats.items():
        if key not in config:
            continue
        value = config[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            ok = (low <= value if low_ok else low < value) and value <= high
        if not ok:
            raise error(
                f"{source}: config {key}={value!r} is not a number in {'[' if low_ok else '('}{low:g}, {high:g}]"
            )
    return config


def read_onnx_input_size(path) -> int:
    """The square input side of an image-model ONNX file (:func:`read_onnx_image_size`).

    Raises:
        UnsupportedInputError: as :func:`read_onnx_image_size`, or the input is not square.
    """
    h, w = read_onnx_image_size(path)
    if h != w:
        raise UnsupportedInputError(f"{path}: its input is {h}x{w}; only square inputs are supported here")
    return h


def load_onnx_checked(path):
    """``onnx.load`` of a file checked first: a regular, non-empty file below
    :data:`MAX_ONNX_BYTES` (its external data is not loaded).

    Raises:
        DCDDeployError: not a regular file, empty, too large, or not ONNX.
    """
    import os
    import stat

    import onnx

    try:
        st = os.stat(path)
    except OSError as exc:
        raise DCDDeployError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DCDDeployError(f"{path} is not a regular file")
    if st.st_size > MAX_ONNX_BYTES:
        raise DCDDeployError(
            f"{path} is {st.st_size / 2**30:.1f} GiB; an ONNX model without external data "
            f"is at most 2 GiB (protobuf's limit), so it is not one this toolkit wrote"
        )
    if st.st_size == 0:
        raise DCDDeployError(f"{path} is empty, not an ONNX model")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except MemoryError:
        raise DCDDeployError(f"{path}: out of memory reading it") from None
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise DCDDeployError(f"{path} is not an ONNX model: {str(exc).splitlines()[0] if str(exc) else exc}") from exc
    if not proto.HasField("graph"):
        raise DCDDeployError(f"{path} is not an ONNX model (it holds no graph)")
    return proto


def read_onnx_image_size(path) -> tuple[int, int]:
    """``(H, W)`` of an image-model ONNX file's input, checked before anything runs it
    (:func:`dcd_deploy.runtimes.read_onnx_input` and its ``image_size``).

    Raises:
        UnsupportedInputError: the file's input does not fit an image model, or its size
            is out of range.
        DCDDeployError: the file is not a regular file, too large, or not ONNX.
    """
    from .runtimes import read_onnx_input  # lazy: the runtimes read this module's limits

    return read_onnx_input(path).image_size()
