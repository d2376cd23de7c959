"""``mode="fused"``: one channels-last ``dcd_deploy`` node per channel-fusion DCD layer.

This is the graph a runtime with a fused DCD kernel needs (the OpenVINO extension in
:mod:`dcd_deploy.openvino` runs it). Each 1x1 DCD layer (paper Eq. 5 with the
release's latent branch, in deploy form: BNs folded, Λ's and the SE gate's factor 2 in
the weights) becomes one node, with what follows it fused as an epilogue:

    y = act(DCD(x) + residual)       act: none, ReLU or ReLU6; residual: optional

The node reads and writes NHWC: a Transpose pair wraps it, which runtimes that keep
activations channels-last (OpenVINO's CPU plugin) merge into their own layout
changes, and consecutive fused layers pass NHWC straight on. The node is also a
model-local function whose body is standard ops (in NHWC), so ONNX Runtime and any
other runtime inline and run it. All bodies share the op type; they differ by their
ONNX overload.

Inputs of the node, in order (``docs/design.md#fused-op``; the one table is
:func:`._fused_contract.fused_inputs`): ``x``, ``residual`` (if fused), ``fc1``, ``gate``
(SE), ``scale_w`` (Λ), ``phi_w``, ``phi_b``, ``q``, ``q_b``, ``p``, ``w0``, ``bias``. Attributes: ``pool``, ``se``, ``attention``, ``residual``,
``activation``, ``form`` (the cost model's pick; both forms compute the same function).

A k x k or strided channel-fusion layer (ResNet's 3x3 layers, the strided 1x1 ones;
paper Eq. 8 with the 1x1 dynamic residual at the centre tap) keeps ``W0 * x`` a standard
Conv (constant weights, no bias: the runtime's own convolution) and adds the rest with
one ``dcd_deploy.DCDConvEpilogue`` node in one pass over the output:

    y = act(Λ ⊙ conv + P Φ' (Q x_s + q_b) + bias + residual)

with ``x_s`` the conv's centre-tap pixels (stride ``stride``, offset 0 at padding k//2).
Inputs: ``conv``, ``x``, ``residual`` (if fused), then the DCDPointwise weights without
``w0``. Attributes: those of DCDPointwise without ``form``, plus ``stride``, ``offset``.

The epilogue is matched on the exported ONNX graph (:func:`plan`): a same-shape Add
and then a Relu or Clip(0, 6), each only where the tensor before it feeds nothing else.
Other DCD kinds (depthwise, joint, several latent blocks, the classifier) stay standard
ops in this mode: they are not fused yet, and :func:`why_not` (the kind's
``why_not_fused``) says why for the export's report.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ._builder import FunctionScope, GraphBuilder
from ._deploy_dcd import DeployDCD
from ._fused_contract import ACTIVATIONS, EPILOGUE, POINTWISE, fused_inputs
from ._kinds import prefers_runtime_conv

#: Op type of the fused node (domain ``dcd_deploy``).
OP_TYPE = POINTWISE
#: Op type of the fused node of a k x k or strided layer, after the standard Conv of W0.
EPILOGUE_OP_TYPE = EPILOGUE
#: Both fused op types.
OP_TYPES = (OP_TYPE, EPILOGUE_OP_TYPE)
#: NCHW -> NHWC and back.
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


@dataclass(frozen=True)
class FusedLayer:
    """One fused node: the placeholder it replaces, the tensor added, the activation after.

    ``tail`` is the index of the last graph node folded in (the placeholder itself, the
    residual Add or the activation); the fused node is emitted there, where the residual
    is computed too (a downsample branch may come after the DCD layer in the graph).
    """

    node: int
    residual: str | None
    activation: str  # "none", "relu" or "relu6"
    tail: int
    folded: tuple[int, ...] = ()


def fusable(layer: nn.Module) -> bool:
    """A channel-fusion DCD layer with one latent block and an odd kernel: a fused op's kind."""
    return isinstance(layer, DeployDCD) and why_not(layer) is None


