"""The inputs of an ONNX file, read once and checked before any runtime loads it.

Every reader of a file's inputs goes through :func:`read_onnx_file` (each input's name,
numpy type and axes, whether the file has fused nodes, its weight count): ``dcd-validate``
(its plan for several inputs), ``dcd-bench --models net.onnx`` (its backends, its weight
count, ``--inputs`` checked against the inputs). The file is checked as
:func:`dcd_deploy._limits.load_onnx_checked` checks it (a regular, non-empty file below
2 GiB, ONNX). Where synthetic images feed it, :func:`read_onnx_input` (its
:meth:`OnnxFile.image_input`) also requires one float32 (N, C, H, W) input whose fixed
axes are within the toolkit's limits: the image size ``dcd-validate`` makes its images
at, the shape ``dcd-bench`` feeds.
"""

from __future__ import annotations

import functools
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import UnsupportedInputError

#: The ``input_size`` metadata: ``224``, ``256x320``, ``[256, 320]`` or ``(256, 320)``.
METADATA_SIZE = re.compile(r"\s*[\[(]?\s*([0-9]{1,9})\s*(?:[x,]\s*([0-9]{1,9})\s*)?[\])]?\s*")
#: The image side taken for a symbolic axis without ``input_size`` metadata.
DEFAULT_SIDE = 224


@dataclass(frozen=True)
class OnnxInput:
    """The one input of an ONNX file (None for a dynamic axis).

    Attributes:
        name: the input's name.
        shape: (N, C, H, W), each an int or None.
        fused: the file has fused ``dcd_deploy`` nodes (``dcd-export --mode fused``).
        params: elements of its initializers (the weights).
        path: the file.
        size_metadata: its ``input_size`` metadata, None without.
        dtype: ``float32``, or ``uint8`` for a model that takes pixels as they are
            (``dcd-export --preprocess uint8``).
    """

    name: str
    shape: tuple[int | None, ...]
    fused: bool
    params: int
    path: str = ""
    size_metadata: str | None = None
    dtype: str = "float32"

    def resolve(self, *, batch: int, input_size: tuple[int, int]) -> tuple[int, ...]:
        """The concrete (N, C, H, W): fixed axes as the file has them, dynamic ones from
        ``batch`` and ``input_size``."""
        n, c, h, w = self.shape
        return (
            batch if n is None else n,
            3 if c is None else c,
            input_size[0] if h is None else h,
            input_size[1] if w is None else w,
        )

    @property
    def dynamic_size(self) -> bool:
        """Height or width is symbolic (``dcd-export --dynamic-size``)."""
        return self.shape[2] is None or self.shape[3] is None

    @property
    def channels(self) -> int:
        """C of the (N, C, H, W) input; 3 (RGB) when the axis is symbolic."""
        return 3 if self.shape[1] is None else self.shape[1]

    def image_size(self) -> tuple[int, int]:
        """``(H, W)`` of an image input of 1-:data:`~dcd_deploy._limits.MAX_CHANNELS`
        channels: from the ``input_size`` metadata this toolkit writes, else from the
        shape, else :data:`DEFAULT_SIDE` for a dynamic axis.

        Raises:
            UnsupportedInputError: too many channels, metadata that is no size or
                disagrees with the shape, or a side out of range.
        """
        from .._limits import MAX_CHANNELS, check_input_size_range

        if self.shape[1] is not None and not 1 <= self.shape[1] <= MAX_CHANNELS:
            raise UnsupportedInputError(
                f"{self.path}: its input {self.name!r} has shape {_text(self.shape)}; an image model "
                f"takes (N, C, H, W) with C 1-{MAX_CHANNELS}"
            )
        if self.size_metadata is None:
            size = (self.shape[2] or DEFAULT_SIDE, self.shape[3] or DEFAULT_SIDE)
        else:
            match = METADATA_SIZE.fullmatch(self.size_metadata)
            if match is None:
                raise UnsupportedInputError(
                    f"{self.path}: its metadata input_size {self.size_metadata!r} is not an integer or HxW"
                )
            size = (int(match.group(1)), int(match.group(2) or match.group(1)))
            if any(d not in (None, s) for d, s in zip(self.shape[2:], size)):
                raise UnsupportedInputError(
                    f"{self.path}: its metadata input_size {self.size_metadata} disagrees "
                    f"with its input shape ({self.shape[2]}x{self.shape[3]})"
                )
        for side in size:
            check_input_size_range(side, source=self.path)
        return size


@dataclass(frozen=True)
class GraphInput:
    """One input of an ONNX graph (its weights left out).

    Attributes:
        name: the input's name.
        dtype: its element type in numpy's spelling (``float32``, ``int64``), or the ONNX
            name lower-cased for a type numpy lacks; ``not a tensor`` for a sequence & co.
        shape: its axes, an int each or None for a symbolic one; None for an unknown rank.
    """

    name: str
    dtype: str
    shape: tuple[int | None, ...] | None


