"""``mode="fused"``: an elementwise op between fused layers runs on their NHWC tensors.

A fused node writes NHWC and a Transpose gives the rest of the graph its NCHW view
(:class:`._fused.Layout`). An activation the fused ops do not take (ELU, SELU, PReLU, ...)
or an Add of two fused layers' outputs then runs on that NCHW view, and the next fused
layer transposes the result back. OpenVINO's CPU plugin merges such Transposes into its
own layout changes only where the neighbours already agree on a layout; between an
elementwise op and an extension node they stay real copies, some of them reference
code (a user's UNet at 96x96 with LeakyReLU between its DCD layers: 0.5 ms of its
4.9 ms in Transposes, the model slower fused than as standard ops; docs/performance.md).

So the elementwise op is written on the NHWC tensors instead, and one Transpose after it
gives the NCHW view its old name: a following fused layer reads the NHWC result
directly, and the two Transposes that were around the op are gone. Only ops whose result
does not depend on the layout move: elementwise ops whose tensor inputs are all such
NCHW views of NHWC tensors, or constants (a per-channel constant is transposed with
them). Anything else is copied as it was.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ._builder import GraphBuilder
from ._fused import TO_NCHW, TO_NHWC, Layout

#: Default-domain ops computed element by element (with numpy broadcasting of their inputs).
ELEMENTWISE = frozenset(
    {
        # one tensor (Clip's bounds are scalars)
        *("Abs", "Ceil", "Celu", "Clip", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish"),
        *("Identity", "LeakyRelu", "Log", "Mish", "Neg", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid"),
        *("Sign", "Softplus", "Softsign", "Sqrt", "Tanh", "ThresholdedRelu"),
        # broadcasting
        *("Add", "Div", "Max", "Mean", "Min", "Mul", "Pow", "PRelu", "Sub", "Sum"),
    }
)


def sink(node: onnx.NodeProto, *, g: GraphBuilder, layout: Layout, name, const_of, scope: str) -> bool:
    """Write ``node`` on the NHWC twins of its inputs and one Transpose back, if it moves.

    Args:
        node: a node of the exported graph, not yet copied.
        g: the graph being written.
        layout: the fused layers' tensors and their twins.
        name: the graph's name of an exported tensor (after the layers' renames).
        const_of: a constant input's value, or None.
        scope: the module path the copy is named after.

    Returns:
        Whether ``node`` was written here (else the caller copies it as it is).
    """
    if node.op_type not in ELEMENTWISE or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return False
    twins = {t for t in node.input if t and name(t) in layout.derived}
    consts = {t: const_of(t) for t in node.input if t and t not in twins}
    if not twins or any(v is None or v.ndim > 4 for v in consts.values()):
        return False  # nothing to move, or a tensor computed in NCHW, or not 4-D broadcastable
    node_name = g.unique(f"{scope}/{node.op_type}")
    inputs = []
    for t in node.input:
        value = consts.get(t)
        if t in twins:
            inputs.append(layout.nhwc[name(t)])
        else:  # "" (an absent optional input), or a constant
            inputs.append(t if value is None or value.size == 1 else _nhwc_constant(g, node_name, t, value))
    out = node.output[0]
    nhwc_out = g.unique(f"{out}/nhwc")
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    del copy.input[:], copy.output[:]
    copy.input.extend(inputs)
    copy.output.append(nhwc_out)
    copy.name = node_name
    keep = [p for p in copy.metadata_props if p.key == "namespace"]
    del copy.metadata_props[:]
    copy.metadata_props.extend(keep)
    g.nodes.append(copy)
    g.nodes.append(helper.make_node("Transpose", [nhwc_out], [out], name=g.unique(f"{node_name}/nchw"), perm=TO_NCHW))
    layout.nhwc[out] = nhwc_out
    layout.derived.add(out)
    return True


def _nhwc_constant(g: GraphBuilder, node_name: str, t: str, value: np.ndarray) -> str:
    """The constant ``value`` (broadcast against NCHW) laid out to broadcast against NHWC."""
    four = value.reshape((1,) * (4 - value.ndim) + value.shape)  # numpy broadcasting aligns the last axes
    return g.scope(node_name).const(f"{t}_nhwc", np.ascontiguousarray(four.transpose(TO_NHWC)), dtype=value.dtype)
