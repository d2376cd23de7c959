"""Our emission in PyTorch's graph: each placeholder node becomes its layer's ONNX.

``torch.onnx`` wrote every standard op; each dynamic layer is one placeholder node
(:mod:`._placeholder`) carrying its module path. :func:`emit_layers` walks the graph
once, copies its nodes (renamed ``<module path>/<OpType>`` after the exporter's scope
metadata, so a node names the layer it came from) and in place of each placeholder
writes the layer's own emission:

* ``standard``: the deploy layer's standard ops (:meth:`DeployDCD.emit`,
  :meth:`DeployMixture.emit`);
* ``function``: each DCD layer as one ``dcd_deploy`` node, a model-local function;
* ``fused``: each fusable DCD layer as one channels-last ``DCDPointwise`` node with the
  residual Add and the Relu / Clip(0, 6) that follow it in the graph as its epilogue
  (:mod:`._fused`); other DCD layers as in ``standard``, each with the reason.

It also writes the layer record (``dcd_deploy.layers``) the layer-wise parity check
reads: one entry per layer emitted here, and per Conv2d / Linear module of the model
found through the exporter's scope metadata.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import onnx
from onnx import helper, numpy_helper
from torch import nn

from .._activations import parameter_entry
from . import _fused, _sink
from ._builder import DOMAIN, DOMAIN_VERSION, FunctionScope, GraphBuilder
from ._deploy_dcd import DeployDCD
from ._deploy_mixture import DeployMixture
from ._placeholder import DOMAIN as PLACEHOLDER_DOMAIN

_STANDARD = ("", "ai.onnx")


@dataclass
class Emitted:
    """What :func:`emit_layers` did besides rewriting the graph."""

    layers: list[dict] = field(default_factory=list)
    #: DCD layers written as ``DCDPointwise`` nodes (fused mode).
    fused: list[str] = field(default_factory=list)
    #: DCD layer path -> why it stayed standard ops (fused mode).
    unfused: dict[str, str] = field(default_factory=dict)


def _shape(vi: onnx.ValueInfoProto):
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)


def _scope(node: onnx.NodeProto) -> str | None:
    """The innermost module path the exporter recorded for a node, or None."""
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(p.value)
            except (ValueError, SyntaxError):
                return None
            return scopes[-2] if len(scopes) >= 2 else ""
    return None


def _kind(module: nn.Module) -> tuple[str, str | None]:
    if isinstance(module, DeployDCD):
        return "DCD", module.strategy
    if isinstance(module, DeployMixture):
        return ("DYConv" if module.routing == "softmax" else "CondConv"), None
    inner = getattr(module, "layer", None)  # a wrapper (the floor variants) emits for it
    return _kind(inner) if inner is not None else ("DCD", None)


def emit_layers(
    proto: onnx.ModelProto,
    *,
    emitters: dict[str, nn.Module],
    mode: str,
    opset: int,
    modules: dict[str, nn.Module],
    folded_bn: dict[str, str],
) -> Emitted:
    """Replace every placeholder of ``proto`` (in place) by its layer's emission.

    Args:
        proto: the exported model; its placeholders carry a ``path`` attribute.
        emitters: module path -> the deploy layer (anything with ``emit``).
        mode: ``standard``, ``function`` or ``fused``.
        opset: the default-domain opset of ``proto``.
        modules: the deploy model's modules by path (for the Conv / Linear records).
        folded_bn: layer path -> the BatchNorm folded into it.
    """
    walk = _Walk(proto.graph, emitters, mode, opset, folded_bn)
    for i, node in enumerate(walk.nodes):
        walk.visit(i, node)
    g, graph = walk.g, proto.graph
    # A graph output a layer produced keeps its name (an Identity from our tensor).
    for out in graph.output:
        if out.name in walk.alias:
            g.nodes.append(
                helper.make_node("Identity", [walk.alias[out.name]], [out.name], name=g.unique(f"output/{out.name}"))
            )
    result = walk.result
    result.layers = _with_static_layers(
        result.layers, g.nodes, walk.renamed_scope, modules, folded_bn, walk.consts, walk.graph_outputs
    )
    _write_back(proto, g, walk.graph_outputs, set(walk.alias))
    return result


class _Walk:
    """One pass over the exported graph's nodes, writing the new graph into ``g``."""

    def __init__(
        self, graph: onnx.GraphProto, emitters: dict[str, nn.Module], mode: str, opset: int, folded_bn: dict[str, str]
    ):
        self.nodes = list(graph.node)
        self.emitters, self.mode, self.folded_bn = emitters, mode, folded_bn
        self.shapes = {vi.name: _shape(vi) for vi in list(graph.value_info) + list(graph.input) + list(graph.output)}
        self.consts = {t.name: t for t in graph.initializer}
        for n in self.nodes:
            if n.op_type == "Constant" and n.domain in _STANDARD and n.attribute and n.attribute[0].name == "value":
                self.consts[n.output[0]] = n.attribute[0].t
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for name in n.input:
                self.consumers.setdefault(name, []).append(i)
        self.graph_outputs = {o.name for o in graph.output}
        self.g = GraphBuilder(opset)
        for names in (
            [n.name for n in self.nodes],
            [o for n in self.nodes for o in n.output],
            [i for n in self.nodes for i in n.input],
            self.consts,
            [i.name for i in graph.input],
        ):
            self.g._names.update(names)
        self.placeholders = _placeholders(self.nodes, emitters)
        self.result = Emitted()
        plan = self._plan() if mode == "fused" else {}
        self.tails = {spec.tail: spec for spec in plan.values()}
        self.skipped = {j for spec in plan.values() for j in (spec.node, *spec.folded) if j != spec.tail}
        self.alias: dict[str, str] = {}
        self.layout = _fused.Layout(self.g)
        self.renamed_scope: dict[int, str | None] = {}

    def const_of(self, name: str):
        t = self.consts.get(name)
        return None if t is None else numpy_helper.to_array(t)

    def name(self, t: str) -> str:
        return self.alias.get(t, t)

    def _plan(self) -> dict[int, _fused.FusedLayer]:
        fusable = {}
        for i, path in self.placeholders.items():
            layer = self.emitters[path]
            if not isinstance(layer, DeployDCD):
                continue
            reason = _fused.why_not(layer)
            if reason is None:
                fusable[i] = layer
            else:
                self.result.unfused[path] = reason
        return _fused.plan(self.nodes, fusable, self.consumers, self.shapes.get, self.const_of, self.graph_outputs)

    def visit(self, i: int, node: onnx.NodeProto) -> None:
        if i in self.skipped:
            return
        if i in self.tails:
            self._fused_layer(node, self.tails[i])
        elif i in self.placeholders:
            self._layer(node, self.placeholders[i])
        else:
            self._copy(node)

    def _fused_layer(self, node: onnx.NodeProto, spec: _fused.FusedLayer) -> None:
        ph = self.nodes[spec.node]
        path = self.placeholders[spec.node]
        layer, layout = self.emitters[path], self.layout
        x = self.name(ph.input[0])
        residual = self.name(spec.residual) if spec.residual is not None else None
        in_shape = self.shapes.get(ph.input[0])
        y = _fused.emit(self.g, layout, layer, spec.activation, path, x, residual, in_shape, alpha=spec.alpha)
        self.alias[node.output[0]] = y
        self.result.fused.append(path)
        # the classifier's record keeps its (B, C) tensors: the per-layer check feeds them to the layer
        twin = (lambda t: t) if _fused.on_features(layer) else layout.nhwc.__getitem__
        self.result.layers.append(
            _record(
                path,
                layer,
                twin(x),
                twin(y),
                self.folded_bn,
                layout="NHWC",
                residual=twin(residual) if residual is not None else None,
                activation=spec.activation,
                alpha=spec.alpha,
            )
        )

    def _layer(self, node: onnx.NodeProto, path: str) -> None:
        layer = self.emitters[path]
        x = self.name(node.input[0])
        in_shape, out_shape = self.shapes.get(node.input[0]), self.shapes.get(node.output[0])
        if in_shape is None or out_shape is None:
            raise AssertionError(f"no shape known around {path}")
        if self.mode == "function" and isinstance(layer, DeployDCD):
            fs = FunctionScope(self.g, path, x)
            out = layer.emit(fs, "x", in_shape, out_shape)
            y = fs.finish(out, kind=f"DCD{layer.kind.capitalize()}{layer.strategy.capitalize()}")
        else:
            y = layer.emit(self.g.scope(path), x, in_shape, out_shape)
        self.alias[node.output[0]] = y
        self.result.layers.append(_record(path, layer, x, y, self.folded_bn))

    def _copy(self, node: onnx.NodeProto) -> None:
        perm, layout, g = _perm(node), self.layout, self.g
        if perm == _fused.TO_NHWC and self.name(node.input[0]) in layout.nhwc:
            # the model's own NCHW -> NHWC of a fused layer's output: read the NHWC twin
            self.alias[node.output[0]] = layout.nhwc[self.name(node.input[0])]
            return
        scope = _scope(node)
        if self.mode == "fused" and _sink.sink(
            node, g=g, layout=layout, name=self.name, const_of=self.const_of, scope=scope or "model"
        ):
            return
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        if _spatial_mean(node, self.shapes, self.const_of):  # as GlobalAveragePool: ORT keeps its blocked layout
            copy = helper.make_node("GlobalAveragePool", [node.input[0]], list(node.output), name=node.name)
            copy.metadata_props.extend(node.metadata_props)
        for k, inp in enumerate(copy.input):
            if inp in self.alias:
                copy.input[k] = self.alias[inp]
        if perm == _fused.TO_NCHW and copy.output[0] not in layout.nhwc:
            # a fused layer reading this reads its NHWC input instead
            layout.nhwc[copy.output[0]] = copy.input[0]
            layout.derived.add(copy.output[0])
        self.renamed_scope[len(g.nodes)] = scope
        copy.name = g.unique(f"{scope or 'model'}/{node.op_type}")
        keep = [p for p in copy.metadata_props if p.key == "namespace"]
        del copy.metadata_props[:]
        copy.metadata_props.extend(keep)
        g.nodes.append(copy)


