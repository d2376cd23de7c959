// The contract both fused ops share with the exporter (docs/design.md "Fused op"): their
// common attributes and the positions of their inputs. The Python side's description of
// the same inputs is compared with InputLayout through the C entry point
// dcd_deploy_ov_inputs (tests/openvino/test_fused_contract_cpp.py).
#pragma once

#include <openvino/core/attribute_visitor.hpp>
#include <openvino/core/node.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dcd_kernels.hpp"
#include "packed_layout.hpp"

namespace dcd {

// The attributes of DCDPointwise and DCDConvEpilogue alike (each adds its own after them).
struct FusedAttrs {
    int64_t pool = 1, se = 0, attention = 0, residual = 0;
    std::string activation = "none";
    // leaky_relu's negative slope. Visited (and written to IR) with that activation only, so
    // the others' IR is as it was; NaN until a node gives it: a leaky_relu without it is refused.
    float activation_alpha = std::numeric_limits<float>::quiet_NaN();
    // prelu's negative slope per output channel (nn.PReLU(C)'s weight). Visited with that
    // activation only, like activation_alpha; empty until a node gives it.
    std::vector<float> activation_slopes;
    // Why the IR's activation_slopes text did not read as numbers ("" when it did).
    std::string slopes_error;

    // In the IR's order: pool, se, attention, residual, activation[, activation_alpha |
    // activation_slopes].
    void visit(ov::AttributeVisitor& v);
    // "" when they are in range, else why not (for a validation message). cout >= 0: the
    // op's output channels, which prelu's slopes must number.
    std::string check(int64_t cout = -1) const;
    // The kernels' activation fields of p (act, alpha, slope; slope points into this), p->Cout
    // set: throws unless prelu's slopes number it.
    void to_params(Params* p) const;
};

int parse_act(const std::string& a);  // ACT_*, -1 for a name that is none of them
// "v0, v1, ..." with 9 significant digits each; the inverse reads such text (commas and spaces
// between numbers) into *out and returns "", or why not (out untouched).
std::string format_floats(const std::vector<float>& values);
std::string parse_floats(const std::string& text, std::vector<float>* out);
int parse_form(const std::string& f);  // FORM_*, -1 if not weight/latent/auto

enum class OpKind { Pointwise, ConvEpilogue, Depthwise };

// Where an op's inputs are, for its kind and attributes:
// * DCDPointwise, the contract's form (the ONNX node's): x, [residual], fc1, [gate],
//   [scale_w], phi_w, phi_b, q, q_b, p, w0, bias;
// * DCDConvEpilogue's ONNX node: conv, x, [residual], the same weights without w0;
//   with latent_input (joint fusion): conv, x, [residual], z, those weights without q, q_b;
// * DCDDepthwise's ONNX node: x, [residual], the same weights without q and q_b (w0 is
//   (C, k*k)), then r (L, k*k);
// * packed (what the ONNX conversion makes of either when the weights are Constants):
//   the activations, then one 1-D f32 Constant holding the weights (PackedLayout).
//   OpenVINO's CPU plugin wraps every input of an extension op in a new ov::Tensor at
//   every call (about 1 us each): one weight input instead of ten is most of the op's
//   per-call overhead.
// gate is there with se, scale_w with attention, residual with residual.
struct InputLayout {
    int x = -1, conv = -1, residual = -1, z = -1, packed = -1;
    int weight[PK_COUNT];  // by PackedPart; -1: absent, or inside `packed`
    int count = 0;

    // latent_input: DCDConvEpilogue's attribute of that name (ignored for other kinds)
    InputLayout(OpKind kind, const FusedAttrs& a, bool is_packed, bool latent_input = false);
    // The inputs' names in order: x, conv, residual, z, packed and kPartNames.
    std::vector<std::string> names() const;
    // A validation failure on `node` unless it has `count` inputs, all f32.
    void check_inputs(const ov::Node* node) const;
};

}  // namespace dcd
