// A DCDConvEpilogue node with form "weight": the k x k layer as one OpenVINO convolution
// with the per-sample weights (docs/design.md "Fused op", performance.md "Round six")
//
//   W(x) = Λ ⊙ W0 + centre(P Φ' Q),   out = act(W(x) * x + P Φ' q_b + bias + residual)
//
// the same function as the epilogue computes (Λ ⊙ (W0 * x) + P Φ' (Q x_s + q_b) + ...),
// with the dynamic 1x1 term at the centre tap of the weights instead of a second pass over
// the output. Standard ops only: the branch (pooling, the FCs, Λ and Φ'), the forming of
// W(x), a GroupConvolution with one group per sample (weights that differ per sample) and
// the bias, residual and activation after it, which the CPU plugin fuses into the
// convolution where it can. OpenVINO repacks runtime weights at every call, so this pays
// only for small W0 (the exporter's rule: _kinds.prefers_runtime_weights).
#pragma once

#include <openvino/core/node_output.hpp>

#include "op_contract.hpp"

namespace dcd {

// The layer's output (NHWC, as the node's) built on the graph's Conv of W0 that feeds the
// node's conv input (through its NCHW -> NHWC Transpose), or an empty Output when that input
// is not such a Conv with constant weights and dilation 1 (the caller then keeps the epilogue).
// `inputs` are the ONNX node's, in the order of I (the contract's, not packed).
ov::Output<ov::Node> runtime_weights_conv(const ov::OutputVector& inputs, const InputLayout& I, const FusedAttrs& a);

}  // namespace dcd
