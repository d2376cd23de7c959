// Interface between the ISA-independent ops (dcd_pointwise.cpp, dcd_epilogue.cpp) and the per-ISA kernels
// (dcd_kernels.cpp, compiled once per instruction set into its own namespace).
//
// Plain C types only: the kernel translation units are compiled with different -m flags,
// so they must not instantiate any inline or template code shared with other units
// (the linker would keep one copy, possibly an AVX-512 one, for every caller).
#pragma once

#include <stddef.h>

// The x86 kernels (and the op's x86 CPU-feature checks) exist on x86-64 only: a build for
// another CPU (aarch64) that is given DCD_WITH_X86 still compiles the portable kernels alone.
#if defined(DCD_WITH_X86) && !defined(__x86_64__)
#undef DCD_WITH_X86
#endif

namespace dcd {

enum Act {
    ACT_NONE = 0,
    ACT_RELU = 1,
    ACT_RELU6 = 2,
    ACT_SILU = 3,
    ACT_HARDSWISH = 4,
    ACT_GELU = 5,
    ACT_LEAKY_RELU = 6,
    ACT_MISH = 7,
    ACT_PRELU = 8
};
enum Form { FORM_WEIGHT = 0, FORM_LATENT = 1, FORM_AUTO = 2 };
enum Phase { PH_POOL = 0, PH_BRANCH = 1, PH_FORM = 2, PH_GEMM = 3, PH_COUNT = 4 };

struct Params {
    int B, H, W, Cin, Cout, S, L;
    int pool, se, attention, act, form;
    float alpha;  // ACT_LEAKY_RELU's negative slope (finite; unread for the other activations)
    // ACT_PRELU's negative slope per output channel (Cout floats, finite); unread for the others
    const float* slope;
    const float* x;  // (B, H, W, Cin)
    // DCDConvEpilogue only (run_epilogue): conv = OpenVINO's Conv of x with W0, (B, Ho, Wo,
    // Cout); the latent path reads x at rows/columns i * stride + offset (the centre tap).
    const float* conv;
    int Ho, Wo, stride, offset;
    // DCDConvEpilogue with latent_input (joint fusion, Eq. 8): z = the graph's R(Q x), (B, Ho,
    // Wo, Lz), read in place of q x_s + q_b; Φ' is L x Lz and q, q_b are null. Lz 0: none.
    const float* z;
    int Lz;
    const float* residual;                                                        // (B, H, W, Cout) or null
    const float *fc1, *gate, *scale_w, *phi_w, *phi_b, *q, *q_b, *p, *w0, *bias;  // w0 null: epilogue
    // DCDDepthwise only (run_depthwise; q and q_b null, Cin = Cout = C): w0 (C, k*k) and r
    // (L, k*k) the kernels, out (B, Ho, Wo, C); a tap (ky, kx) reads x at row
    // oy * stride - pad_t + ky * dilation (columns alike with pad_l).
    const float* r;
    int k, pad_t, pad_l, dilation;
    const float* prepared;  // the constants' packed forms, made by KernelTable::prepare
    float* out;             // (B, H, W, Cout)
    // Runs body(ctx, begin, end) over row ranges covering [0, m) (in multiples of grain,
    // possibly on several threads, returns when all are done); null: one call on this thread.
    void (*parallel_rows)(int m, int grain, void (*body)(void* ctx, int begin, int end), void* ctx);
    // 0: one parallel region per call, the phases its stages; 1: a region per split phase
    // (DCD_DEPLOY_REGIONS=stage, for measuring the two against each other)
    int region_per_stage;
    int profile;  // accumulate phase times into phase_seconds
    double phase_seconds[PH_COUNT];
};

struct KernelTable {
    const char* name;
    int nr;  // panel width (output channels per packed panel)
    // The constant weights rearranged for this ISA's kernels (w0, q and p in packed panels,
    // qᵀ, phi_wᵀ, scale_wᵀ): prepared_size floats, filled by prepare from the shapes and
    // w0, q, p, phi_w, scale_w of p. The op makes it once per weights and keeps it (the
    // weights are Constants).
    size_t (*prepared_size)(const Params* p);
    void (*prepare)(const Params* p, float* dst);
    void (*run)(Params* p);
    // out = act(lam * conv + (P phi') (Q x_s + q_b) + bias + residual), out (B, Ho, Wo, Cout):
    // the DCDConvEpilogue op (prepared with w0 null); with Lz > 0, (P phi') z in place of the
    // latent term.
    void (*run_epilogue)(Params* p);
    // out = act(x (*) K + bias + residual) per sample, K[c] = lam[c] w0[c] + (p phi')[c] r: the
    // DCDDepthwise op (prepared with w0 and q null), depthwise_kernels.inc.
    void (*run_depthwise)(Params* p);
};

const KernelTable* kernels_portable();
#if defined(DCD_WITH_X86)
const KernelTable* kernels_avx2();
const KernelTable* kernels_avx512();
#endif

// Provided by the host, kernel_host.cpp (compiled for the baseline ISA; the extension and
// the test driver link the same file).
double now_seconds();
// Per-thread grow-only scratch buffer number `slot` (0..15) of at least n floats, 64-byte aligned.
float* scratch(int slot, size_t n);
// A waiting thread's pause between two looks at what it waits for (spins: how many looks so
// far): a CPU pause hint, after a while a yield to the OS (the thread it waits for may have
// been preempted).
void spin_pause(int spins);

}  // namespace dcd
