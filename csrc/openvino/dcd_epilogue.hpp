// "DCDConvEpilogue" (domain/opset "dcd_deploy"): the k x k and strided DCD layers with
// channel fusion fused around OpenVINO's own convolution (docs/design.md, "Fused op").
// The graph computes conv = Conv(x, W0) (constant W0, no bias) with the CPU plugin's
// convolution; this op adds the rest in one pass over the output:
//
//   out = act(Λ ⊙ conv + P Φ' (Q x_s + q_b) + bias + residual)
//
// x_s is x at rows/columns i * stride + offset (the centre tap the paper's 1x1 dynamic
// residual reads), and the branch (Λ, Φ') pools the whole x, with the same kernels as
// DCDPointwise (KernelTable::run_epilogue). NHWC throughout.
//
// latent_input = 1 (joint fusion, paper Eq. 8): the graph computes the latent z = R(Q x)
// too, (B, Ho, Wo, Lz) with Lz = L·L_k, and the op reads it after x and residual in place
// of Q x_s + q_b: out = act(Λ ⊙ conv + P Φ' z + bias + residual), Φ' of L x Lz (no q, q_b
// among the weights; stride and offset unused).
//
// The ONNX node carries the contract's weights (DCDPointwise's order without w0); the
// conversion (extension.cpp) checks their shapes and packs them into one Constant: the op
// is always packed (one input instead of nine saves the CPU plugin's per-call tensor
// wrapping).
#pragma once

#include <openvino/op/op.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "op_contract.hpp"
#include "weight_packing.hpp"

namespace dcd {

class DCDConvEpilogue : public ov::op::Op {
public:
    OPENVINO_OP("DCDConvEpilogue", "dcd_deploy");

    DCDConvEpilogue() = default;
    // packed = {Cout, Cin, S, L} of the packed weights (the op's last input), and Lz with
    // latent_input
    DCDConvEpilogue(const ov::OutputVector& args, FusedAttrs attrs, int64_t stride, int64_t offset,
                    std::vector<int64_t> packed, int64_t latent_input = 0);

    bool visit_attributes(ov::AttributeVisitor& v) override;
    void validate_and_infer_types() override;
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override;
    bool has_evaluate() const override { return true; }
    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override;

private:
    struct Sizes {
        size_t B, H, W, Cin, Ho, Wo, Cout;
    };

    InputLayout input_layout() const { return InputLayout(OpKind::ConvEpilogue, m_attrs, true, m_latent_input != 0); }
    std::string layout(PackedLayout* lay) const;
    void validate_attributes();
    void validate_shapes();
    void validate_latent(const ov::PartialShape& out);
    void evaluate_checked(ov::TensorVector& outputs, const ov::TensorVector& inputs) const;
    Sizes check_tensors(const ov::TensorVector& inputs, const InputLayout& I, size_t total) const;
    void run(const KernelTable* k, const Sizes& s, const InputLayout& I, Params* p) const;

    FusedAttrs m_attrs;
    int64_t m_stride = 1, m_offset = 0, m_latent_input = 0;
    std::vector<int64_t> m_packed;
    PreparedCache m_prepared;
};

}  // namespace dcd
