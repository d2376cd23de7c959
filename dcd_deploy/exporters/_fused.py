"""``mode="fused"``: one channels-last ``dcd_deploy`` node per channel-fusion DCD layer.

This is the graph a runtime with a fused DCD kernel needs (the OpenVINO extension in
:mod:`dcd_deploy.openvino` runs it). Each 1x1 DCD layer (paper Eq. 5 with the
release's latent branch, in deploy form: BNs folded, Λ's and the SE gate's factor 2 in
the weights) becomes one node, with what follows it fused as an epilogue:

    y = act(DCD(x) + residual)       act: none, ReLU, ReLU6, SiLU, Hardswish, GELU, LeakyReLU, Mish or PReLU; residual: optional

The node reads and writes NHWC: a Transpose pair wraps it, which runtimes that keep
activations channels-last (OpenVINO's CPU plugin) merge into their own layout
changes, and consecutive fused layers pass NHWC straight on. The node is also a
model-local function whose body is standard ops (in NHWC), so ONNX Runtime and any
other runtime inline and run it. All bodies share the op type; they differ by their
ONNX overload.

Inputs of the node, in order (``docs/design.md#fused-op``; the one table is
:func:`._fused_contract.fused_inputs`): ``x``, ``residual`` (if fused), ``fc1``, ``gate``
(SE), ``scale_w`` (Λ), ``phi_w``, ``phi_b``, ``q``, ``q_b``, ``p``, ``w0``, ``bias``. Attributes: ``pool``, ``se``, ``attention``, ``residual``,
``activation``, ``activation_alpha`` (LeakyReLU's negative slope, a float; only with
``activation="leaky_relu"``), ``activation_slopes`` (PReLU's negative slope per output
channel, floats; only with ``activation="prelu"``), ``form`` (the cost model's pick; both forms compute the same function).

A k x k or strided channel-fusion layer (ResNet's 3x3 layers, the strided 1x1 ones;
paper Eq. 8 with the 1x1 dynamic residual at the centre tap) keeps ``W0 * x`` a standard
Conv (constant weights, no bias: the runtime's own convolution) and adds the rest with
one ``dcd_deploy.DCDConvEpilogue`` node in one pass over the output:

    y = act(Λ ⊙ conv + P Φ' (Q x_s + q_b) + bias + residual)

with ``x_s`` the conv's centre-tap pixels (stride ``stride``; offset 0 at the "same"
padding of the dilated kernel, ``d·(k // 2) - pad`` where the padding crops, as
"valid" does). Inputs: ``conv``, ``x``, ``residual`` (if fused), then the DCDPointwise
weights without ``w0``. Attributes: those of DCDPointwise without ``form``, plus
``stride``, ``offset``.
A joint-fusion layer (Eq. 8) also keeps its latent ``z = R(Q x)`` standard Convs and its
node has ``latent_input = 1``: ``z`` follows ``residual``, ``q`` and ``q_b`` are absent,
Φ' is L x L·L_k.

A k x k depthwise layer (paper Eq. 7) becomes one ``dcd_deploy.DCDDepthwise`` node in
the weight form: per sample ``K[c] = Λ[c] W0[c] + Σ_l (P Φ')[c, l] R[l]`` (C x k², tiny),
then one depthwise convolution of x with K, bias, residual and activation fused. Inputs:
``x``, ``residual`` (if fused), ``fc1``, ``gate``, ``scale_w``, ``phi_w``, ``phi_b``, ``p``,
``w0`` (C, k²), ``bias``, ``r`` (L, k²). Attributes: ``pool``, ``se``, ``attention``,
``residual``, ``activation``, ``kernel``, ``stride``, ``dilation``, ``pads`` (ONNX Conv's).

The epilogue is matched on the exported ONNX graph (:func:`plan`): a same-shape Add
and then a Relu, Clip(0, 6), HardSwish, SiLU (``Mul(t, Sigmoid(t))``, as torch.onnx
writes ``F.silu``), exact GELU (``Div``, ``Erf``, ``Add``, ``Mul``, ``Mul``, as it writes
``F.gelu``), LeakyRelu (``F.leaky_relu``, its ``alpha`` the slope: any finite one), a
PRelu of one constant slope (``nn.PReLU()``, fused as that LeakyReLU), a PRelu of a
constant slope per output channel (``nn.PReLU(C)``, MobileFaceNet's) or Mish, each only
where the tensor before it feeds nothing else (but the activation's own nodes).
A layer with B > 1 latent blocks (Eq. 6) takes the same ops as the dense layer with zeros
off the blocks (its kind's ``fused_constants``). The classifier (``DCDLinear``) is the
runtime's Gemm of W0 (+ b0) and one DCDConvEpilogue at 1x1 spatial size, its (B, C)
tensors reshaped to (B, 1, 1, C) (:func:`_emit_linear`). A layer that cannot be fused
(no channel fusion, a geometry the ops do not take) stays standard ops, and
:func:`why_not` (the kind's ``why_not_fused``) says why for the export's report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from torch import nn

from .._activations import ACTIVATIONS, parameter_entry
from ._builder import FunctionScope, GraphBuilder
from ._deploy_dcd import DeployDCD
from ._fused_contract import ACTIVATIONS as ACTIVATION_INPUTS
from ._fused_contract import DEPTHWISE, EPILOGUE, POINTWISE, fused_inputs
from ._kinds import Linear, prefers_runtime_conv

#: Op type of the fused node (domain ``dcd_deploy``).
OP_TYPE = POINTWISE
#: Op type of the fused node of a k x k or strided layer, after the standard Conv of W0.
EPILOGUE_OP_TYPE = EPILOGUE
#: Op type of the fused node of a depthwise layer.
DEPTHWISE_OP_TYPE = DEPTHWISE
#: Every fused op type.
OP_TYPES = (OP_TYPE, EPILOGUE_OP_TYPE, DEPTHWISE_OP_TYPE)
#: NCHW -> NHWC and back.
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


@dataclass(frozen=True)
class FusedLayer:
    """One fused node: the placeholder it replaces, the tensor added, the activation after
    (``alpha``: its parameter, LeakyReLU's negative slope or PReLU's slopes per channel; 0
    for the others).

    ``tail`` is the index of the last graph node folded in (the placeholder itself, the
    residual Add or the activation); the fused node is emitted there, where the residual
    is computed too (a downsample branch may come after the DCD layer in the graph).
    """

    node: int
    residual: str | None
    activation: str  # a name of dcd_deploy._activations.ACTIVATIONS
    tail: int
    folded: tuple[int, ...] = ()
    alpha: float | tuple[float, ...] = 0.0


def fusable(layer: nn.Module) -> bool:
    """A channel-fusion DCD layer (conv with an odd kernel, or the classifier): a fused op's kind."""
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


