// DCDConvEpilogue's weight form as standard OpenVINO ops (runtime_weights.hpp).
#include "runtime_weights.hpp"

#include "dcd_kernels.hpp"

#include <openvino/op/adaptive_avg_pool.hpp>
#include <openvino/op/add.hpp>
#include <openvino/op/avg_pool.hpp>
#include <openvino/op/clamp.hpp>
#include <openvino/op/constant.hpp>
#include <openvino/op/convolution.hpp>
#include <openvino/op/group_conv.hpp>
#include <openvino/op/hsigmoid.hpp>
#include <openvino/op/matmul.hpp>
#include <openvino/op/multiply.hpp>
#include <openvino/op/reduce_mean.hpp>
#include <openvino/op/relu.hpp>
#include <openvino/op/reshape.hpp>
#include <openvino/op/transpose.hpp>

#include <memory>
#include <vector>

namespace dcd {
namespace {

using ov::Output;
using Node = ov::Node;

Output<Node> ints(const std::vector<int64_t>& v) {
    return ov::op::v0::Constant::create(ov::element::i64, {v.size()}, v);
}

Output<Node> reshape(const Output<Node>& x, const std::vector<int64_t>& shape) {
    // special_zero: a 0 copies the input's dimension (the batch stays symbolic)
    return std::make_shared<ov::op::v1::Reshape>(x, ints(shape), true);
}

Output<Node> transpose(const Output<Node>& x, const std::vector<int64_t>& perm) {
    return std::make_shared<ov::op::v1::Transpose>(x, ints(perm));
}

Output<Node> matmul(const Output<Node>& a, const Output<Node>& b, bool transpose_b = false) {
    return std::make_shared<ov::op::v0::MatMul>(a, b, false, transpose_b);
}

Output<Node> add(const Output<Node>& a, const Output<Node>& b) { return std::make_shared<ov::op::v1::Add>(a, b); }

Output<Node> mul(const Output<Node>& a, const Output<Node>& b) { return std::make_shared<ov::op::v1::Multiply>(a, b); }

// The pooled x of the branch, from the node's own NHWC x (the plugin cancels the
// transposes, and the tensor stays in the model for the layer-wise parity check, which
// reads it as the layer's input): (B, C_in), or PyTorch's adaptive 2x2 bins flattened
// channel-major (B, C_in·4), index c·4 + i·2 + j. `xs`: x's NCHW shape.
Output<Node> pooled(const Output<Node>& x_nhwc, const ov::PartialShape& xs, int64_t pool) {
    if (pool == 1) return std::make_shared<ov::op::v1::ReduceMean>(x_nhwc, ints({1, 2}), false);
    const Output<Node> x_nchw = transpose(x_nhwc, {0, 3, 1, 2});
    Output<Node> bins;
    if (xs.rank().is_static() && xs[2].is_static() && xs[3].is_static() && xs[2].get_length() >= 2 &&
        xs[3].get_length() >= 2) {  // a 1-pixel side's two bins are one window twice
        // the bins of a fixed map as one AvgPool (the plugin's AdaptiveAvgPool is a
        // reference loop, 0.2-0.3 ms on a 56x56x64 map): windows ceil(n/2), stride n/2
        // rounded down, as exporters._kinds.adaptive_windows
        const size_t h = (size_t)xs[2].get_length(), w = (size_t)xs[3].get_length();
        const ov::Shape kernel{(h + 1) / 2, (w + 1) / 2};
        const ov::Strides strides{h / 2, w / 2};
        bins = std::make_shared<ov::op::v1::AvgPool>(x_nchw, strides, ov::Shape{0, 0}, ov::Shape{0, 0}, kernel, true,
                                                     ov::op::RoundingType::FLOOR);
    } else {
        bins = std::make_shared<ov::op::v8::AdaptiveAvgPool>(x_nchw, ints({2, 2}));
    }
    return reshape(bins, {0, -1});
}

}  // namespace

Output<Node> runtime_weights_conv(const ov::OutputVector& in, const InputLayout& I, const FusedAttrs& a) {
    // the graph: Conv(x, W0) (NCHW) -> Transpose to NHWC -> the node's conv input
    auto to_nhwc = std::dynamic_pointer_cast<ov::op::v1::Transpose>(in[I.conv].get_node_shared_ptr());
    if (!to_nhwc) return {};
    auto order = std::dynamic_pointer_cast<ov::op::v0::Constant>(to_nhwc->get_input_node_shared_ptr(1));
    if (!order || order->cast_vector<int64_t>() != std::vector<int64_t>{0, 2, 3, 1}) return {};
    auto conv = std::dynamic_pointer_cast<ov::op::v1::Convolution>(to_nhwc->get_input_node_shared_ptr(0));
    if (!conv || !std::dynamic_pointer_cast<ov::op::v0::Constant>(conv->get_input_node_shared_ptr(1))) return {};
    for (auto d : conv->get_dilations())
        if (d != 1) return {};
    const ov::PartialShape& ws = conv->get_input_partial_shape(1);
    if (ws.is_dynamic() || ws.size() != 4) return {};
    const int64_t c_out = ws[0].get_length(), c_in = ws[1].get_length();
    const int64_t kh = ws[2].get_length(), kw = ws[3].get_length();
    if (kh % 2 == 0 || kw % 2 == 0) return {};
    const Output<Node> x = conv->input_value(0);   // (B, C_in, H, W)
    const Output<Node> w0 = conv->input_value(1);  // (C_out, C_in, kh, kw)
    auto weight = [&](int part) { return in[I.weight[part]]; };

    // the branch, as the node's function body computes it (exporters/_fused.py, _features)
    Output<Node> y = matmul(pooled(in[I.x], x.get_partial_shape(), a.pool), weight(PK_FC1), true);  // (B, S)
    if (a.se) y = mul(y, std::make_shared<ov::op::v5::HSigmoid>(matmul(y, weight(PK_GATE), true)));
    else y = std::make_shared<ov::op::v0::Relu>(y);
    const ov::PartialShape& ps = in[I.weight[PK_P]].get_partial_shape();
    if (ps.is_dynamic() || ps.size() != 2) return {};
    const int64_t lat = ps[1].get_length();
    Output<Node> phi = add(matmul(y, weight(PK_PHI_W), true), weight(PK_PHI_B));  // (B, L·L)
    phi = reshape(phi, {0, lat, lat});                                            // (B, L, L)
    Output<Node> pphi = matmul(weight(PK_P), phi);                                // (B, C_out, L)

    // W(x) = Λ ⊙ W0 + the dynamic 1x1 term at the centre tap
    Output<Node> dyn = reshape(matmul(pphi, weight(PK_Q)), {0, c_out, c_in, 1, 1});  // (B, C_out, C_in, 1, 1)
    std::vector<float> tap(size_t(kh * kw), 0.f);
    tap[size_t((kh / 2) * kw + kw / 2)] = 1.f;
    dyn = mul(dyn, ov::op::v0::Constant::create(ov::element::f32, {1, 1, 1, size_t(kh), size_t(kw)}, tap));
    Output<Node> w5 = reshape(w0, {1, c_out, c_in, kh, kw});  // (1, C_out, C_in, kh, kw)
    if (a.attention) {
        Output<Node> lam = std::make_shared<ov::op::v5::HSigmoid>(matmul(y, weight(PK_SCALE_W), true));  // (B, C_out)
        w5 = mul(w5, reshape(lam, {0, c_out, 1, 1, 1}));
    }
    const Output<Node> w_x = add(w5, dyn);  // (B, C_out, C_in, kh, kw): one group per sample

    // the per-sample bias P Φ' q_b + bias, added to the residual first so that the plugin
    // can fuse the sum into the convolution
    Output<Node> bias = add(matmul(pphi, reshape(weight(PK_Q_B), {lat, 1})), reshape(weight(PK_BIAS), {c_out, 1}));
    bias = reshape(bias, {0, c_out, 1, 1});  // (B, C_out, 1, 1)
    Output<Node> extra = bias;
    if (a.residual) extra = add(transpose(in[I.residual], {0, 3, 1, 2}), bias);  // (B, C_out, H', W')

    Output<Node> xs = reshape(x, {1, -1, 0, 0});  // (1, B·C_in, H, W): the samples as groups
    Output<Node> out = std::make_shared<ov::op::v1::GroupConvolution>(
        xs, w_x, conv->get_strides(), conv->get_pads_begin(), conv->get_pads_end(), conv->get_dilations(),
        conv->get_auto_pad());                          // (1, B·C_out, H', W')
    out = add(reshape(out, {-1, c_out, 0, 0}), extra);  // (B, C_out, H', W')
    const int act = parse_act(a.activation);
    if (act == ACT_RELU) out = std::make_shared<ov::op::v0::Relu>(out);
    if (act == ACT_RELU6) out = std::make_shared<ov::op::v0::Clamp>(out, 0.0, 6.0);
    return transpose(out, {0, 2, 3, 1});  // NHWC, as the node's output
}

}  // namespace dcd
