// The checked layout of the packed weights (one f32 Constant holding an op's weight
// tensors back to back) and the overflow-checked size arithmetic every size read from a
// file goes through. Header-only, for the ops' translation units (never the kernels').
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dcd {

// Every size the op reads from a file (the packed attribute, the weights' shapes) is
// untrusted: a tampered IR claimed S and L of 1.8e17 and 3.4e10, whose products wrapped
// around 2^64 to the real weights' size. Each dimension is bounded, and every product the
// kernels index with (int arithmetic there) is computed with overflow checks and kept
// below 2^31 elements.
constexpr uint64_t kMaxDim = 1 << 16;                    // channels, S, L
constexpr uint64_t kMaxElems = (uint64_t(1) << 31) - 1;  // any tensor, product or total
constexpr uint64_t kMaxTaps = 64 * 64;                   // k*k of a depthwise kernel

// *out = a * b, false if it overflows or exceeds kMaxElems.
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) {
    return !__builtin_mul_overflow(a, b, out) && *out <= kMaxElems;
}

// Offsets (floats) of the weight tensors in the packed input: the contract's order, each
// starting on a 64-byte boundary; absent tensors (gate without se, scale_w without
// attention, q and q_b of the depthwise op, r of the others) take no room. make() checks
// the dimensions first.
// Also the order of the weights among an op's inputs (op_contract.hpp); r (the depthwise
// op's) is last so that the other ops' tables by part need no entry for it.
enum PackedPart { PK_FC1, PK_GATE, PK_SCALE_W, PK_PHI_W, PK_PHI_B, PK_Q, PK_Q_B, PK_P, PK_W0, PK_BIAS, PK_R, PK_COUNT };
// The weights' names in the ONNX contract (docs/design.md "Fused op"), by PackedPart.
constexpr const char* kPartNames[PK_COUNT] = {"fc1", "gate", "scale_w", "phi_w", "phi_b", "q",
                                              "q_b", "p",    "w0",      "bias",  "r"};
struct PackedLayout {
    size_t offset[PK_COUNT] = {}, size[PK_COUNT] = {}, total = 0;

    // Fills *out and returns "" for dimensions in range; else returns why they are not (a
    // dimension outside 1..kMaxDim, or a product the kernels cannot index).
    // w0 = false: the layout without w0 (DCDConvEpilogue, whose W0 is OpenVINO's Conv's).
    // kk > 0: the depthwise layout (DCDDepthwise, k*k = kk taps): no q, q_b; w0 (cout x kk),
    // r (L x kk). lz > 0: DCDConvEpilogue with latent_input (joint fusion): Φ' is L x lz,
    // no q, q_b.
    static std::string make(uint64_t cout, uint64_t cin, uint64_t S, uint64_t L, uint64_t pool, bool se, bool att,
                            PackedLayout* out, bool w0 = true, uint64_t kk = 0, uint64_t lz = 0) {
        const uint64_t dims[4] = {cout, cin, S, L};
        const char* names[4] = {"Cout", "Cin", "S", "L"};
        for (int i = 0; i < 4; ++i)
            if (dims[i] < 1 || dims[i] > kMaxDim)
                return std::string(names[i]) + " = " + std::to_string(dims[i]) + " is outside 1-" +
                       std::to_string(kMaxDim);
        if (lz > kMaxDim) return "Lz = " + std::to_string(lz) + " is outside 1-" + std::to_string(kMaxDim);
        if (pool != 1 && pool != 2) return "pool must be 1 or 2";
        if (kk > kMaxTaps) return "k*k = " + std::to_string(kk) + " exceeds " + std::to_string(kMaxTaps);
        PackedLayout lay;
        uint64_t t, ll;
        bool ok = mul_ok(S, cin, &t) && mul_ok(t, pool * pool, &t);
        lay.size[PK_FC1] = t;
        ok = ok && mul_ok(S, S, &t);
        lay.size[PK_GATE] = se ? t : 0;
        ok = ok && mul_ok(cout, S, &t);
        lay.size[PK_SCALE_W] = att ? t : 0;
        ok = ok && mul_ok(L, lz ? lz : L, &ll) && mul_ok(ll, S, &t);
        lay.size[PK_PHI_W] = t;
        lay.size[PK_PHI_B] = ll;
        ok = ok && mul_ok(L, cin, &t);
        lay.size[PK_Q] = (kk || lz) ? 0 : t;
        lay.size[PK_Q_B] = (kk || lz) ? 0 : L;
        ok = ok && mul_ok(cout, L, &t);
        lay.size[PK_P] = t;
        ok = ok && mul_ok(cout, kk ? kk : cin, &t);
        lay.size[PK_W0] = w0 ? t : 0;
        ok = ok && mul_ok(L, kk, &t);
        lay.size[PK_R] = t;
        lay.size[PK_BIAS] = cout;
        // the kernels' prepared panels: K = Cin + L columns of up to 64 padded rows
        ok = ok && mul_ok(cout + 64, cin + L, &t) && mul_ok(L + 64, cin + L, &t) && mul_ok(cout + 64, lz, &t);
        if (!ok)
            return "the weights' sizes (Cout " + std::to_string(cout) + ", Cin " + std::to_string(cin) + ", S " +
                   std::to_string(S) + ", L " + std::to_string(L) + ") exceed 2^31 values";
        for (int i = 0; i < PK_COUNT; ++i) {
            lay.offset[i] = lay.total;
            lay.total += (lay.size[i] + 15) & ~size_t(15);
            if (lay.total > kMaxElems) return "the packed weights exceed 2^31 values";
        }
        *out = lay;
        return "";
    }
};

}  // namespace dcd