@dataclass(frozen=True)
class OnnxFile:
    """What the toolkit reads of an ONNX file before any runtime loads it.

    Attributes:
        inputs: every input of its graph, in order (its weights left out).
        fused: it has fused ``dcd_deploy`` nodes (``dcd-export --mode fused``).
        params: elements of its initializers (the weights).
        path: the file.
        size_metadata: its ``input_size`` metadata, None without.
    """

    inputs: tuple[GraphInput, ...]
    fused: bool
    params: int
    path: str = ""
    size_metadata: str | None = None

    def image_input(self) -> OnnxInput:
        """The file's one image input: float32 (N, C, H, W), or uint8 pixels, each fixed
        axis within the toolkit's limits.

        Raises:
            UnsupportedInputError: an input an image model does not have (several inputs,
                not float32, not rank 4, sides out of range).
        """
        from .._limits import MAX_INPUT_SIZE

        if len(self.inputs) != 1:
            raise UnsupportedInputError(
                f"{self.path} has {len(self.inputs)} inputs; an image model has one, of shape (N, C, H, W)"
            )
        (value,) = self.inputs
        if value.dtype not in ("float32", "uint8"):
            raise UnsupportedInputError(
                f"{self.path}: its input {value.name!r} is {value.dtype}; an image model takes float32 (or uint8 pixels)"
            )
        if value.shape is None or len(value.shape) != 4:
            shape = "unknown" if value.shape is None else _text(value.shape)
            raise UnsupportedInputError(
                f"{self.path}: its input {value.name!r} has shape {shape}; an image model takes (N, C, H, W)"
            )
        if any(d is not None and not 1 <= d <= MAX_INPUT_SIZE for d in value.shape[1:]):
            raise UnsupportedInputError(
                f"{self.path}: its input shape {_text(value.shape)} has a side outside 1-{MAX_INPUT_SIZE}"
            )
        return OnnxInput(value.name, value.shape, self.fused, self.params, self.path, self.size_metadata, value.dtype)


def graph_inputs(graph) -> tuple[GraphInput, ...]:
    """Every input of an ONNX ``graph`` that is not one of its weights, in order."""
    import onnx
    from onnx import helper

    weights = {t.name for t in graph.initializer}
    out = []
    for value in graph.input:
        if value.name in weights:
            continue
        if not value.type.HasField("tensor_type"):
            out.append(GraphInput(value.name, "not a tensor", None))
            continue
        tensor = value.type.tensor_type
        try:
            dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        except KeyError:  # no numpy type (bfloat16, float8, undefined)
            dtype = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
        out.append(GraphInput(value.name, dtype, dims if tensor.HasField("shape") else None))
    return tuple(out)


def read_onnx_file(path: str | Path, proto=None) -> OnnxFile:
    """An ONNX file's inputs, fused nodes and weight count, read within the toolkit's
    limits (a regular, non-empty file below 2 GiB, ONNX).

    Args:
        proto: the file's ``ModelProto`` when the caller has read it already (a big file
            takes seconds to parse); read here when None.

    Raises:
        DCDDeployError: not a readable ONNX file (missing, too large, not ONNX).
    """
    from .._limits import load_onnx_checked

    if proto is None:
        try:
            st = os.stat(path)
        except OSError:
            st = None  # load_onnx_checked says why, in its words
        if st is not None and stat.S_ISREG(st.st_mode):
            return _read_once(str(path), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        proto = load_onnx_checked(path)
    return _summary(proto, path)


@functools.lru_cache(maxsize=16)
def _read_once(path: str, identity: tuple) -> OnnxFile:
    """:func:`read_onnx_file` of a file not changed since (``identity``: device, inode, size,
    mtime, ctime): ``dcd-bench`` asks a file's inputs, weight count and fused nodes in several
    places, and parsing a ResNet-50 file takes about a second."""
    from .._limits import load_onnx_checked

    return _summary(load_onnx_checked(path), path)


def _summary(proto, path) -> OnnxFile:
    return OnnxFile(
        graph_inputs(proto.graph),
        _has_fused_nodes(proto),
        sum(math.prod(t.dims) for t in proto.graph.initializer),
        str(path),
        {p.key: p.value for p in proto.metadata_props}.get("input_size"),
    )


def read_onnx_input(path: str | Path, proto=None) -> OnnxInput:
    """The image input of an ONNX file (:meth:`OnnxFile.image_input` of :func:`read_onnx_file`).

    Raises:
        DCDDeployError: not a readable ONNX file (missing, too large, not ONNX).
        UnsupportedInputError: an input an image model does not have (several inputs, not
            float32, not rank 4, sides out of range).
    """
    return read_onnx_file(path, proto).image_input()


def _has_fused_nodes(proto) -> bool:
    from ..exporters import FUSED_OP_TYPES

    return any(n.domain == "dcd_deploy" and n.op_type in FUSED_OP_TYPES for n in proto.graph.node)


def _text(dims) -> str:
    return str(tuple("?" if d is None else d for d in dims))
