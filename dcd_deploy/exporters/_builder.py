"""A small ONNX graph builder: nodes named by module path, constants as initializers.

Each emitted node is named ``<module path>/<OpType>[_n]`` so Netron shows which layer
it came from. :class:`FunctionScope` collects one DCD layer's nodes into a model-local
function: weights become function inputs (bound to the main graph's initializers at
the call site) and small shape vectors become Constant nodes inside the body.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

#: Model-local function domain of ``mode="function"`` exports.
DOMAIN = "dcd_deploy"
DOMAIN_VERSION = 1


def _array(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


class GraphBuilder:
    """Nodes and initializers of the main graph.

    Args:
        opset: the default-domain opset version (decides a few op signatures).
    """

    def __init__(self, opset: int):
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.functions: dict[tuple, onnx.FunctionProto] = {}
        self._names: set[str] = set()
        self._count = 0

    def unique(self, base: str) -> str:
        name, i = base, 0
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    def scope(self, path: str) -> Scope:
        return Scope(self, path)


class Scope:
    """Emits into the main graph under one module path."""

    def __init__(self, graph: GraphBuilder, path: str):
        self.graph, self.path = graph, path or "model"

    @property
    def opset(self) -> int:
        return self.graph.opset

    def const(self, hint: str, value, dtype=np.float32) -> str:
        """A constant weight (an initializer of the main graph)."""
        name = self.graph.unique(f"{self.path}.{hint}")
        self.graph.initializers.append(numpy_helper.from_array(_array(value).astype(dtype), name))
        return name

    def ints(self, hint: str, values) -> str:
        """A small int64 vector (shapes, axes)."""
        return self.const(hint, np.asarray(values, dtype=np.int64), np.int64)

    def nchw(self, hint: str, lead: list[int], h, w, like: str) -> str:
        """Reshape target ``[*lead, h, w]``: a constant when the sizes are known, else
        ``lead`` joined to the height and width of ``like`` (read with Shape at run time)."""
        if isinstance(h, int) and isinstance(w, int):
            return self.ints(hint, [*lead, h, w])
        hw = self.op("Slice", [self.op("Shape", [like]), self.ints(f"{hint}_from", [2]), self.ints(f"{hint}_to", [4])])
        return self.op("Concat", [self.ints(hint, lead), hw], axis=0)

    def op(self, op_type: str, inputs: list[str], *, domain: str = "", **attrs) -> str:
        name = self.graph.unique(f"{self.path}/{op_type}")
        out = name + ":0"
        self._append(helper.make_node(op_type, inputs, [out], name=name, domain=domain or None, **attrs))
        return out

    def _append(self, node: onnx.NodeProto) -> None:
        self.graph.nodes.append(node)


class FunctionScope(Scope):
    """Emits one layer's body into a model-local function of domain ``dcd_deploy``.

    Weights become function inputs; identical bodies (same ops, attributes and shape
    constants) share one FunctionProto.
    """

    def __init__(self, graph: GraphBuilder, path: str, x: str):
        super().__init__(graph, path)
        self.formals = ["x"]
        self.actuals = [x]
        self.body: list[onnx.NodeProto] = []
        self._local = 0

    def const(self, hint: str, value, dtype=np.float32) -> str:
        actual = super().const(hint, value, dtype)
        formal = f"w{len(self.formals)}_{hint}"
        self.formals.append(formal)
        self.actuals.append(actual)
        return formal

    def ints(self, hint: str, values) -> str:
        return self.local(hint, values, np.int64)

    def local(self, hint: str, value, dtype=np.float32) -> str:
        """A small constant inside the body (a Constant node, not a function input)."""
        out = self._fresh()
        tensor = numpy_helper.from_array(np.asarray(value, dtype=dtype), out)
        self.body.append(helper.make_node("Constant", [], [out], value=tensor))
        return out

    def input(self, formal: str, actual: str) -> str:
        """A further activation input of the function (after ``x``, before the weights)."""
        self.formals.append(formal)
        self.actuals.append(actual)
        return formal

    def _fresh(self) -> str:
        self._local += 1
        return f"t{self._local}"

    def op(self, op_type: str, inputs: list[str], *, domain: str = "", **attrs) -> str:
        out = self._fresh()
        self.body.append(helper.make_node(op_type, inputs, [out], domain=domain or None, **attrs))
        return out

    def finish(self, out: str, kind: str, *, op_type: str | None = None, attrs: dict | None = None) -> str:
        """Register (or reuse) the function and emit its call in the main graph.

        Args:
            out: the body's output name.
            kind: the function's name; with ``op_type``, the prefix of its overload.
            op_type: one op type for every body of a kind (the fused kernels' contract):
                bodies then differ by their ONNX overload (IR 10), ``<kind>_<n>``.
            attrs: node attributes, declared by the function (its body does not read them).
        """
        attrs = dict(attrs or {})
        body = [n.SerializeToString() for n in self.body]
        key = (kind, op_type, tuple(sorted(attrs)), len(self.formals), tuple(body), out)
        fn = self.graph.functions.get(key)
        if fn is None:
            suffix = f"{kind}_{len(self.graph.functions)}"
            renamed = [
                helper.make_node(
                    n.op_type, list(n.input), ["y" if o == out else o for o in n.output], domain=n.domain or None
                )
                for n in self.body
            ]
            for src, dst in zip(self.body, renamed):
                dst.attribute.extend(src.attribute)
            fn = helper.make_function(
                DOMAIN,
                op_type or suffix,
                self.formals,
                ["y"],
                renamed,
                [helper.make_opsetid("", self.graph.opset)],
                attributes=sorted(attrs) or None,
                overload=suffix if op_type else None,
            )
            self.graph.functions[key] = fn
        name = self.graph.unique(f"{self.path}/{fn.overload or fn.name}")
        call = helper.make_node(
            fn.name, self.actuals, [name + ":0"], name=name, domain=DOMAIN, overload=fn.overload or None, **attrs
        )
        self.graph.nodes.append(call)
        return name + ":0"