def on_features(layer: nn.Module) -> bool:
    """Whether a fusable layer reads and writes (B, C) features (the classifier), not images."""
    return isinstance(layer.form_kind, Linear)


def why_not(layer: nn.Module) -> str | None:
    """Why a deploy-form DCD layer is not fused (None when it is fusable)."""
    if not isinstance(layer, DeployDCD):
        return "not a DCD layer"
    if layer.mode_pads is not None:  # the ops pad with zeros (and the pool reads the unpadded input)
        return f"padding_mode {layer.padding_mode!r}"
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
        activation, alpha = "none", 0.0
        t = nodes[tail].output[0]
        act = _activation_after(nodes, t, consumers, const_of, graph_outputs, taken, shape_of(t))
        if act is not None:
            activation, after = act
            tail = after[-1]
            folded.extend(after)
            alpha = _parameter(nodes[tail], activation, const_of)
        taken.update(folded)
        out[index] = FusedLayer(index, residual, activation, tail, tuple(folded), alpha)
    return out


def _same_shape(a, b) -> bool:
    """Equal shapes, every dim known (an int, or the same symbolic name)."""
    return a is not None and a == b and None not in a


def _activation_after(nodes, t: str, consumers, const_of, graph_outputs, taken, shape=None):
    """The activation applied to tensor ``t`` (of ``shape``, NCHW or (B, C)) and nothing
    else reading it: ``(name, node indices folded, last one last)``, or None. SiLU and GELU
    are a chain of nodes from ``t`` ending in ``Mul(t, chain)`` (:func:`_gated`)."""
    users = consumers.get(t, [])
    if t in graph_outputs or any(u in taken for u in users) or not users:
        return None
    if len(users) == 1:
        act = _activation(nodes[users[0]], const_of, shape)
        return (act, (users[0],)) if act is not None else None
    if len(users) != 2:
        return None
    for last in users:
        first = users[0] if last == users[1] else users[1]
        chain = _chain(nodes, first, last, t, consumers, graph_outputs)
        name = chain and _gated(nodes, chain, t, const_of)
        if name:
            return name, (*chain, last)
    return None


