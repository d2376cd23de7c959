// The ops' weights: the ONNX node's weight Constants packed into one (PackedLayout), the
// kernels' pointers into the packed buffer, and the weights rearranged for the kernels
// (KernelTable::prepare), made once per weights and ISA.
#pragma once

#include <openvino/core/node.hpp>
#include <openvino/op/constant.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dcd_kernels.hpp"
#include "op_contract.hpp"

namespace dcd {

// The weights at I's positions among `inputs` (the contract's form), each checked against
// the shapes the others imply, packed back to back into one Constant; *dims = {Cout, Cin,
// S, L} (the depthwise op's: Cin = Cout, its k*k from r's columns), and Lz for
// DCDConvEpilogue's latent input (no q: Φ' is L x Lz). Null with *why set when one is not
// an f32 Constant or the shapes do not fit.
std::shared_ptr<ov::op::v0::Constant> pack_weights(const ov::OutputVector& inputs, const InputLayout& I,
                                                   const FusedAttrs& a, std::vector<int64_t>* dims, std::string* why);

// p's weight pointers into the packed weights w (null for the parts lay leaves out).
void bind_packed(const float* w, const PackedLayout& lay, Params* p);

// Whether data is the memory of the Constant node's input `input` is (the CPU plugin
// hands over a Constant's own buffer): then it is immutable while the node holds it.
bool is_own_constant(const ov::Node& node, int input, const void* data);

// The weights rearranged for the kernels. They are Constants: prepared once per (tensors,
// ISA) and kept. When they are the op's own Constant's memory (owned), the address is the
// key; else sampled values guard against a different tensor at the same address.
class PreparedCache {
public:
    std::shared_ptr<const std::vector<float>> get(const KernelTable* k, const Params& p, bool owned) const;

private:
    static constexpr int kCached = 5;  // w0, q, p, phi_w, scale_w: what prepare reads
    struct Key {
        const KernelTable* table = nullptr;
        int shape[5] = {};
        const float* src[kCached] = {};
        float probe[kCached][8] = {};
    };
    static bool same_tensors(const Key& a, const Key& b);

    mutable std::mutex m_mutex;
    mutable std::shared_ptr<const std::vector<float>> m_prepared;
    mutable Key m_key;
    mutable bool m_owned = false;
};

}  // namespace dcd
