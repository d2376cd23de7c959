"""Writing an exported graph at another opset than the one it was traced at (``--opset``).

``onnx.version_converter`` steps the graph one opset at a time with an adapter per op
version and refuses what it has no adapter for. On its own (onnx 1.23) it refused every
network we export below opset 16, and broke the fused and function modes at any opset but
18; :func:`convert_opset` closes nine gaps before and around the call:

* **Ops introduced after the target** (Mish at 18, HardSwish at 14: "No Previous Version
  of Mish exists"): ONNX defines them as functions of older ops and its schemas carry those
  bodies, so each such node is replaced by its schema's body (Mish = x·tanh(softplus(x))),
  which is what a runtime without the op computes anyway. Ops whose body depends on their
  attributes or types (``has_context_dependent_function``) are left to the converter.
* **Versions that only added types** (Add/Sub/Mul/Div/Relu 14: bfloat16 and small ints;
  Identity 14-25: sequence, optional, float8 and int4 types) have no down adapter ("No
  Adapter From Version $14 for Relu"), though the node is valid as it is in the older
  version for the float tensors we write. Reshape 14 only added ``allowzero``: the same
  when it is 0 (the default), or 1 (torch.onnx's flatten) with a shape holding no 0: a
  constant one checked, a computed one (``view(b, c, h * w)`` at a symbolic size) since
  a 0 there empties the result and so the input, which a model's input never is but for
  an empty batch (whose axis 0 the old Reshape copies); Shape 15 only added
  ``start``/``end``: the same without them; BatchNormalization 15 and 14 only split its
  types and added ``training_mode``: the same in inference mode with one output. Such nodes wait in a private domain during the call and are put back after it;
  the checker's full pass over the result (shape inference at the target opset) then
  checks their types against the old schemas.
* **Shape 15's ``start``/``end``** (``x.shape[-2:]``, an ``F.interpolate`` size): no
  down adapter either; below 15 such a Shape becomes the whole Shape and a Slice.
* **ReduceMean & co. at 18 -> 17**: torch.onnx writes ``noop_with_empty_axes=0``, which
  the converter keeps although the attribute only exists from 18; at its default it says
  nothing, so it is dropped.
* **Local functions** (the fused and function modes' ops): the converter drops them, up
  or down; each is converted alone, as a model of its own, and put back.
* **ReduceMean & co. and Resize below 13**: no down adapter from 13. ReduceMean with
  constant ``axes`` (an input from 18) takes them as 11-17's attribute and waits with the
  type-only nodes; a Resize drops 18's default attributes and gets the empty ``roi`` and
  ``scales`` tensors that 11 requires, and waits too.
* **LayerNormalization below 17**: a function whose body depends on its attributes, so
  neither expanded above nor adapted; written as its arithmetic (a positive ``axis``
  counted from the back where the input's rank is known).
* **Split 18** (``torch.chunk``): no down adapter at all. With ``num_outputs`` and an axis
  of known length it gets its parts' sizes, as 13's input or 11's attribute, and waits;
  over a symbolic length, or with computed sizes below 13, it becomes one Slice per part,
  its bounds computed at run time.
* **Softmax, LogSoftmax and Hardmax below 13** normalised over every axis from ``axis``
  on, and the converter keeps the node unchanged (another function): one over its
  input's last axis waits with the type-only nodes, any other is refused.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import onnx
from onnx import defs, numpy_helper, version_converter

from ..errors import ExportError

_STANDARD = ("", "ai.onnx")
#: op -> the newest version whose changes (from the version before it) only added types.
#: Nodes of these ops convert to any older opset the op exists at unchanged.
#: (Version 13 of every op here only added bfloat16; so did 12 of Clip, Max, Min and Pow,
#: integer types.)
TYPE_ONLY_CHANGES = {
    **{"Add": 14, "Sub": 14, "Mul": 14, "Div": 14, "Relu": 14, "Identity": 25, "Pow": 15, "CumSum": 14},
    **dict.fromkeys(("Clip", "Flatten", "Gemm", "MatMul", "Sigmoid", "Tanh", "Exp", "Sqrt", "Neg"), 13),
    **dict.fromkeys(("Concat", "Transpose", "Gather", "Cast", "Tile", "Max", "Min", "Slice"), 13),
    **dict.fromkeys(("Equal", "Greater", "Less", "Floor", "Ceil", "Abs", "Reciprocal", "Expand", "Erf"), 13),
    # nn.PixelShuffle / PixelUnshuffle, and ops of users' heads and losses
    **dict.fromkeys(("DepthToSpace", "SpaceToDepth", "Log", "Sign", "Mod", "Mean", "Sum", "GatherElements"), 13),
    **dict.fromkeys(("IsNaN", "LRN", "MeanVarianceNormalization", "NonZero", "Size"), 13),
}
#: ops whose attribute ``noop_with_empty_axes`` was added at 18 (and axes became an input)
_REDUCE_18 = frozenset(
    {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum"}
    | {"ReduceLogSumExp", "ReduceSumSquare"}
)
_HIDDEN = "dcd_deploy.opset_passthrough"  # the private domain nodes wait in during conversion


def convert_opset(proto: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``proto`` (traced at a newer opset) written at ``opset``; ``proto`` is changed too.

    Raises:
        ExportError: an op the converter cannot write at ``opset``, named in its words.
    """
    from ._trace import NATIVE_OPSET

    expand_newer_ops(proto, opset)
    if opset < 18:
        _drop_default_noop(proto)
    if opset < 15:
        _slice_shapes(proto)
    # shape inference once, for whichever pass asks (the LayerNorm rewrite keeps the names
    # of every tensor the Split pass looks up)
    dims = functools.cache(lambda: _dims(proto))
    if opset < 17 and any(n.op_type == "LayerNormalization" for n in proto.graph.node):
        serial = itertools.count()
        _rewrite(proto.graph.node, lambda node: _layer_norm_parts(node, next(serial), dims()))
    if opset < 18:
        _axes_as_attribute(proto)
        _split_sizes(proto, opset, dims)
    if opset < 13:
        _resize_of_11(proto)
    hidden = _hide_passthrough(proto, opset)
    if opset < 13:
        _refuse_flattening_softmax(proto, opset)
    try:
        converted = version_converter.convert_version(proto, opset)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ExportError(f"cannot write opset {opset}: {first}; use opset {NATIVE_OPSET}") from exc
    _restore(converted, hidden)
    functions = [_convert_function(fn, opset) for fn in proto.functions]
    del converted.functions[:]
    converted.functions.extend(functions)
    kept = {i.domain for i in converted.opset_import}
    converted.opset_import.extend(i for i in proto.opset_import if i.domain not in kept and i.domain != _HIDDEN)
    return converted