#: The longest chain :func:`_chain` follows (GELU's: Div, Erf, Add, Mul).
_MAX_CHAIN = 4


def _chain(nodes, first: int, last: int, t: str, consumers, graph_outputs) -> list[int] | None:
    """The nodes from ``first`` on, each read only by the next, up to ``Mul(t, ·)`` at
    ``last`` (not included), or None."""
    chain = [first]
    while len(chain) <= _MAX_CHAIN:
        out = nodes[chain[-1]].output[0]
        users = consumers.get(out, [])
        if out in graph_outputs or len(users) != 1:
            return None
        if users[0] == last:
            ok = _standard(nodes[last], "Mul") and sorted(nodes[last].input) == sorted([t, out])
            return chain if ok else None
        chain.append(users[0])
    return None


def _gated(nodes, chain: list[int], t: str, const_of) -> str | None:
    """The activation ``t · g(t)`` whose ``g`` is ``chain``: SiLU (``Sigmoid``, as torch.onnx
    writes ``F.silu``) or GELU (``Div(t, √2)``, ``Erf``, ``Add 1``, ``Mul 0.5``, as it
    writes ``F.gelu``; ``Mul(t, 1/√2)`` for the division too), or None."""
    chain_nodes = [nodes[i] for i in chain]
    if not all(n.domain in ("", "ai.onnx") for n in chain_nodes) or t not in chain_nodes[0].input:
        return None
    ops = [n.op_type for n in chain_nodes]
    if ops == ["Sigmoid"]:
        return "silu"
    if ops not in (["Div", "Erf", "Add", "Mul"], ["Mul", "Erf", "Add", "Mul"]):
        return None
    scale, _, one, half = (_scalar_beside(n, i, chain_nodes, t, const_of) for i, n in enumerate(chain_nodes))
    want = math.sqrt(2.0) if ops[0] == "Div" else math.sqrt(0.5)
    close = [(scale, want), (one, 1.0), (half, 0.5)]
    return "gelu" if all(v is not None and math.isclose(v, w, rel_tol=1e-6) for v, w in close) else None


def _scalar_beside(node, i: int, chain_nodes, t: str, const_of) -> float | None:
    """The constant scalar ``node`` (the ``i``-th of the chain) takes beside the chain's
    tensor, or None (also for a one-input node)."""
    came = t if i == 0 else chain_nodes[i - 1].output[0]
    others = [n for n in node.input if n != came]
    if len(others) != 1 or (node.op_type == "Div" and node.input[0] != came):
        return None
    value = const_of(others[0])
    return float(value.reshape(())) if value is not None and value.size == 1 else None


def _standard(node, op_type: str) -> bool:
    return node.op_type == op_type and node.domain in ("", "ai.onnx")


def _leaky_alpha(node, const_of) -> float | None:
    """The negative slope of a LeakyRelu node (its ``alpha`` attribute, ONNX's default 0.01
    without one) or of a PRelu node of one constant slope (``nn.PReLU()``: the same
    function); None for a PRelu of a slope per channel or of a slope computed in the graph."""
    if node.op_type == "PRelu":
        slope = const_of(node.input[1]) if len(node.input) == 2 else None
        return float(slope.reshape(())) if slope is not None and slope.size == 1 else None
    return next((a.f for a in node.attribute if a.name == "alpha"), 0.01)


