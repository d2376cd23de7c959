"""Ways a lowering bug shows in an ONNX file, applied to a correct export (in place).

Imported as ``_tamper`` (see ``_zoo``). Each function takes a ``ModelProto`` and breaks
it the way a lowering mistake would; :data:`TAMPERS` names them.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _mid(nodes):
    """The middle one: a layer deep inside the network, neither first nor last."""
    return nodes[len(nodes) // 2]


def _initializer(proto: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in proto.graph.initializer if t.name == name)


def _edit_initializer(proto, name, fn):
    tensor = _initializer(proto, name)
    tensor.CopyFrom(numpy_helper.from_array(fn(numpy_helper.to_array(tensor)).astype(np.float32), name))


def _convs(proto):
    return [n for n in proto.graph.node if n.op_type == "Conv" and len(n.input) == 3]


def negate_weight(proto):
    _edit_initializer(proto, _mid(_convs(proto)).input[1], np.negative)


def scale_weight(proto):
    # a DCD layer's own W0 where there is one
    dynamic = [t.name for t in proto.graph.initializer if t.name.endswith(".w0")]
    name = _mid(dynamic) if dynamic else _mid(_convs(proto)).input[1]
    _edit_initializer(proto, name, lambda w: w * 1.05)


def drop_bias(proto):
    node = _mid(_convs(proto))
    del node.input[2]


def transpose_phi(proto):
    reshapes = [n for n in proto.graph.node if n.op_type == "Reshape" and n.input[1].endswith("phi_shape")]
    if not reshapes:
        raise ValueError("no Φ in this model (not a DCD layer)")
    node = _mid(reshapes)
    rank = len(numpy_helper.to_array(_initializer(proto, node.input[1])))
    out = node.output[0]
    node.output[0] = out + "/untransposed"
    index = list(proto.graph.node).index(node)
    perm = [*range(rank - 2), rank - 1, rank - 2]  # (.., L, L) -> Φᵀ
    proto.graph.node.insert(index + 1, helper.make_node("Transpose", [node.output[0]], [out], perm=perm,
                                                       name=node.name + "/tamper"))


TAMPERS = {"negate": negate_weight, "scale_5pct": scale_weight, "drop_bias": drop_bias,
           "transpose_phi": transpose_phi}