def _placeholders(nodes, emitters: dict[str, nn.Module]) -> dict[int, str]:
    """Node index -> module path of every placeholder."""
    placeholders: dict[int, str] = {}
    for i, n in enumerate(nodes):
        if n.domain == PLACEHOLDER_DOMAIN:
            path = next(a.s.decode() for a in n.attribute if a.name == "path")
            if path not in emitters:
                raise AssertionError(f"placeholder for unknown layer {path!r}")
            placeholders[i] = path
    return placeholders


def _write_back(proto: onnx.ModelProto, g: GraphBuilder, graph_outputs: set[str], gone: set[str]) -> None:
    """Put the new nodes, initializers, functions and opset imports into ``proto``."""
    graph = proto.graph
    del graph.node[:]
    graph.node.extend(_live(g.nodes, graph_outputs))
    graph.initializer.extend(g.initializers)
    # constants only a folded node read (a fused activation's Clip bounds)
    read = {t for n in graph.node for t in n.input} | graph_outputs
    kept_init = [t for t in graph.initializer if t.name in read]
    if len(kept_init) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept_init)
    # Shapes of replaced tensors no longer hold (fused NHWC names, renamed outputs).
    kept = [vi for vi in graph.value_info if vi.name not in gone]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    imports = [o for o in proto.opset_import if o.domain != PLACEHOLDER_DOMAIN]
    if not any(o.domain in _STANDARD for o in imports):  # a model of dynamic layers alone
        imports.insert(0, helper.make_opsetid("", g.opset))
    if g.functions:
        imports.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
        proto.functions.extend(g.functions.values())
    del proto.opset_import[:]
    proto.opset_import.extend(imports)