def _channel_slopes(node, const_of, shape) -> tuple[float, ...] | None:
    """The slopes of a PRelu node whose constant slope has one value per channel of its
    input (``shape``: NCHW or (B, C), the channels known), laid along that axis as
    ``nn.PReLU(C)`` exports them ((C, 1, 1) for an image, (C,) for features), all finite;
    else None (a slope along another axis is not a per-channel one)."""
    slope = const_of(node.input[1]) if node.op_type == "PRelu" and len(node.input) == 2 else None
    if slope is None or shape is None or len(shape) not in (2, 4) or not isinstance(shape[1], int):
        return None
    if slope.ndim > len(shape) or slope.size != shape[1] or slope.size < 2:
        return None
    aligned = (1,) * (len(shape) - slope.ndim) + tuple(slope.shape)
    if aligned[1] != shape[1] or not np.all(np.isfinite(slope)):
        return None
    return tuple(float(v) for v in slope.reshape(-1))


def _parameter(node, activation: str, const_of) -> float | tuple[float, ...]:
    """The parameter of the matched activation ``node``: LeakyReLU's slope, PReLU's slopes."""
    if activation == "leaky_relu":
        return _leaky_alpha(node, const_of)
    if activation == "prelu":
        slope = const_of(node.input[1])
        return tuple(float(v) for v in slope.reshape(-1))
    return 0.0


def _activation(node, const_of, shape=None) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Relu":
        return "relu"
    if node.op_type in ("LeakyRelu", "PRelu"):
        alpha = _leaky_alpha(node, const_of)
        if alpha is not None:
            return "leaky_relu" if math.isfinite(alpha) else None
        return "prelu" if _channel_slopes(node, const_of, shape) is not None else None
    if node.op_type == "HardSwish":
        return "hardswish"
    if node.op_type == "Mish":  # F.mish at opset 18 (below it torch.onnx writes the chain: not matched)
        return "mish"
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
        # NCHW tensors that are a Transpose of their NHWC twin (a fused output seen NCHW):
        # elementwise ops on them run on the twin instead (._sink)
        self.derived: set[str] = set()

    def to_nhwc(self, name: str, path: str) -> str:
        if name not in self.nhwc:
            self.nhwc[name] = self.g.scope(path).op("Transpose", [name], perm=TO_NHWC)
        return self.nhwc[name]

    def to_nchw(self, name: str, path: str) -> str:
        out = self.g.scope(path).op("Transpose", [name], perm=TO_NCHW)
        self.nhwc[out] = name  # a following fused layer reads the NHWC tensor directly
        self.derived.add(out)
        return out

    def to_pixel(self, name: str, path: str) -> str:
        """(B, C) features as one NHWC pixel (B, 1, 1, C), made once per tensor."""
        if name not in self.nhwc:
            s = self.g.scope(path)
            self.nhwc[name] = s.op("Reshape", [name, s.ints("pixel_shape", [0, 1, 1, -1])])  # (B, 1, 1, C)
        return self.nhwc[name]

    def from_pixel(self, name: str, path: str) -> str:
        s = self.g.scope(path)
        out = s.op("Reshape", [name, s.ints("features_shape", [0, -1])])  # (B, C)
        self.nhwc[out] = name
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
    *,
    alpha: float = 0.0,
) -> str:
    """Emit one fused node (NCHW in and out); returns the output name. ``alpha``: the
    activation's parameter (LeakyReLU's negative slope), for one that takes it."""
    if on_features(layer):
        return _emit_linear(g, layout, layer, activation, path, x, residual, alpha=alpha)
    if layer.form_kind.fused_op(layer) == DEPTHWISE_OP_TYPE:
        return _emit_depthwise(g, layout, layer, activation, path, x, residual, in_shape, alpha=alpha)
    if around_conv(layer, in_shape):
        return _emit_around_conv(g, layout, layer, activation, path, x, residual, in_shape, alpha=alpha)
    attrs = dict(
        pool=layer.pool_size,
        se=int(layer.se),
        attention=int(layer.scale_w is not None),
        residual=int(residual is not None),
        **_activation_attrs(activation, alpha),
        form=layer.strategy,
    )
    activations = {"x": layout.to_nhwc(x, path)}
    if residual is not None:
        activations["residual"] = layout.to_nhwc(residual, path)
    fs, w = _inputs(g, path, layer, fused_inputs(attrs, OP_TYPE), activations)
    out = _body(fs, layer, w, in_shape, residual=residual is not None, activation=activation, alpha=alpha)
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
    *,
    alpha: float,
) -> str:
    """A k x k / strided layer: the standard Conv of W0 (NCHW, constant weights, no bias)
    and, for joint fusion, the standard Convs of its latent z, then one DCDConvEpilogue
    node (NHWC); returns the NCHW output name."""
    kind, scope = layer.form_kind, g.scope(path)
    conv = scope.op(
        "Conv", [x, scope.const("w0", layer.w0)], group=layer.groups, **kind.conv_attrs(layer)
    )  # (B, C_out, H', W'); grouped: B > 1 blocks
    attrs = dict(
        pool=layer.pool_size,
        se=int(layer.se),
        attention=int(layer.scale_w is not None),
        residual=int(residual is not None),
        **_activation_attrs(activation, alpha),
        **kind.fused_attrs(layer),
    )
    activations = {"conv": layout.to_nhwc(conv, path), "x": layout.to_nhwc(x, path)}
    if residual is not None:
        activations["residual"] = layout.to_nhwc(residual, path)
    z = kind.emit_fused_latent(layer, scope, x)  # (B, L·L_k, H', W') or None
    if z is not None:
        activations["z"] = layout.to_nhwc(z, path)
    fs, w = _inputs(g, path, layer, fused_inputs(attrs, EPILOGUE_OP_TYPE), activations)
    out = _body(
        fs,
        layer,
        w,
        in_shape,
        residual=residual is not None,
        activation=activation,
        alpha=alpha,
        stride=attrs.get("stride", 1),
        offset=attrs.get("offset", 0),
    )
    y = fs.finish(out, kind=EPILOGUE_OP_TYPE, op_type=EPILOGUE_OP_TYPE, attrs=attrs)
    return layout.to_nchw(y, path)


