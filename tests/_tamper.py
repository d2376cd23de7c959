"""Ways a lowering bug shows in an ONNX file, applied to a correct export (in place).

Imported as ``_tamper`` (see ``_zoo``). Each function takes a ``ModelProto``, breaks it
the way a lowering mistake would, and returns the module path of the layer it broke (the
layer a layer-wise FAIL must name); :data:`TAMPERS` names them. Layers are found by the
names the exporter gives nodes (``<module path>/<OpType>``) and weights
(``<module path>.<what>``).
"""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _mid(items):
    """The middle one: a layer deep inside the network, neither first nor last."""
    return items[len(items) // 2]


def _initializer(proto: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in proto.graph.initializer if t.name == name)


def _edit_initializer(proto, name, fn):
    tensor = _initializer(proto, name)
    tensor.CopyFrom(numpy_helper.from_array(fn(numpy_helper.to_array(tensor)).astype(np.float32), name))


def _owner(name: str) -> str:
    """Module path of a node (``path/Op``) or weight (``path.what``, maybe ``_n``-suffixed)."""
    return name.split("/")[0] if "/" in name else name.rsplit(".", 1)[0]


def _weights(proto, what: str) -> list[str]:
    """Initializers named ``<path>.<what>`` (or ``<what>_n``), in graph order."""
    pattern = re.compile(rf"\.{re.escape(what)}(_\d+)?$")
    return [t.name for t in proto.graph.initializer if pattern.search(t.name)]


def _convs(proto):
    return [n for n in proto.graph.node if n.op_type == "Conv" and len(n.input) == 3]


def negate_weight(proto):
    node = _mid(_convs(proto))
    _edit_initializer(proto, node.input[1], np.negative)
    return _owner(node.name)


def scale_weight(proto):
    # a DCD layer's own W0 where there is one
    name = _mid(_weights(proto, "w0") or [n.input[1] for n in _convs(proto)])
    _edit_initializer(proto, name, lambda w: w * 1.05)
    return _owner(name)


def drop_bias(proto):
    node = _mid(_convs(proto))
    del node.input[2]
    return _owner(node.name)


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
    proto.graph.node.insert(
        index + 1, helper.make_node("Transpose", [node.output[0]], [out], perm=perm, name=node.name + "/tamper")
    )
    return _owner(node.name)


def negate_head(proto):
    """One layer's dynamic head negated: Φ's (DCD), else Λ's, else the routing's (DY-Conv,
    CondConv): a sign lost in a lowering."""
    for weight, bias in (
        ("fc_phi", "fc_phi_b"),
        ("phi_w", "phi_b"),
        ("fc_scale", None),
        ("scale_w", None),
        ("fc2_w", "fc2_b"),
        ("fc1_w", "fc1_b"),
    ):
        names = _weights(proto, weight)
        if names:
            name = _mid(names)
            _edit_initializer(proto, name, np.negative)
            path = _owner(name)
            if bias and f"{path}.{bias}" in {t.name for t in proto.graph.initializer}:
                _edit_initializer(proto, f"{path}.{bias}", np.negative)
            return path
    raise ValueError("no dynamic head in this model")


def scale_classifier(proto):
    """The classifier's W0 (a DCD classifier) or weight scaled by 5%."""
    names = [
        t.name
        for t in proto.graph.initializer
        if t.name.startswith(("classifier", "fc")) and t.name.rsplit(".", 1)[-1] in ("w0", "weight")
    ]
    name = names[-1]
    _edit_initializer(proto, name, lambda w: w * 1.05)
    return _owner(name)


def perturb_p(proto):
    """One DCD layer's P off by 1%."""
    name = _mid(_weights(proto, "p"))
    _edit_initializer(proto, name, lambda w: w * 1.01)
    return _owner(name)


TAMPERS = {
    "negate": negate_weight,
    "scale_5pct": scale_weight,
    "drop_bias": drop_bias,
    "transpose_phi": transpose_phi,
    "negate_head": negate_head,
    "classifier_w0_5pct": scale_classifier,
    "p_1pct": perturb_p,
}
#: Tampers that need a DCD layer (Φ, P).
DCD_ONLY = frozenset({"transpose_phi", "p_1pct"})