def _drop_attributes(node: onnx.NodeProto, *names: str) -> None:
    keep = [a for a in node.attribute if a.name not in names]
    del node.attribute[:]
    node.attribute.extend(keep)


def _drop_default_noop(proto: onnx.ModelProto) -> None:
    for node in proto.graph.node:
        if node.domain in _STANDARD and node.op_type in _REDUCE_18:
            keep = [a for a in node.attribute if not (a.name == "noop_with_empty_axes" and a.i == 0)]
            if len(keep) != len(node.attribute):
                del node.attribute[:]
                node.attribute.extend(keep)


def _slice_shapes(proto: onnx.ModelProto) -> None:
    """Each Shape with ``start``/``end`` (15: torch.onnx writes them for ``x.shape[-2:]``) as
    the whole Shape and a Slice of it, which clamps and counts from the back as they do."""
    serial = itertools.count()

    def sliced(node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
        bounds = {a.name: a.i for a in node.attribute if a.name in ("start", "end")}
        if node.domain not in _STANDARD or node.op_type != "Shape" or not bounds:
            return None
        prefix = f"{node.name or 'Shape'}/_sliced{next(serial)}/"
        values = (bounds.get("start", 0), bounds.get("end", np.iinfo(np.int64).max), 0)
        consts = [prefix + k for k in ("starts", "ends", "axes")]
        out = [onnx.helper.make_node("Shape", [node.input[0]], [prefix + "shape"], name=prefix + "Shape")]
        for name, v in zip(consts, values):
            tensor = numpy_helper.from_array(np.array([v], dtype=np.int64), name)
            out.append(onnx.helper.make_node("Constant", [], [name], name=name, value=tensor))
        return [*out, onnx.helper.make_node("Slice", [prefix + "shape", *consts], list(node.output), name=node.name)]

    _rewrite(proto.graph.node, sliced)


def _axes_as_attribute(proto: onnx.ModelProto) -> None:
    """ReduceMean & co. of opset 18 with constant ``axes`` in the form of 11-17 (``axes`` an
    attribute), which only added types from 11 to 17: they then wait with the type-only
    nodes (the converter writes them at 13-17 itself, but has no adapter below 13)."""
    nodes = proto.graph.node
    names = {n.input[1] for n in nodes if n.domain in _STANDARD and n.op_type in _REDUCE_18 and len(n.input) > 1}
    constants = _constants(proto, names)
    for node in nodes:
        if node.domain in _STANDARD and node.op_type in _REDUCE_18 and node.input[1:] and node.input[1] in constants:
            axes = [int(a) for a in constants[node.input[1]].reshape(-1)]
            del node.input[1:]
            if axes:  # no axes: every axis, as without the attribute
                node.attribute.append(onnx.helper.make_attribute("axes", axes))
    used = {i for n in nodes for i in n.input} | {o.name for o in proto.graph.output}
    unused = [n for n in nodes if n.op_type == "Constant" and n.domain in _STANDARD and n.output[0] in names - used]
    for node in unused:
        nodes.remove(node)


def _layer_norm_parts(node: onnx.NodeProto, serial: int, dims: dict) -> list[onnx.NodeProto] | None:
    """A LayerNormalization (17; its ONNX body depends on its attributes, so the converter
    has no version before it) as its arithmetic: ``(x - mean) / sqrt(var + eps) * scale + b``
    over the axes from ``axis`` to the last, with 18's ReduceMean (``_axes_as_attribute``
    then writes them for the target); the normalised output alone. torch.onnx writes a
    negative ``axis`` (-1 for ``F.layer_norm`` over the last dimension); a positive one is
    counted from the back by the input's rank (``dims``: tensor name -> its axes) where
    shape inference knows it."""
    if node.domain not in _STANDARD or node.op_type != "LayerNormalization" or len([o for o in node.output if o]) != 1:
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    axis, eps = attrs.get("axis", -1), attrs.get("epsilon", 1e-5)
    if axis >= 0 and node.input[0] in dims:
        axis -= len(dims[node.input[0]])
    if axis >= 0 or attrs.get("stash_type", 1) != 1:
        return None
    p = f"{node.name or 'LayerNormalization'}/_parts{serial}/"
    x, scale, bias = node.input[0], node.input[1], node.input[2] if node.input[2:] else ""
    make, out = onnx.helper.make_node, node.output[0]
    axes = numpy_helper.from_array(np.arange(axis, 0, dtype=np.int64), p + "axes")
    epsilon = numpy_helper.from_array(np.array(eps, dtype=np.float32), p + "eps")
    return [
        make("Constant", [], [p + "axes"], name=p + "axes", value=axes),
        make("Constant", [], [p + "eps"], name=p + "eps", value=epsilon),
        make("ReduceMean", [x, p + "axes"], [p + "mean"], name=p + "mean", keepdims=1),
        make("Sub", [x, p + "mean"], [p + "d"], name=p + "d"),
        make("Mul", [p + "d", p + "d"], [p + "d2"], name=p + "d2"),
        make("ReduceMean", [p + "d2", p + "axes"], [p + "var"], name=p + "var", keepdims=1),
        make("Add", [p + "var", p + "eps"], [p + "ve"], name=p + "ve"),
        make("Sqrt", [p + "ve"], [p + "sd"], name=p + "sd"),
        make("Div", [p + "d", p + "sd"], [p + "n"], name=p + "n"),
        make("Mul", [p + "n", scale], [p + "s" if bias else out], name=p + "s"),
        *([make("Add", [p + "s", bias], [out], name=p + "b")] if bias else []),
    ]


def _dims(proto: onnx.ModelProto) -> dict:
    """Tensor name -> its axes (``TensorShapeProto.Dimension``s) where shape inference knows its rank."""
    inferred = onnx.shape_inference.infer_shapes(proto).graph
    return {
        v.name: v.type.tensor_type.shape.dim
        for v in [*inferred.value_info, *inferred.input]
        if v.type.tensor_type.HasField("shape")
    }


def _split_sizes(proto: onnx.ModelProto, opset: int, shapes) -> None:
    """Each Split of 18's ``num_outputs`` (torch.onnx's ``torch.chunk``) with its parts' sizes
    instead (the last one shorter when the length does not divide, as 18 has it): where the
    axis has a known length, an input from 13 on, an attribute before. Where it does not
    (a chunk over a symbolic size), and below 13 where the sizes are computed (torch.onnx's
    ``split_with_sizes`` at a symbolic size), as Slices (:func:`_split_slices`). ``shapes()``
    gives :func:`_dims` of the graph."""
    splits = [n for n in proto.graph.node if n.domain in _STANDARD and n.op_type == "Split"]
    sliced = set()
    if opset < 13:  # sizes given as an input: an attribute where constant, else Slices
        given = _constants(proto, {n.input[1] for n in splits if n.input[1:]})
        for node in (n for n in splits if n.input[1:]):
            if node.input[1] not in given:
                sliced.add(id(node))
                continue
            node.attribute.append(onnx.helper.make_attribute("split", [int(v) for v in given[node.input[1]]]))
            del node.input[1:]
    dims = shapes() if any(a.name == "num_outputs" for n in splits for a in n.attribute) else {}
    for node in splits:
        attrs = {a.name: a.i for a in node.attribute}
        shape = dims.get(node.input[0])
        if "num_outputs" not in attrs:
            continue
        axis = attrs.get("axis", 0)
        if not shape or not shape[axis % len(shape)].HasField("dim_value"):  # no rank, or a symbolic length
            sliced.add(id(node))
            continue
        length, parts = shape[axis % len(shape)].dim_value, attrs["num_outputs"]
        size = -(-length // parts)
        sizes = [size] * (parts - 1) + [length - size * (parts - 1)]
        _drop_attributes(node, "num_outputs")
        if opset < 13:
            node.attribute.append(onnx.helper.make_attribute("split", sizes))
        else:
            name = f"{node.name or 'Split'}/_sizes"
            proto.graph.initializer.append(numpy_helper.from_array(np.array(sizes, dtype=np.int64), name))
            node.input.append(name)
    if sliced:
        serial = itertools.count()
        _rewrite(proto.graph.node, lambda n: _split_slices(n, next(serial)) if id(n) in sliced else None)


def _split_slices(node: onnx.NodeProto, serial: int) -> list[onnx.NodeProto]:
    """A Split as one Slice per part over its axis, with bounds computed at run time (ops of
    opset 11): from a sizes input, ``[c_i - s_i, c_i)`` with ``c`` their running sum; with
    ``num_outputs`` K over a length ``n`` not known before, ``[i·s, (i+1)·s)`` with
    ``s = ceil(n / K)`` (Split 18's sizes; Slice clamps the last end)."""
    attrs = {a.name: a.i for a in node.attribute}
    axis, x = attrs.get("axis", 0), node.input[0]
    p = f"{node.name or 'Split'}/_slices{serial}/"
    make = onnx.helper.make_node

    def const(name: str, value: int) -> onnx.NodeProto:
        tensor = numpy_helper.from_array(np.array([value], dtype=np.int64), p + name)
        return make("Constant", [], [p + name], name=p + name, value=tensor)

    parts = len(node.output)
    out = [const("axis", axis), *(const(f"i{i}", i) for i in range(parts))]
    if node.input[1:]:
        out += [
            make("CumSum", [node.input[1], p + "i0"], [p + "ends"], name=p + "ends"),  # (K,)
            make("Sub", [p + "ends", node.input[1]], [p + "starts"], name=p + "starts"),  # (K,)
        ]
        for i in range(parts):
            out.append(make("Gather", [p + "starts", p + f"i{i}"], [p + f"start{i}"], name=p + f"start{i}"))
            out.append(make("Gather", [p + "ends", p + f"i{i}"], [p + f"end{i}"], name=p + f"end{i}"))
    else:
        out += [
            const("rest", parts - 1),
            const("parts", parts),
            const("open", np.iinfo(np.int64).max),
            make("Shape", [x], [p + "shape"], name=p + "shape"),
            make("Gather", [p + "shape", p + "axis"], [p + "n"], name=p + "n", axis=0),  # (1,)
            make("Add", [p + "n", p + "rest"], [p + "n_up"], name=p + "n_up"),
            make("Div", [p + "n_up", p + "parts"], [p + "size"], name=p + "size"),  # (1,) ceil(n / K)
            *(make("Mul", [p + "size", p + f"i{i}"], [p + f"start{i}"], name=p + f"start{i}") for i in range(parts)),
        ]
    starts = [p + f"start{i}" for i in range(parts)]
    # each part ends where the next starts; the last one at the end (Slice clamps)
    ends = [p + f"end{i}" for i in range(parts)] if node.input[1:] else [*starts[1:], p + "open"]
    slices = [
        make("Slice", [x, start, end, p + "axis"], [y], name=f"{p}part{i}")
        for i, (start, end, y) in enumerate(zip(starts, ends, node.output, strict=True))
        if y
    ]
    return [*out, *slices]


#: Resize's attributes from 18 on, and the values that make them say nothing
_RESIZE_18 = {"antialias": 0, "keep_aspect_ratio_policy": b"stretch"}
#: the coordinate transformations Resize 11 knows whose meaning 13 kept (13 dropped one)
_RESIZE_11_MODES = {b"half_pixel", b"pytorch_half_pixel", b"align_corners", b"asymmetric"}


def _resize_of_11(proto: onnx.ModelProto) -> None:
    """Each Resize (torch.onnx's ``F.interpolate``) written as version 11 takes it, where the
    two mean the same: 18's attributes at their defaults dropped, no ``axes``, and the
    empty ``roi`` and ``scales`` inputs (optional from 13) given as empty tensors."""
    serial = itertools.count()
    for node in list(proto.graph.node):
        if node.domain not in _STANDARD or node.op_type != "Resize" or len(node.input) < 3:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        mode = attrs.get("coordinate_transformation_mode", b"half_pixel")
        if "axes" in attrs or mode not in _RESIZE_11_MODES or any(attrs.get(k, v) != v for k, v in _RESIZE_18.items()):
            continue  # left to the converter, which names it
        _drop_attributes(node, *_RESIZE_18)
        for i in (1, 2):
            if not node.input[i]:
                name = f"{node.name or 'Resize'}/_empty{next(serial)}"
                proto.graph.initializer.append(numpy_helper.from_array(np.zeros(0, dtype=np.float32), name))
                node.input[i] = name


#: Ops whose ``axis`` was "every axis from here on" before 13 and one axis since.
_NORMALISING = ("Softmax", "LogSoftmax", "Hardmax")


def _passes_through(node: onnx.NodeProto, opset: int, constants: dict, two_d: set) -> bool:
    if node.domain not in _STANDARD or not _exists_at(node.op_type, opset):
        return False
    if node.op_type in TYPE_ONLY_CHANGES:
        return True
    if node.op_type in _NORMALISING and opset < 13:
        # 13 made the axis one axis (11 flattened from it on): the same over the last axis
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
        return axis == -1 or (axis == 1 and node.input[0] in two_d)
    if node.op_type == "Resize" and opset < 13:  # _resize_of_11 wrote it so, where it could
        return all(node.input[:3]) and not {a.name for a in node.attribute} & _RESIZE_18.keys()
    if node.op_type == "Split" and opset < 18:  # _split_sizes wrote it so, where it could
        return not any(a.name == "num_outputs" for a in node.attribute) and (opset >= 13 or not node.input[1:])
    if node.op_type in ("ArgMax", "ArgMin"):  # 12 added select_last_index, 13 bfloat16
        return opset >= 12 or all(a.i == 0 for a in node.attribute if a.name == "select_last_index")
    if node.op_type == "GatherND":  # 12 added batch_dims (F.adaptive_avg_pool2d's gathers: 0), 13 bfloat16
        return opset >= 12 or all(a.i == 0 for a in node.attribute if a.name == "batch_dims")
    if node.op_type == "Pad":  # 13 added bfloat16, 18 the axes input, 19 the wrap mode
        return len(node.input) <= 3
    if node.op_type == "BatchNormalization":  # 15 split its types, 14 added training_mode
        return len(node.output) == 1 and all(a.i == 0 for a in node.attribute if a.name == "training_mode")
    if node.op_type == "Constant":  # 12 added value_float & co., 13 bfloat16: a tensor value is 11's
        return [a.name for a in node.attribute] == ["value"]
    if node.op_type in _REDUCE_18 and opset < 18:  # axes an attribute (_axes_as_attribute): 11-17's form
        return len(node.input) == 1
    if node.op_type == "Shape" and opset < 15:  # 15 added start/end (_slice_shapes took them out)
        return not node.attribute
    if node.op_type != "Reshape" or opset >= 14:
        return False
    allowzero = next((a.i for a in node.attribute if a.name == "allowzero"), 0)
    if allowzero == 0:
        return True
    # allowzero=1 (torch.onnx's flatten, ``view(b, c, h * w)``) differs from the old Reshape
    # only for a 0 in the shape, which makes the result empty, so the input too (a reshape
    # keeps the element count): never on a non-empty tensor. A computed shape is kept (its 0
    # would come from an empty batch, whose dim 0 the old Reshape copies); a constant 0 is
    # a reshape of empty tensors only, and refused.
    shape = constants.get(node.input[1]) if len(node.input) > 1 else None
    return shape is None or bool((shape != 0).all())


def _constants(proto: onnx.ModelProto, names: set) -> dict:
    """The graph's constant tensors of ``names`` (initializers and Constant nodes' values)."""
    out = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer if t.name in names}
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.domain in _STANDARD and node.output[0] in names:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                out[node.output[0]] = numpy_helper.to_array(value)
    return out


def _hide_passthrough(proto: onnx.ModelProto, opset: int) -> int:
    shapes = {n.input[1] for n in proto.graph.node if n.op_type == "Reshape" and len(n.input) > 1}
    count, constants = 0, _constants(proto, shapes)
    # outputs of rank 2 whatever their input: Softmax's axis 1 is their last
    two_d = {n.output[0] for n in proto.graph.node if n.domain in _STANDARD and n.op_type in ("Gemm", "Flatten")}
    for node in proto.graph.node:  # the functions are converted one by one (_convert_function)
        if _passes_through(node, opset, constants, two_d):
            node.domain = _HIDDEN
            if node.op_type == "Reshape":  # allowzero: unknown before 14, and moot here
                del node.attribute[:]
            if node.op_type in _NORMALISING and not node.attribute:  # the default axis was 1 before 13
                node.attribute.append(onnx.helper.make_attribute("axis", -1))
            if node.op_type in ("ArgMax", "ArgMin") and opset < 12:  # its default (first index) then
                _drop_attributes(node, "select_last_index")
            if node.op_type == "GatherND" and opset < 12:  # 0, what 11 does
                _drop_attributes(node, "batch_dims")
            count += 1
    if count:
        proto.opset_import.add(domain=_HIDDEN, version=1)
    return count


def _refuse_flattening_softmax(proto: onnx.ModelProto, opset: int) -> None:
    """Below 13 Softmax normalises over every axis from ``axis`` on, and onnx's converter
    keeps the node unchanged: a Softmax not hidden as one over the last axis would compute
    another function."""
    for node in proto.graph.node:
        if node.domain in _STANDARD and node.op_type in _NORMALISING:
            axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
            raise ExportError(
                f"cannot write opset {opset}: a {node.op_type} over axis {axis}, not known to be its input's last "
                f"(below 13 it normalises over every axis from there on); use opset 13 or newer"
            )


def _restore(proto: onnx.ModelProto, hidden: int) -> None:
    if not hidden:
        return
    for node in proto.graph.node:
        if node.domain == _HIDDEN:
            node.domain = ""
    keep = [i for i in proto.opset_import if i.domain != _HIDDEN]
    del proto.opset_import[:]
    proto.opset_import.extend(keep)


def expand_newer_ops(proto: onnx.ModelProto, opset: int) -> int:
    """Replace in place every standard-domain node of the graph whose op has no version at
    ``opset`` (it was introduced later) and has a fixed function body by that body's nodes.

    Args:
        proto: the model (its default-domain opset import is the one it was traced at).
        opset: the opset it is to be written at.

    Returns:
        How many nodes were expanded.
    """
    traced = next((i.version for i in proto.opset_import if i.domain in _STANDARD), opset)
    names = itertools.count()
    return _expand_nodes(proto.graph.node, traced=traced, opset=opset, names=names)


def _expand_nodes(nodes, *, traced: int, opset: int, names) -> int:
    def expanded(node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
        body = _body(node, traced=traced, opset=opset)
        return None if body is None else _instantiate(body, node, next(names))

    return _rewrite(nodes, expanded)


def _rewrite(nodes, replace) -> int:
    """``nodes`` (a repeated NodeProto field) with each node for which ``replace`` returns a
    list replaced by that list, in place; returns how many were replaced."""
    out, count = [], 0
    for node in nodes:
        new = replace(node)
        out.extend([node] if new is None else new)
        count += new is not None
    if count:
        del nodes[:]
        nodes.extend(out)
    return count


def _body(node: onnx.NodeProto, *, traced: int, opset: int) -> onnx.FunctionProto | None:
    """The fixed function body of ``node``'s op if the op has no version at ``opset``."""
    if node.domain not in _STANDARD:
        return None
    try:
        schema = defs.get_schema(node.op_type, traced)
    except defs.SchemaError:
        return None
    if not schema.has_function or _exists_at(node.op_type, opset):
        return None  # the converter adapts an op that has a version at opset
    body = schema.function_body
    if any(a.ref_attr_name for n in body.node for a in n.attribute) or node.attribute:
        return None  # a body that reads the node's attributes: not instantiated here
    return body


def _exists_at(op_type: str, opset: int) -> bool:
    try:
        defs.get_schema(op_type, opset)
    except defs.SchemaError:
        return False
    return True


def _instantiate(body: onnx.FunctionProto, node: onnx.NodeProto, serial: int) -> list[onnx.NodeProto]:
    """``body``'s nodes with its formal inputs/outputs bound to ``node``'s and every
    intermediate value renamed uniquely (the node's name and a serial as prefix)."""
    prefix = f"{node.name or node.op_type}/_expanded{serial}/"
    rename = dict(zip(body.input, node.input))
    rename.update(zip(body.output, node.output))
    rename[""] = ""  # an omitted optional input stays omitted
    out = []
    for i, inner in enumerate(body.node):
        n = onnx.NodeProto()
        n.CopyFrom(inner)
        n.name = f"{prefix}{inner.op_type}_{i}"
        n.input[:] = [rename.setdefault(v, prefix + v) for v in inner.input]
        n.output[:] = [rename.setdefault(v, prefix + v) for v in inner.output]
        out.append(n)
    return out


def _convert_function(fn: onnx.FunctionProto, opset: int) -> onnx.FunctionProto:
    """A local function's body at ``opset``: the converter drops a model's functions, so
    each body goes through it alone, as the graph of a model of its own (inputs and
    outputs typed as float tensors: every body we write computes in float)."""
    float_value = lambda name: onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)  # noqa: E731
    graph = onnx.helper.make_graph(
        list(fn.node), fn.name, [float_value(v) for v in fn.input], [float_value(v) for v in fn.output]
    )
    model = onnx.helper.make_model(graph, opset_imports=list(fn.opset_import))
    converted = convert_opset(model, opset)
    out = onnx.FunctionProto()
    out.CopyFrom(fn)
    del out.node[:], out.opset_import[:]
    out.node.extend(converted.graph.node)
    out.opset_import.extend(converted.opset_import)
    return out