def _emit_depthwise(
    g: GraphBuilder,
    layout: Layout,
    layer: DeployDCD,
    activation: str,
    path: str,
    x: str,
    residual: str | None,
    in_shape,
    *,
    alpha: float,
) -> str:
    """A depthwise layer: one DCDDepthwise node (NHWC); returns the NCHW output name."""
    attrs = dict(
        pool=layer.pool_size,
        se=int(layer.se),
        attention=int(layer.scale_w is not None),
        residual=int(residual is not None),
        **_activation_attrs(activation, alpha),
        **layer.form_kind.fused_attrs(layer),
    )
    activations = {"x": layout.to_nhwc(x, path)}
    if residual is not None:
        activations["residual"] = layout.to_nhwc(residual, path)
    fs, w = _inputs(g, path, layer, fused_inputs(attrs, DEPTHWISE_OP_TYPE), activations)
    out = _depthwise_body(fs, layer, w, in_shape)
    out = _finish(fs, out, w, residual=residual is not None, activation=activation, alpha=alpha)
    y = fs.finish(out, kind=DEPTHWISE_OP_TYPE, op_type=DEPTHWISE_OP_TYPE, attrs=attrs)
    return layout.to_nchw(y, path)


def _emit_linear(
    g: GraphBuilder,
    layout: Layout,
    layer: DeployDCD,
    activation: str,
    path: str,
    x: str,
    residual: str | None,
    *,
    alpha: float,
) -> str:
    """The classifier (``DCDLinear``): the runtime's Gemm of W0 (+ b0, which Λ scales), then
    one DCDConvEpilogue at 1x1 spatial size (its global pool of one pixel is x itself);
    (B, C_in) in, (B, C_out) out."""
    s = g.scope(path)
    b0 = [s.const("b0", layer.b0)] if layer.b0 is not None else []
    conv = s.op("Gemm", [x, s.const("w0", layer.w0)] + b0, transB=1)  # (B, C_out)
    attrs = dict(
        pool=1,
        se=int(layer.se),
        attention=int(layer.scale_w is not None),
        residual=int(residual is not None),
        **_activation_attrs(activation, alpha),
        stride=1,
        offset=0,
    )
    activations = {"conv": layout.to_pixel(conv, path), "x": layout.to_pixel(x, path)}
    if residual is not None:
        activations["residual"] = layout.to_pixel(residual, path)
    fs, w = _inputs(g, path, layer, fused_inputs(attrs, EPILOGUE_OP_TYPE), activations)
    out = _body(fs, layer, w, None, residual=residual is not None, activation=activation, alpha=alpha, stride=1, pool=1)
    y = fs.finish(out, kind=EPILOGUE_OP_TYPE, op_type=EPILOGUE_OP_TYPE, attrs=attrs)
    return layout.from_pixel(y, path)


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
        if name in ACTIVATION_INPUTS:
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
    alpha: float = 0.0,
    stride: int | None = None,
    offset: int = 0,
    pool: int | None = None,
) -> str:
    """The node's function body: the layer in NHWC with standard ops. With ``stride``
    (DCDConvEpilogue) the static term is the body's ``conv`` input and the latent path
    reads x's centre-tap pixels, every ``stride``-th row and column from ``offset``
    (:func:`_centre_taps`), or, without
    ``q`` (``latent_input``), the body's ``z`` input with Φ' of L x L·L_k. ``pool``
    overrides the layer's (the classifier's one pixel: 1)."""
    lat = layer.latent_dim
    lz = lat if "q" in w else lat * layer.kernel_latent_dim  # Φ' columns: L, or L·L_k for joint fusion
    y = _features(fs, layer, w, in_shape, pool)
    phi = fs.op("Gemm", [y, w["phi_w"], w["phi_b"]], transB=1)  # (B, L²)
    phi = fs.op("Reshape", [phi, fs.ints("phi_shape", [0, lat, lz])])  # (B, L, Lz)
    phi_t = fs.op("Unsqueeze", [fs.op("Transpose", [phi], perm=[0, 2, 1]), fs.ints("axis", [1])])  # (B, 1, Lz, L)
    xs = "x"
    if "q" not in w:
        z = "z"  # (B, H', W', Lz): the graph's R(Q x)
    elif stride is not None and (stride != 1 or offset):
        xs = _centre_taps(fs, stride, offset)  # (B, H', W', C_in)
    if "q" in w:
        z = fs.op("Add", [fs.op("MatMul", [xs, fs.op("Transpose", [w["q"]], perm=[1, 0])]), w["q_b"]])  # (B, H', W', L)
    u = fs.op("MatMul", [z, phi_t])  # (B, H, W, L): Φ' z per pixel
    dyn = fs.op("MatMul", [u, fs.op("Transpose", [w["p"]], perm=[1, 0])])  # (B, H, W, C_out)
    if stride is None:
        out = fs.op("MatMul", ["x", fs.op("Transpose", [w["w0"]], perm=[1, 0])])  # (B, H, W, C_out)
    else:
        out = "conv"  # (B, H', W', C_out): W0 * x, the runtime's convolution
    if "scale_w" in w:
        out = fs.op(
            "Mul", [out, fs.op("Unsqueeze", [_lam(fs, w, y), fs.ints("hw", [1, 2])])]
        )  # Λ per (sample, channel)
    return _finish(fs, fs.op("Add", [out, dyn]), w, residual=residual, activation=activation, alpha=alpha)


