"""What an ONNX file takes and returns, and the inputs a parity check feeds it.

A file's signature is read from its graph: every input that is not an initializer and
every output, with rank, element type and each dimension static (an int) or symbolic
(a name, or None when unnamed). The first axis of every input is the batch, and of every
output but one that holds it on another axis, named as the input's is
(:func:`batch_axes`: a CTC head's ``(T, N, C)``).

Inputs for a check come from, per file input and in this order: the caller's tensors
(``inputs=``, one tensor for a one-input file, else a tuple in the file's order or a
dict by input name); the built-in natural images (:func:`~dcd_deploy.models.synthetic_images`)
for an image input (4-D, 3 channels, floating; as uint8 pixels for a uint8 one, RGB or
grey: 1 channel) at the
file's H x W, or the example's when the file's are symbolic; else seeded random values
of the example's shape (``example_inputs=``, what the export traced with) with the batch
axis replaced: normal for floating inputs, uniform integers within the example's range
otherwise (uint8 over 0-255 where the example has no range, or there is none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .._outputs import leaf_name, output_leaves
from ..errors import DCDDeployError, ExportError

#: Seed offset between the synthetic data of successive inputs (the first keeps ``seed``,
#: so a one-input model draws what it always drew).
SEED_STRIDE = 7919


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output of an ONNX file.

    Attributes:
        name: the tensor's name in the graph.
        dims: each dimension: an int when static, else its symbolic name (or None);
            None when the file does not give the shape at all.
        dtype: the element type as a NumPy dtype.
    """

    name: str
    dims: tuple
    dtype: np.dtype

    @property
    def rank(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    @property
    def is_image(self) -> bool:
        """A batch of images: (N, 3, H, W) of floating type, or uint8 pixels, RGB (N, 3, H, W)
        or grey (N, 1, H, W)."""
        if self.rank != 4:
            return False
        return (self.dims[1] == 3 and self.dtype.kind == "f") or (self.dims[1] in (1, 3) and self.dtype == np.uint8)

    def static(self, axis: int) -> int | None:
        if self.dims is None or axis >= len(self.dims):
            return None
        d = self.dims[axis]
        return d if isinstance(d, int) else None


def load(onnx_path: Path):
    """The file's ``ModelProto`` (read once per check: a big model takes a while to parse).

    Raises:
        ExportError: the file is not ONNX.
    """
    import onnx

    try:
        return onnx.load(str(onnx_path), load_external_data=False)
    except Exception as exc:  # protobuf's and onnx's many types for a damaged file
        raise ExportError(
            f"cannot read {onnx_path} as ONNX: {(str(exc).splitlines() or [type(exc).__name__])[0]}"
        ) from None


def read_signature(onnx_path: Path, proto=None) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """(inputs, outputs) of the file's main graph, initializers excluded from inputs.

    Args:
        proto: the file's ``ModelProto`` when already read (:func:`load`).
    """
    from onnx import helper

    proto = load(onnx_path) if proto is None else proto
    weights = {t.name for t in proto.graph.initializer}

    def spec(value) -> TensorSpec:
        tt = value.type.tensor_type
        dims = (
            tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
            if tt.HasField("shape")
            else None
        )
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, TypeError, ValueError):
            raise DCDDeployError(
                f"{onnx_path}: tensor {value.name!r} has an element type parity cannot feed or compare ({tt.elem_type})"
            ) from None
        return TensorSpec(value.name, dims, dtype)

    inputs = [spec(v) for v in proto.graph.input if v.name not in weights]
    outputs = [spec(v) for v in proto.graph.output]
    if not inputs or not outputs:
        raise DCDDeployError(f"{onnx_path} has no {'inputs' if not inputs else 'outputs'}")
    for s in inputs + outputs:
        if s.rank == 0:
            raise DCDDeployError(
                f"{onnx_path}: {s.name!r} is a scalar; parity needs a batch axis on every input and output"
            )
    return inputs, outputs


def as_list(value, specs: list[TensorSpec], what: str) -> list[torch.Tensor] | None:
    """The caller's tensors in the file's input order (None stays None)."""
    if value is None:
        return None
    value = as_tensor(value)
    if isinstance(value, torch.Tensor):
        value = (value,)
    if isinstance(value, dict):
        missing = [s.name for s in specs if s.name not in value]
        if missing:
            raise DCDDeployError(
                f"{what} has no tensor for the file's input(s) {', '.join(missing)}; "
                f"it has {', '.join(map(str, value))}"
            )
        value = tuple(value[s.name] for s in specs)
    value = tuple(map(as_tensor, value))
    names = ", ".join(s.name for s in specs)
    if len(value) != len(specs):
        raise DCDDeployError(f"{what}: expected {len(specs)} tensor(s), one per file input ({names}), got {len(value)}")
    others = [type(v).__name__ for v in value if not isinstance(v, torch.Tensor)]
    if others:
        raise DCDDeployError(
            f"{what}: expected tensors or NumPy arrays, one per file input ({names}), got {', '.join(others)}"
        )
    for v, s in zip(value, specs):
        if s.rank is not None and v.dim() != s.rank:
            raise DCDDeployError(f"{what}: input {s.name!r} takes rank {s.rank}, got shape {tuple(v.shape)}")
    return list(value)