def _spatial_mean(node: onnx.NodeProto, shapes, const_of) -> bool:
    """A ``ReduceMean`` over H and W of a 4-D tensor, keeping its dims (``x.mean((2, 3),
    keepdim=True)``, ``F.adaptive_avg_pool2d(x, 1)``): ``GlobalAveragePool`` computes the same.
    ONNX Runtime runs the latter in its blocked (NCHWc) layout and the former after a layout
    change: static MobileNetV2 x0.5 took 3.31 ms with the exporter's ReduceMean against
    3.11 ms with GlobalAveragePool (one thread, interleaved, AMD EPYC)."""
    if node.op_type != "ReduceMean" or node.domain not in _STANDARD:
        return False
    attrs = {a.name: a for a in node.attribute}
    if "keepdims" in attrs and attrs["keepdims"].i != 1:
        return False
    shape = shapes.get(node.input[0])
    if shape is None or len(shape) != 4:
        return False
    if "axes" in attrs:  # opset < 18
        axes = list(attrs["axes"].ints)
    elif len(node.input) > 1 and node.input[1]:
        value = const_of(node.input[1])
        if value is None:
            return False
        axes = [int(v) for v in value.reshape(-1)]
    else:
        return False
    return sorted(a % 4 for a in axes) == [2, 3]