def _centre_taps(fs: FunctionScope, stride: int, offset: int) -> str:
    """``x[:, offset::stride, offset::stride]`` cut to the conv's H' x W' (B, H', W', C_in):
    at offset 0 ("same" padding) that is every ``stride``-th pixel to the end; a crop
    ("valid") ends ``H' · stride`` after ``offset``, as the conv's output says."""
    big = 2**62  # Slice clamps the end to the size
    ends = fs.ints("s_ends", [big, big])
    if offset:
        hw = fs.op("Slice", [fs.op("Shape", ["conv"]), fs.ints("hw_start", [1]), fs.ints("hw_end", [3])])  # (2,)
        ends = fs.op(
            "Add", [fs.op("Mul", [hw, fs.ints("hw_stride", [stride] * 2)]), fs.ints("hw_offset", [offset] * 2)]
        )
    return fs.op(
        "Slice",
        ["x", fs.ints("s_starts", [offset, offset]), ends, fs.ints("s_axes", [1, 2]), fs.ints("s_steps", [stride] * 2)],
    )


def _features(fs: FunctionScope, layer: DeployDCD, w: dict[str, str], in_shape, pool: int | None = None) -> str:
    """The branch's gated features (B, S) from the pooled x, as every fused op's body has them
    (``pool`` overrides the layer's)."""
    pooled = _pooled(fs, layer.pool_size if pool is None else pool, in_shape)
    y = fs.op("Gemm", [pooled, w["fc1"]], transB=1)  # (B, S)
    if layer.se:
        return fs.op(
            "Mul", [y, fs.op("HardSigmoid", [fs.op("Gemm", [y, w["gate"]], transB=1)], alpha=1.0 / 6.0, beta=0.5)]
        )
    return fs.op("Relu", [y])


