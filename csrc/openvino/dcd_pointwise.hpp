// The fused DCD 1x1 op "DCDPointwise" (domain/opset "dcd_deploy"): the whole layer, NHWC
// (docs/design.md "Fused op"). Its ONNX conversion and registration are in extension.cpp.
#pragma once

#include <openvino/op/op.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "op_contract.hpp"
#include "weight_packing.hpp"

namespace dcd {

class DCDPointwise : public ov::op::Op {
public:
    OPENVINO_OP("DCDPointwise", "dcd_deploy");

    DCDPointwise() = default;
    // packed: empty for the contract's inputs, else {Cout, Cin, S, L} of the packed weights.
    DCDPointwise(const ov::OutputVector& args, FusedAttrs attrs, std::string form, std::vector<int64_t> packed = {});

    bool visit_attributes(ov::AttributeVisitor& v) override;
    void validate_and_infer_types() override;
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override;
    bool has_evaluate() const override { return true; }
    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override;

    // This op with the ten weight inputs replaced by one packed Constant, or null when they
    // are not all f32 Constants of known shapes (then the contract's form stays).
    std::shared_ptr<DCDPointwise> packed_copy() const;

private:
    struct Sizes {
        size_t B, H, W, Cin, Cout, S, L;
    };

    void validate_checked();
    void check_packed_shapes(const InputLayout& I, const PackedLayout& lay);
    void check_constant_shapes(const InputLayout& I);
    void check_constant_sizes(const InputLayout& I);
    void evaluate_checked(ov::TensorVector& outputs, const ov::TensorVector& inputs) const;
    // The weights' pointers and sizes, from the packed input or the contract's inputs.
    Sizes bind_packed_weights(const ov::TensorVector& inputs, const InputLayout& I, Params* p) const;
    Sizes bind_contract_weights(const ov::TensorVector& inputs, const InputLayout& I, Params* p) const;
    void run(const KernelTable* k, const Sizes& s, const InputLayout& I, Params* p) const;

    bool packed() const { return !m_packed.empty(); }
    InputLayout input_layout() const { return InputLayout(OpKind::Pointwise, m_attrs, packed()); }
    // The packed weights' layout from the attribute; "" or why it is out of range.
    std::string layout(PackedLayout* lay) const;

    FusedAttrs m_attrs;
    std::string m_form = "auto";
    std::vector<int64_t> m_packed;
    PreparedCache m_prepared;
};

}  // namespace dcd