def around_conv(layer: DeployDCD, in_shape=None) -> bool:
    """Whether a fusable layer is emitted as Conv + DCDConvEpilogue (k x k or strided)
    rather than one DCDPointwise node (1x1, stride 1): a 1x1 stride-1 layer too when the
    cost rule (:func:`._kinds.prefers_runtime_conv`) says the runtime's Conv is faster at
    its shape (``in_shape``, NCHW; symbolic sizes: DCDPointwise)."""
    op = layer.form_kind.fused_op(layer)
    if op == EPILOGUE_OP_TYPE:
        return True
    if op != OP_TYPE or in_shape is None or len(in_shape) != 4:
        return False
    h, w = in_shape[2], in_shape[3]
    if not (isinstance(h, int) and isinstance(w, int)):
        return False
    c_out, c_in = layer.w0.shape[:2]
    return prefers_runtime_conv(c_in=int(c_in), c_out=int(c_out), hw=h * w)


def why_not(layer: nn.Module) -> str | None:
    """Why a deploy-form DCD layer is not fused (None when it is fusable)."""
    if not isinstance(layer, DeployDCD):
        return "not a DCD layer"
    return layer.form_kind.why_not_fused(layer)


def plan(nodes, layers: dict[int, nn.Module], consumers, shape_of, const_of, graph_outputs) -> dict[int, FusedLayer]:
    """Which placeholders fuse, and what with: ``{placeholder index: FusedLayer}``.

    Args:
        nodes: the exported graph's nodes, in order.
        layers: placeholder node index -> its fusable deploy layer.
        consumers: tensor name -> indices of the nodes reading it.
        shape_of: tensor name -> shape tuple (None entries symbolic) or None.
        const_of: tensor name -> constant value (numpy) or None.
        graph_outputs: names of the graph's outputs (never folded away).
    """
    out: dict[int, FusedLayer] = {}
    taken: set[int] = set()

    def only_consumer(name: str):
        users = consumers.get(name, [])
        if len(users) != 1 or name in graph_outputs or users[0] in taken:
            return None
        return users[0]

    for index in layers:
        tail, residual, folded = index, None, []
        y = nodes[index].output[0]
        user = only_consumer(y)
        if user is not None and nodes[user].op_type == "Add" and nodes[user].domain in ("", "ai.onnx"):
            add = nodes[user]
            other = [i for i in add.input if i != y]
            if len(add.input) == 2 and len(other) == 1 and _same_shape(shape_of(y), shape_of(other[0])):
                residual = other[0]  # a broadcast add is not a residual
                tail = user
                folded.append(user)
        activation = "none"
        user = only_consumer(nodes[tail].output[0])
        if user is not None:
            act = _activation(nodes[user], const_of)
            if act is not None:
                activation, tail = act, user
                folded.append(user)
        taken.update(folded)
        out[index] = FusedLayer(index, residual, activation, tail, tuple(folded))
    return out


def _same_shape(a, b) -> bool:
    """Equal shapes, every dim known (an int, or the same symbolic name)."""
    return a is not None and a == b and None not in a


def _activation(node, const_of) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Relu":
        return "relu"
    if node.op_type == "Clip" and len(node.input) == 3:
        lo, hi = (const_of(n) for n in node.input[1:])
        if (
            lo is not None
            and hi is not None
            and lo.size == 1
            and hi.size == 1
            and float(lo) == 0.0
            and float(hi) == 6.0
        ):
            return "relu6"
    return None


class Layout:
    """The main graph's Transposes between NCHW and NHWC, each made once per tensor."""

    def __init__(self, g: GraphBuilder):
        self.g = g
        self.nhwc: dict[str, str] = {}  # NCHW tensor -> its NHWC twin

    def to_nhwc(self, name: str, path: str) -> str:
        if name not in self.nhwc:
            self.nhwc[name] = self.g.scope(path).op("Transpose", [name], perm=TO_NHWC)
        return self.nhwc[name]

    def to_nchw(self, name: str, path: str) -> str:
        out = self.g.scope(path).op("Transpose", [name], perm=TO_NCHW)
        self.nhwc[out] = name  # a following fused layer reads the NHWC tensor directly
        return out


