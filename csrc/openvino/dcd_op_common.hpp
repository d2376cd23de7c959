// What the two ops of the extension share (dcd_op.cpp defines it; dcd_epilogue.cpp uses
// it): kernel selection, the thread split, profiling, failure recording and the checked
// layout of the packed weights. Compiled for the baseline ISA only (never with the
// kernels' -m flags).
#pragma once

#include <openvino/core/extension.hpp>
#include <openvino/runtime/tensor.hpp>

#include <cstdint>
#include <mutex>
#include <string>

#include "dcd_kernels.hpp"

namespace dcd {

// The kernel table evaluate() uses now (DCD_DEPLOY_ISA, else the best this CPU has), or
// null with *err set.
const KernelTable* select_kernels(std::string* err);
// Params::parallel_rows over the CPU plugin's TBB arena.
void parallel_rows(int m, int grain, void (*body)(void*, int, int), void* ctx);
// DCD_DEPLOY_PROFILE=1; the accumulated phase times (dcd_deploy_ov_profile).
bool profiling();
extern std::mutex g_prof_mutex;
extern double g_prof[PH_COUNT + 1];
extern double g_prof_calls;
// At most n characters of a value read from a file, for a message.
std::string clip(const std::string& s, size_t n = 60);
// Failures the CPU plugin would swallow: recorded for dcd_deploy_ov_error_count/last_error
// (record_failure also sets the outputs to NaN).
void record_validation_failure(const std::string& what);
void record_failure(ov::TensorVector& outputs, const std::string& what, const char* op = "DCDPointwise");
int parse_act(const std::string& a);  // -1 if not none/relu/relu6
// The DCDConvEpilogue op and its ONNX conversion (dcd_epilogue.cpp), for the extension list.
ov::Extension::Ptr epilogue_op_extension();
ov::Extension::Ptr epilogue_onnx_extension();

// Every size the op reads from a file (the packed attribute, the weights' shapes) is
// untrusted: a tampered IR claimed S and L of 1.8e17 and 3.4e10, whose products wrapped
// around 2^64 to the real weights' size. Each dimension is bounded, and every product the
// kernels index with (int arithmetic there) is computed with overflow checks and kept
// below 2^31 elements.
constexpr uint64_t kMaxDim = 1 << 16;                     // channels, S, L
constexpr uint64_t kMaxElems = (uint64_t(1) << 31) - 1;  // any tensor, product or total

// *out = a * b, false if it overflows or exceeds kMaxElems.
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) {
    return !__builtin_mul_overflow(a, b, out) && *out <= kMaxElems;
}

// Offsets (floats) of the weight tensors in the packed input: the contract's order, each
// starting on a 64-byte boundary; absent tensors (gate without se, scale_w without
// attention) take no room. make() checks the dimensions first.
enum PackedPart { PK_FC1, PK_GATE, PK_SCALE_W, PK_PHI_W, PK_PHI_B, PK_Q, PK_Q_B, PK_P, PK_W0, PK_BIAS, PK_COUNT };
struct PackedLayout {
    size_t offset[PK_COUNT] = {}, size[PK_COUNT] = {}, total = 0;

    // Fills *out and returns "" for dimensions in range; else returns why they are not (a
    // dimension outside 1..kMaxDim, or a product the kernels cannot index).
    // w0 = false: the layout without w0 (DCDConvEpilogue, whose W0 is OpenVINO's Conv's).
    static std::string make(uint64_t cout, uint64_t cin, uint64_t S, uint64_t L, uint64_t pool, bool se,
                            bool att, PackedLayout* out, bool w0 = true) {
        const uint64_t dims[4] = {cout, cin, S, L};
        const char* names[4] = {"Cout", "Cin", "S", "L"};
        for (int i = 0; i < 4; ++i)
            if (dims[i] < 1 || dims[i] > kMaxDim)
                return std::string(names[i]) + " = " + std::to_string(dims[i]) + " is outside 1-" +
                       std::to_string(kMaxDim);
        if (pool != 1 && pool != 2) return "pool must be 1 or 2";
        PackedLayout lay;
        uint64_t t, ll;
        bool ok = mul_ok(S, cin, &t) && mul_ok(t, pool * pool, &t);
        lay.size[PK_FC1] = t;
        ok = ok && mul_ok(S, S, &t);
        lay.size[PK_GATE] = se ? t : 0;
        ok = ok && mul_ok(cout, S, &t);
        lay.size[PK_SCALE_W] = att ? t : 0;
        ok = ok && mul_ok(L, L, &ll) && mul_ok(ll, S, &t);
        lay.size[PK_PHI_W] = t;
        lay.size[PK_PHI_B] = ll;
        ok = ok && mul_ok(L, cin, &t);
        lay.size[PK_Q] = t;
        lay.size[PK_Q_B] = L;
        ok = ok && mul_ok(cout, L, &t);
        lay.size[PK_P] = t;
        ok = ok && mul_ok(cout, cin, &t);
        lay.size[PK_W0] = w0 ? t : 0;
        lay.size[PK_BIAS] = cout;
        // the kernels' prepared panels: K = Cin + L columns of up to 64 padded rows
        ok = ok && mul_ok(cout + 64, cin + L, &t) && mul_ok(L + 64, cin + L, &t);
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