def _perm(node: onnx.NodeProto) -> list[int] | None:
    if node.op_type != "Transpose" or node.domain not in _STANDARD:
        return None
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def _live(nodes, graph_outputs) -> list:
    """``nodes`` without those whose outputs nothing reads (a fused layer's NCHW copy that
    only a following fused layer would have read, in its NHWC form)."""
    used = set(graph_outputs)
    keep = []
    for n in reversed(nodes):
        if n.domain in _STANDARD and n.op_type == "Transpose" and not any(o in used for o in n.output):
            continue
        used.update(n.input)
        keep.append(n)
    return keep[::-1]


def _record(
    path: str,
    layer: nn.Module,
    x: str,
    y: str,
    folded_bn: dict[str, str],
    *,
    layout: str = "NCHW",
    residual: str | None = None,
    activation: str = "none",
    alpha: float | tuple[float, ...] = 0.0,
) -> dict:
    kind, form = _kind(layer)
    parameter = parameter_entry(activation, alpha)
    return {
        "path": path,
        "kind": kind,
        "form": form,
        "input": x,
        "output": y,
        "bn": folded_bn.get(path),
        "residual": residual,
        "activation": activation,
        **parameter,
        "layout": layout,
    }


def _with_static_layers(
    layers: list[dict], nodes, scopes: dict[int, str | None], modules, folded_bn, consts, graph_outputs
) -> list[dict]:
    """Add the Conv2d / Linear records: per call of a module, its nodes with one input and one
    output outside."""
    groups: dict[str, list[int]] = {}
    for i, scope in scopes.items():
        if scope and isinstance(modules.get(scope), (nn.Conv2d, nn.Linear)):
            groups.setdefault(scope, []).append(i)
    if not groups:
        return layers
    consumers: dict[str, set[int]] = {}
    for i, n in enumerate(nodes):
        for t in n.input:
            consumers.setdefault(t, set()).add(i)
    constant_outputs = {n.output[0] for n in nodes if n.op_type == "Constant"}
    position = {}  # a static record's output -> its last node
    for path, members in groups.items():
        for call in _calls(members, nodes):
            inside = set(call)
            produced = {o for i in call for o in nodes[i].output}
            ins = list(
                dict.fromkeys(
                    t
                    for i in call
                    for t in nodes[i].input
                    if t and t not in produced and t not in consts and t not in constant_outputs
                )
            )
            outs = [t for t in produced if t in graph_outputs or consumers.get(t, set()) - inside]
            # a call computes the layer's product; torch.export also files the output-size
            # arithmetic of a symbolic side (Add, Div on sym_size_int) under the conv's path:
            # a one-in one-out chain of ints, no layer
            if len(ins) != 1 or len(outs) != 1 or not any(nodes[i].op_type in _PRODUCTS for i in call):
                continue
            position[outs[0]] = max(call)
            layers.append(_static_record(path, modules[path], ins[0], outs[0], folded_bn))
    # graph order: our layers by their output's producer, static ones by their last node
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    return sorted(layers, key=lambda e: position.get(e["output"], producer.get(e["output"], -1)))


#: The ops a Conv2d or Linear call computes its product with (torch.onnx's, before onnxsim).
_PRODUCTS = frozenset({"Conv", "Gemm", "MatMul"})


def _calls(members: list[int], nodes) -> list[list[int]]:
    """A module's nodes split into its calls: a Conv2d or Linear used twice in ``forward``
    has two sets of nodes under one path, connected within a call, not across calls."""
    root = {i: i for i in members}

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    made_by = {o: i for i in members for o in nodes[i].output}
    for i in members:
        for t in nodes[i].input:
            if t in made_by:
                root[find(i)] = find(made_by[t])
    calls: dict[int, list[int]] = {}
    for i in members:
        calls.setdefault(find(i), []).append(i)
    return list(calls.values())


def _static_record(path: str, module: nn.Module, x: str, y: str, folded_bn) -> dict:
    return {
        "path": path,
        "kind": "Conv" if isinstance(module, nn.Conv2d) else "Linear",
        "form": None,
        "input": x,
        "output": y,
        "bn": folded_bn.get(path),
        "residual": None,
        "activation": "none",
        "layout": "NCHW",
    }


def drop_missing(layers: list[dict], proto: onnx.ModelProto) -> list[dict]:
    """The records whose tensors all exist in ``proto`` (onnxsim may fold some away)."""
    names = {o for n in proto.graph.node for o in n.output} | {i.name for i in proto.graph.input}
    return [e for e in layers if all(e[k] is None or e[k] in names for k in ("input", "output", "residual"))]