def emit(
    g: GraphBuilder,
    layout: Layout,
    layer: DeployDCD,
    activation: str,
    path: str,
    x: str,
    residual: str | None,
    in_shape,
) -> str:
    """Emit one fused node (NCHW in and out); returns the output name."""
    if around_conv(layer, in_shape):
        return _emit_around_conv(g, layout, layer, activation, path, x, residual, in_shape)
    attrs = dict(
        pool=layer.pool_size,
        se=int(layer.se),
        attention=int(layer.scale_w is not None),
        residual=int(residual is not None),
        activation=activation,
        form=layer.strategy,
    )
    activations = {"x": layout.to_nhwc(x, path)}
    if residual is not None:
        activations["residual"] = layout.to_nhwc(residual, path)
    fs, w = _inputs(g, path, layer, fused_inputs(attrs, OP_TYPE), activations)
    out = _body(fs, layer, w, in_shape, residual=residual is not None, activation=activation)
    y = fs.finish(out, kind=f"DCDPointwise{layer.strategy.capitalize()}", op_type=OP_TYPE, attrs=attrs)
    return layout.to_nchw(y, path)


def _emit_around_conv(
    g: GraphBuilder,
    layout: Layout,
    layer: DeployDCD,
    activation: str,
    path: str,
    x: str,
    residual: str | None,
    in_shape,
) -> str:
    """A k x k / strided layer: the standard Conv of W0 (NCHW, constant weights, no bias),
    then one DCDConvEpilogue node (NHWC); returns the NCHW output name."""
    k, stride = layer.kernel_size, layer.stride
    conv = g.scope(path).op(
        "Conv", [x, g.scope(path).const("w0", layer.w0)], kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4
    )  # (B, C_out, H', W')
    attrs = dict(
        pool=layer.pool_size,
        se=int(layer.se),
        attention=int(layer.scale_w is not None),
        residual=int(residual is not None),
        activation=activation,
        stride=stride,
        offset=0,
    )
    activations = {"conv": layout.to_nhwc(conv, path), "x": layout.to_nhwc(x, path)}
    if residual is not None:
        activations["residual"] = layout.to_nhwc(residual, path)
    fs, w = _inputs(g, path, layer, fused_inputs(attrs, EPILOGUE_OP_TYPE), activations)
    out = _body(fs, layer, w, in_shape, residual=residual is not None, activation=activation, stride=stride)
    y = fs.finish(out, kind=EPILOGUE_OP_TYPE, op_type=EPILOGUE_OP_TYPE, attrs=attrs)
    return layout.to_nchw(y, path)


def _inputs(
    g: GraphBuilder, path: str, layer: DeployDCD, names: list[str], activations: dict[str, str]
) -> tuple[FunctionScope, dict[str, str]]:
    """The node's function scope with its inputs in the contract's order (``names``);
    returns it and the body's names of the constant inputs."""
    fs = FunctionScope(g, path, activations[names[0]])
    fs.formals[0] = names[0]
    constants = layer.form_kind.fused_constants(layer)
    w = {}
    for name in names[1:]:
        if name in ACTIVATIONS:
            fs.input(name, activations[name])
        else:
            w[name] = fs.const(name, constants[name])
    return fs, w


def _reduce_mean_hw(fs: FunctionScope, x: str) -> str:
    """Mean over H and W of an NHWC tensor: (B, C)."""
    if fs.opset >= 18:  # axes became an input
        return fs.op("ReduceMean", [x, fs.ints("hw", [1, 2])], keepdims=0)
    return fs.op("ReduceMean", [x], axes=[1, 2], keepdims=0)