def _lam(fs: FunctionScope, w: dict[str, str], y: str) -> str:
    """Λ (B, C_out) from the features."""
    return fs.op("HardSigmoid", [fs.op("Gemm", [y, w["scale_w"]], transB=1)], alpha=1.0 / 6.0, beta=0.5)


def _finish(
    fs: FunctionScope, out: str, w: dict[str, str], *, residual: bool, activation: str, alpha: float = 0.0
) -> str:
    """The epilogue of an NHWC body: the bias, the residual, the activation (``alpha``: its
    parameter, if it takes one)."""
    out = fs.op("Add", [out, w["bias"]])
    if residual:
        out = fs.op("Add", [out, "residual"])
    return ACTIVATIONS[activation].write(fs.op, fs.local, out, alpha)


def _activation_attrs(activation: str, alpha: float | tuple[float, ...]) -> dict:
    """The node's ``activation`` attribute, and its parameter's (``activation_alpha``, a
    float, or ``activation_slopes``, floats) for an activation that takes one."""
    attrs: dict = {"activation": activation}
    return attrs | parameter_entry(activation, alpha)


def _depthwise_body(fs: FunctionScope, layer: DeployDCD, w: dict[str, str], in_shape) -> str:
    """DCDDepthwise's body before the epilogue, (B, H', W', C): with constant kernels (the
    latent form, as the standard-op export has it), ``Λ ⊙ (W0 * x) + Σ_l (P Φ')[:, l] (R_l * x)``."""
    c, lat, k = layer.c_out, layer.latent_dim, layer.kernel2[0]
    geometry = dict(kernel_shape=[k, k], strides=list(layer.stride2), pads=list(layer.pads), group=c)
    if tuple(layer.dilation2) != (1, 1):
        geometry["dilations"] = list(layer.dilation2)
    y = _features(fs, layer, w, in_shape)
    xn = fs.op("Transpose", ["x"], perm=TO_NCHW)  # (B, C, H, W): ONNX Conv is channels-first
    out = fs.op("Conv", [xn, fs.op("Reshape", [w["w0"], fs.ints("w0_shape", [c, 1, k, k])])], **geometry)
    if "scale_w" in w:
        out = fs.op("Mul", [out, fs.op("Unsqueeze", [_lam(fs, w, y), fs.ints("hw", [2, 3])])])  # (B, C, H', W')
    r = fs.op("Reshape", [w["r"], fs.ints("r_1lkk", [1, lat, k, k])])
    r = fs.op("Expand", [r, fs.ints("r_clkk", [c, lat, k, k])])  # R for every channel
    r = fs.op("Reshape", [r, fs.ints("r_shape", [c * lat, 1, k, k])])
    z = fs.op("Conv", [xn, r], **geometry)  # (B, C·L, H', W'), channel c·L + l = R_l * x_c
    z = fs.op("Reshape", [z, fs.ints("z_shape", [0, c, lat, -1])])  # (B, C, L, N)
    phi = fs.op("Gemm", [y, w["phi_w"], w["phi_b"]], transB=1)  # (B, L²)
    phi = fs.op("Reshape", [phi, fs.ints("phi_shape", [0, lat, lat])])  # (B, L, L)
    pm = fs.op("Unsqueeze", [fs.op("MatMul", [w["p"], phi]), fs.ints("axis", [2])])  # (B, C, 1, L)
    dyn = fs.op("Reshape", [fs.op("MatMul", [pm, z]), fs.op("Shape", [out])])  # (B, C, 1, N) -> (B, C, H', W')
    return fs.op("Transpose", [fs.op("Add", [out, dyn])], perm=TO_NHWC)  # (B, H', W', C)
