// The library's C entry points (ctypes), for the Python side, tests, profiling and the
// builder: dcd_deploy_ov_isa, dcd_deploy_ov_split_calls, dcd_deploy_ov_error_count,
// dcd_deploy_ov_last_error, dcd_deploy_ov_set_quiet, dcd_deploy_ov_build_id,
// dcd_deploy_ov_selfcheck, dcd_deploy_ov_profile, dcd_deploy_ov_profile_reset,
// dcd_deploy_ov_inputs.
#include <algorithm>
#include <cstring>
#include <string>

#include "op_contract.hpp"
#include "op_failures.hpp"
#include "op_runtime.hpp"
#include "packed_layout.hpp"

#define DCD_EXPORT extern "C" __attribute__((visibility("default")))

DCD_EXPORT const char* dcd_deploy_ov_isa() {
    try {
        std::string err;
        const dcd::KernelTable* k = dcd::select_kernels(&err);
        return k ? k->name : "error";
    } catch (...) {
        return "error";
    }
}

// How many GEMMs were split over more than one thread since the last reset (reset = 1):
// whether evaluate sees OpenVINO's INFERENCE_NUM_THREADS, for tests and benchmarks.
DCD_EXPORT long dcd_deploy_ov_split_calls(int reset) {
    return reset ? dcd::g_split_calls.exchange(0) : dcd::g_split_calls.load();
}

// The failures of evaluate since the library was loaded (each one left its output NaN).
DCD_EXPORT unsigned long long dcd_deploy_ov_error_count() { return dcd::failure_count(); }

// Copies the last failure's message (NUL-terminated, truncated to n - 1 bytes) into out;
// returns the message's full length.
DCD_EXPORT int dcd_deploy_ov_last_error(char* out, int n) { return dcd::last_failure(out, n); }

// quiet != 0: a failing evaluate only records its message (the caller reads it with
// dcd_deploy_ov_last_error) instead of also printing it on stderr.
DCD_EXPORT void dcd_deploy_ov_set_quiet(int quiet) { dcd::set_quiet(quiet != 0); }

#ifndef DCD_BUILD_ID
#define DCD_BUILD_ID "unknown"
#endif
// The build's identity (the hash of the sources and flags it was compiled from): the
// builder loads a fresh library in a subprocess and compares it before caching it.
DCD_EXPORT const char* dcd_deploy_ov_build_id() { return DCD_BUILD_ID; }

// 0x44434431 ("DCD1") when the op's own checks work in this library: a layout in range is
// accepted and the tampered IR's sizes (whose products wrap around 2^64) are refused.
DCD_EXPORT unsigned dcd_deploy_ov_selfcheck() {
    try {
        dcd::PackedLayout lay;
        if (!dcd::PackedLayout::make(48, 8, 4, 4, 1, true, true, &lay).empty() || lay.total == 0) return 0;
        if (dcd::PackedLayout::make(48, 8, 177372507123220484ull, 34359738372ull, 1, true, true, &lay).empty())
            return 0;
        std::string err;
        if (!dcd::select_kernels(&err) && err.empty()) return 0;
        return 0x44434431u;
    } catch (...) {
        return 0;
    }
}

// Fills out[0..n) with pool, branch, form, gemm, total (seconds) and the number of evaluate
// calls (as a double), in that order; returns how many values were written.
DCD_EXPORT int dcd_deploy_ov_profile(double* out, int n) { return dcd::read_profile(out, n); }

DCD_EXPORT void dcd_deploy_ov_profile_reset() { dcd::reset_profile(); }

// The names of op's inputs in order for these attributes (InputLayout), comma-separated,
// copied into out like dcd_deploy_ov_last_error (NUL-terminated, at most n - 1 bytes);
// returns the text's full length, or -1 for an op other than "DCDPointwise",
// "DCDConvEpilogue" and "DCDDepthwise". latent_input: DCDConvEpilogue's attribute.
// packed != 0: the op's packed form (what the ONNX conversion makes), else the ONNX
// node's. For the test of the contract against the exporter's description.
DCD_EXPORT int dcd_deploy_ov_inputs(const char* op, int se, int attention, int residual, int latent_input, int packed,
                                    char* out, int n) {
    try {
        dcd::OpKind kind;
        if (op && !std::strcmp(op, "DCDPointwise")) kind = dcd::OpKind::Pointwise;
        else if (op && !std::strcmp(op, "DCDConvEpilogue")) kind = dcd::OpKind::ConvEpilogue;
        else if (op && !std::strcmp(op, "DCDDepthwise")) kind = dcd::OpKind::Depthwise;
        else return -1;
        dcd::FusedAttrs a;
        a.se = se != 0;
        a.attention = attention != 0;
        a.residual = residual != 0;
        std::string text;
        for (const std::string& name : dcd::InputLayout(kind, a, packed != 0, latent_input != 0).names())
            text += (text.empty() ? "" : ",") + name;
        if (out && n > 0) {
            const size_t w = std::min(text.size(), (size_t)n - 1);
            std::memcpy(out, text.data(), w);
            out[w] = '\0';
        }
        return (int)text.size();
    } catch (...) {
        return -1;
    }
}