def _pooled(fs: FunctionScope, pool: int, in_shape) -> str:
    """Global mean (B, C), or PyTorch's adaptive 2x2 bins flattened channel-major (B, C·4)."""
    if pool == 1:
        return _reduce_mean_hw(fs, "x")
    h, w = in_shape[2], in_shape[3]
    bins = []
    for i in range(2):
        for j in range(2):
            r0, r1 = i * h // 2, -(-(i + 1) * h // 2)
            c0, c1 = j * w // 2, -(-(j + 1) * w // 2)
            window = fs.op(
                "Slice", ["x", fs.ints("starts", [r0, c0]), fs.ints("ends", [r1, c1]), fs.ints("axes", [1, 2])]
            )  # (B, h_i, w_j, C)
            bins.append(fs.op("Unsqueeze", [_reduce_mean_hw(fs, window), fs.ints("axis", [2])]))  # (B, C, 1)
    return fs.op("Flatten", [fs.op("Concat", bins, axis=2)], axis=1)  # (B, C·4), index c·4 + i·2 + j


def _body(
    fs: FunctionScope,
    layer: DeployDCD,
    w: dict[str, str],
    in_shape,
    *,
    residual: bool,
    activation: str,
    stride: int | None = None,
) -> str:
    """The node's function body: the layer in NHWC with standard ops. With ``stride``
    (DCDConvEpilogue) the static term is the body's ``conv`` input and the latent path
    reads x's centre-tap pixels, every ``stride``-th row and column from 0."""
    lat = layer.latent_dim
    y = fs.op("Gemm", [_pooled(fs, layer.pool_size, in_shape), w["fc1"]], transB=1)  # (B, S)
    if layer.se:
        y = fs.op(
            "Mul", [y, fs.op("HardSigmoid", [fs.op("Gemm", [y, w["gate"]], transB=1)], alpha=1.0 / 6.0, beta=0.5)]
        )
    else:
        y = fs.op("Relu", [y])
    phi = fs.op("Gemm", [y, w["phi_w"], w["phi_b"]], transB=1)  # (B, L²)
    phi = fs.op("Reshape", [phi, fs.ints("phi_shape", [0, lat, lat])])  # (B, L, L)
    phi_t = fs.op("Unsqueeze", [fs.op("Transpose", [phi], perm=[0, 2, 1]), fs.ints("axis", [1])])  # (B, 1, L, L)
    xs = "x"
    if stride is not None and stride != 1:
        big = 2**62  # Slice clamps the end to the size
        xs = fs.op(
            "Slice",
            [
                "x",
                fs.ints("s_starts", [0, 0]),
                fs.ints("s_ends", [big, big]),
                fs.ints("s_axes", [1, 2]),
                fs.ints("s_steps", [stride, stride]),
            ],
        )  # (B, H', W', C_in)
    z = fs.op("Add", [fs.op("MatMul", [xs, fs.op("Transpose", [w["q"]], perm=[1, 0])]), w["q_b"]])  # (B, H', W', L)
    u = fs.op("MatMul", [z, phi_t])  # (B, H, W, L): Φ' z per pixel
    dyn = fs.op("MatMul", [u, fs.op("Transpose", [w["p"]], perm=[1, 0])])  # (B, H, W, C_out)
    if stride is None:
        out = fs.op("MatMul", ["x", fs.op("Transpose", [w["w0"]], perm=[1, 0])])  # (B, H, W, C_out)
    else:
        out = "conv"  # (B, H', W', C_out): W0 * x, the runtime's convolution
    if "scale_w" in w:
        lam = fs.op("HardSigmoid", [fs.op("Gemm", [y, w["scale_w"]], transB=1)], alpha=1.0 / 6.0, beta=0.5)
        out = fs.op("Mul", [out, fs.op("Unsqueeze", [lam, fs.ints("hw", [1, 2])])])  # Λ per (sample, channel)
    out = fs.op("Add", [fs.op("Add", [out, dyn]), w["bias"]])
    if residual:
        out = fs.op("Add", [out, "residual"])
    if activation == "relu":
        out = fs.op("Relu", [out])
    elif activation == "relu6":
        out = fs.op("Clip", [out, fs.local("min", 0.0), fs.local("max", 6.0)])
    return out
