// "DCDDepthwise" (domain/opset "dcd_deploy"): a k x k depthwise DCD layer (paper Eq. 7)
// fused in the weight form (docs/design.md, "Fused op"). Per sample the branch (the same
// kernels as DCDPointwise's) gives Λ and Φ', the op forms the per-channel kernel
//
//   K[c] = Λ[c] W0[c] + Σ_l (P Φ')[c, l] R[l]        (C x k*k: tiny)
//
// and runs one depthwise convolution of x with it, out = act(x (*) K + bias + residual),
// NHWC throughout (KernelTable::run_depthwise). Geometry: kernel (k x k), stride,
// dilation, pads (top, left, bottom, right, as ONNX Conv's).
//
// The ONNX node carries the contract's weights (DCDPointwise's order without q and q_b,
// w0 (C, k*k), then r (L, k*k)); the conversion (extension.cpp) checks their shapes and
// packs them into one Constant: the op is always packed.
#pragma once

#include <openvino/op/op.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "op_contract.hpp"
#include "weight_packing.hpp"

namespace dcd {

// The depthwise geometry attributes (visited after FusedAttrs, in this order).
struct DepthwiseGeometry {
    int64_t kernel = 3, stride = 1, dilation = 1;
    std::vector<int64_t> pads{1, 1, 1, 1};  // top, left, bottom, right

    void visit(ov::AttributeVisitor& v);
    // "" when in range, else why not.
    std::string check() const;
    // The output size along an axis of input size n (axis 0: rows, 1: columns); < 1 when
    // the kernel does not fit.
    int64_t out_size(int64_t n, int axis) const;
};

class DCDDepthwise : public ov::op::Op {
public:
    OPENVINO_OP("DCDDepthwise", "dcd_deploy");

    DCDDepthwise() = default;
    // packed = {C, C, S, L} of the packed weights (the op's last input)
    DCDDepthwise(const ov::OutputVector& args, FusedAttrs attrs, DepthwiseGeometry geometry,
                 std::vector<int64_t> packed);

    bool visit_attributes(ov::AttributeVisitor& v) override;
    void validate_and_infer_types() override;
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override;
    bool has_evaluate() const override { return true; }
    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override;

private:
    struct Sizes {
        size_t B, H, W, C, Ho, Wo;
    };

    InputLayout input_layout() const { return InputLayout(OpKind::Depthwise, m_attrs, true); }
    std::string layout(PackedLayout* lay) const;
    void validate_attributes();
    void evaluate_checked(ov::TensorVector& outputs, const ov::TensorVector& inputs) const;
    Sizes check_tensors(const ov::TensorVector& inputs, const InputLayout& I, size_t total) const;
    void run(const KernelTable* k, const Sizes& s, const InputLayout& I, Params* p) const;

    FusedAttrs m_attrs;
    DepthwiseGeometry m_geo;
    std::vector<int64_t> m_packed;
    PreparedCache m_prepared;
};

}  // namespace dcd
