// How the ops enter OpenVINO: OpExtensions (IR round trips) and ONNX ConversionExtensions
// for the three ops of domain/opset "dcd_deploy"; the conversion packs the node's weight
// Constants into one input (weight_packing.hpp).
#include <openvino/core/extension.hpp>
#include <openvino/core/op_extension.hpp>
#include <openvino/frontend/onnx/extension/conversion.hpp>

#include <limits>

#include "dcd_depthwise.hpp"
#include "dcd_epilogue.hpp"
#include "dcd_pointwise.hpp"

namespace dcd {
namespace {

// A floats attribute into *out (absent: empty); "" or why not (another type). The ONNX
// frontend holds floats as doubles.
std::string float_list(const ov::frontend::NodeContext& ctx, const std::string& name, std::vector<float>* out) {
    out->clear();
    if (!ctx.has_attribute(name)) return "";
    const ov::Any a = ctx.get_attribute_as_any(name);
    if (a.is<std::vector<double>>()) {
        const auto d = a.as<std::vector<double>>();
        out->assign(d.begin(), d.end());
    } else if (a.is<std::vector<float>>()) {
        *out = a.as<std::vector<float>>();
    } else {
        return name + " must be a list of floats";
    }
    return "";
}

FusedAttrs onnx_attrs(const ov::frontend::NodeContext& ctx) {
    FusedAttrs a;
    a.pool = ctx.get_attribute<int64_t>("pool", 1);
    a.se = ctx.get_attribute<int64_t>("se", 0);
    a.attention = ctx.get_attribute<int64_t>("attention", 0);
    a.residual = ctx.get_attribute<int64_t>("residual", 0);
    a.activation = ctx.get_attribute<std::string>("activation", "none");
    // absent: NaN, which the op refuses with leaky_relu and takes for the others (check())
    a.activation_alpha = ctx.get_attribute<float>("activation_alpha", std::numeric_limits<float>::quiet_NaN());
    a.slopes_error = float_list(ctx, "activation_slopes", &a.activation_slopes);
    return a;
}

ov::OutputVector onnx_inputs(const ov::frontend::NodeContext& ctx) {
    ov::OutputVector args;
    for (size_t i = 0; i < ctx.get_input_size(); ++i) args.push_back(ctx.get_input((int)i));
    return args;
}

ov::OutputVector convert_pointwise(const ov::frontend::NodeContext& ctx) {
    // the contract's form first: it checks every weight's shape, with the messages naming them
    auto node = std::make_shared<DCDPointwise>(onnx_inputs(ctx), onnx_attrs(ctx),
                                               ctx.get_attribute<std::string>("form", "auto"));
    if (auto packed = node->packed_copy()) return packed->outputs();
    return node->outputs();
}

ov::OutputVector convert_epilogue(const ov::frontend::NodeContext& ctx) {
    constexpr const char* kOp = "DCDConvEpilogue";
    const FusedAttrs a = onnx_attrs(ctx);
    OPENVINO_ASSERT((a.pool == 1 || a.pool == 2) && (a.se | 1) == 1 && (a.attention | 1) == 1 && (a.residual | 1) == 1,
                    kOp, ": pool must be 1 or 2, se, attention and residual 0 or 1");
    const int64_t latent = ctx.get_attribute<int64_t>("latent_input", 0);
    OPENVINO_ASSERT(latent == 0 || latent == 1, kOp, ": latent_input must be 0 or 1");
    const ov::OutputVector inputs = onnx_inputs(ctx);
    const InputLayout I(OpKind::ConvEpilogue, a, false, latent != 0);
    OPENVINO_ASSERT((int)inputs.size() == I.count, kOp, ": ", inputs.size(), " inputs given, expected ", I.count,
                    " for these attributes");
    std::vector<int64_t> dims;
    std::string why;
    auto weights = pack_weights(inputs, I, a, &dims, &why);
    OPENVINO_ASSERT(weights, kOp, ": ", why);
    // the op's own layout: the same activations, then the packed weights
    const InputLayout P(OpKind::ConvEpilogue, a, true, latent != 0);
    ov::OutputVector args(P.count);
    args[P.conv] = inputs[I.conv];
    args[P.x] = inputs[I.x];
    if (P.residual >= 0) args[P.residual] = inputs[I.residual];
    if (P.z >= 0) args[P.z] = inputs[I.z];
    args[P.packed] = weights;
    auto node = std::make_shared<DCDConvEpilogue>(args, a, ctx.get_attribute<int64_t>("stride", 1),
                                                  ctx.get_attribute<int64_t>("offset", 0), dims, latent);
    return node->outputs();
}

ov::OutputVector convert_depthwise(const ov::frontend::NodeContext& ctx) {
    constexpr const char* kOp = "DCDDepthwise";
    const FusedAttrs a = onnx_attrs(ctx);
    const std::string bad_attrs = a.check();
    OPENVINO_ASSERT(bad_attrs.empty(), kOp, ": ", bad_attrs);
    DepthwiseGeometry g;
    g.kernel = ctx.get_attribute<int64_t>("kernel", 3);
    g.stride = ctx.get_attribute<int64_t>("stride", 1);
    g.dilation = ctx.get_attribute<int64_t>("dilation", 1);
    g.pads = ctx.get_attribute<std::vector<int64_t>>("pads", {1, 1, 1, 1});
    const std::string bad_geometry = g.check();
    OPENVINO_ASSERT(bad_geometry.empty(), kOp, ": ", bad_geometry);
    const ov::OutputVector inputs = onnx_inputs(ctx);
    const InputLayout I(OpKind::Depthwise, a, false);
    OPENVINO_ASSERT((int)inputs.size() == I.count, kOp, ": ", inputs.size(), " inputs given, expected ", I.count,
                    " for these attributes");
    const auto& rs = inputs[I.weight[PK_R]].get_partial_shape();
    OPENVINO_ASSERT(rs.rank().is_static() && rs.size() == 2 && rs[1].compatible(g.kernel * g.kernel), kOp,
                    ": r has shape ", rs, ", expected (L, ", g.kernel * g.kernel, ") for the kernel ", g.kernel, "x",
                    g.kernel);
    std::vector<int64_t> dims;
    std::string why;
    auto weights = pack_weights(inputs, I, a, &dims, &why);
    OPENVINO_ASSERT(weights, kOp, ": ", why);
    const InputLayout P(OpKind::Depthwise, a, true);
    ov::OutputVector args(P.count);
    args[P.x] = inputs[I.x];
    if (P.residual >= 0) args[P.residual] = inputs[I.residual];
    args[P.packed] = weights;
    return std::make_shared<DCDDepthwise>(args, a, g, dims)->outputs();
}

}  // namespace
}  // namespace dcd

OPENVINO_CREATE_EXTENSIONS(std::vector<ov::Extension::Ptr>(
    {std::make_shared<ov::OpExtension<dcd::DCDPointwise>>(),
     std::make_shared<ov::frontend::onnx::ConversionExtension>("DCDPointwise", "dcd_deploy", dcd::convert_pointwise),
     std::make_shared<ov::OpExtension<dcd::DCDConvEpilogue>>(),
     std::make_shared<ov::frontend::onnx::ConversionExtension>("DCDConvEpilogue", "dcd_deploy", dcd::convert_epilogue),
     std::make_shared<ov::OpExtension<dcd::DCDDepthwise>>(),
     std::make_shared<ov::frontend::onnx::ConversionExtension>("DCDDepthwise", "dcd_deploy", dcd::convert_depthwise)}));