def as_tensor(value):
    """A NumPy array as a tensor (sharing its memory); anything else as it is."""
    return torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value


def image_size(spec: TensorSpec, example: torch.Tensor | None) -> tuple[int, int] | None:
    """(H, W) of an image input: the file's, else the example's (None when neither says)."""
    hw = (spec.static(2), spec.static(3))
    if None in hw and example is not None:
        hw = tuple(h if h is not None else int(example.shape[a]) for a, h in zip((2, 3), hw))
    return None if None in hw else hw


def synthetic_inputs(
    specs: list[TensorSpec], examples: list[torch.Tensor] | None, total: int, *, seed: int, images=None
) -> list[torch.Tensor]:
    """``total`` seeded samples for each file input (see the module docstring).

    Args:
        images: ``images(n, (H, W), seed)`` making image inputs (default: the built-in
            natural images).
    """
    from ..models import natural_uint8, synthetic_images

    images = images or (lambda n, hw, s: synthetic_images(n, hw, seed=s))
    out = []
    for i, spec in enumerate(specs):
        example = examples[i] if examples is not None else None
        s = seed + SEED_STRIDE * i
        pixels = spec.dtype == np.uint8
        if spec.is_image and (example is None or example.is_floating_point() != pixels):
            hw = image_size(spec, example)
            if hw is None:
                raise DCDDeployError(
                    f"input {spec.name!r} has a symbolic height or width; pass "
                    "example_inputs (what the export traced with) or inputs"
                )
            # uint8 pixels are the images as a camera gives them, whatever the preprocessing
            out.append(natural_uint8(total, hw, seed=s, channels=spec.dims[1]) if pixels else images(total, hw, s))
            continue
        if spec.rank is None and example is None:
            raise DCDDeployError(f"input {spec.name!r} has no shape in the file; pass example_inputs or inputs")
        shape = [total]
        for axis in range(1, spec.rank if spec.rank is not None else example.dim()):
            d = spec.static(axis)
            if d is None and example is not None:
                d = int(example.shape[axis])
            if d is None:
                raise DCDDeployError(
                    f"input {spec.name!r} has a symbolic dimension {axis}; pass "
                    "example_inputs (what the export traced with) or inputs"
                )
            shape.append(d)
        g = torch.Generator().manual_seed(s)
        dtype = example.dtype if example is not None else torch.from_numpy(np.zeros(0, spec.dtype)).dtype
        if dtype.is_floating_point:
            out.append(torch.randn(shape, generator=g).to(dtype))
        elif dtype == torch.bool:
            out.append(torch.randint(0, 2, shape, generator=g).bool())
        else:
            known = example is not None and example.numel() > 0
            lo, hi = (int(example.min()), int(example.max())) if known else (0, 1)
            if dtype == torch.uint8 and (not known or lo == hi):  # no range to read: pixels (NHWC, say)
                lo, hi = 0, 255
            out.append(torch.randint(lo, hi + 1, shape, generator=g).to(dtype))
    return out


def flatten_outputs(out) -> list[tuple[str | None, torch.Tensor]]:
    """A model's outputs (tensor, tuple, list, dict, dataclass, nested) in the order the
    export flattens them, each named as the export names a keyed output's (``heads.boxes``,
    ``levels.0``; None for a lone tensor)."""
    leaves, _ = output_leaves(out)
    for _, value in leaves:
        if not isinstance(value, torch.Tensor):
            raise DCDDeployError(
                f"the model returns a {type(value).__name__}; parity compares tensors "
                "(a tensor, or tuples, lists, dicts and dataclasses of tensors)"
            )
    if not leaves:
        raise DCDDeployError("the model returns no tensor")
    return [(leaf_name(path, keyed=True) if path else None, t) for path, t in leaves]


def batch_axes(in_specs: list[TensorSpec], out_specs: list[TensorSpec]) -> list[int]:
    """Per output, the axis holding the batch: 0 where its first dimension is the first
    input's batch (a symbol, or a fixed size), else the one axis that is (a sequence-first
    output, ``(T, N, C)`` as CTC takes it, ``nn.MultiheadAttention``'s ``(L, N, E)``),
    else 0."""
    batch = in_specs[0].dims[0] if in_specs and in_specs[0].dims else None
    axes = []
    for spec in out_specs:
        dims = spec.dims or ()  # None: a rank the file does not give
        named = [i for i, d in enumerate(dims) if batch is not None and d == batch]
        axes.append(named[0] if len(named) == 1 and dims[0] != batch else 0)
    return axes


def match_outputs(names: list[str | None], specs: list[TensorSpec], path: Path) -> list[int]:
    """For each ONNX output, the index of the model output it holds: by dict key where
    every key names a file output, else by position."""
    if len(names) != len(specs):
        raise DCDDeployError(
            f"the model returns {len(names)} tensor(s) but {path} has {len(specs)} "
            f"output(s) ({', '.join(s.name for s in specs)})"
        )
    index = {n: i for i, n in enumerate(names) if n is not None}
    if len(index) == len(names) and all(s.name in index for s in specs):
        return [index[s.name] for s in specs]
    return list(range(len(specs)))
