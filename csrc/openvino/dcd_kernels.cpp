// Per-ISA kernels of the fused DCD 1x1 op (see /docs or ovspec: contract of DCDPointwise).
//
// This file is compiled once per instruction set: with -DDCD_ISA_AVX512 (+ -mavx512f ...),
// with -DDCD_ISA_AVX2 (+ -mavx2 -mfma) and with neither (baseline x86-64 / any CPU). The
// vector code uses GCC vector extensions, so the same source gives 16-, 8- or 4-wide code.
// Everything here has internal linkage except the one KernelTable accessor per ISA, and no
// standard-library header is included: no inline function compiled with AVX-512 flags can be
// shared with (and picked by the linker for) the baseline code.
//
// Layouts: x, residual, out are NHWC, so one sample is a row-major (N x C) matrix, N = H*W.
// Weights for the GEMM are "packed": the (rows x K) matrix M (rows = output channels) is
// stored transposed in panels of NR output channels: panel starting at column j0 has width
// wp = min(NR, roundup(rows - j0, VW)) and lives at dst + j0*K as K rows of wp floats
// (zero-padded past `rows`).
#include "dcd_kernels.hpp"

#if (defined(DCD_ISA_AVX512) || defined(DCD_ISA_AVX2)) && !defined(__x86_64__)
#error "DCD_ISA_AVX512 / DCD_ISA_AVX2 kernels are x86-64 only; build the portable kernels (no DCD_ISA_*) for this CPU"
#endif
#if defined(DCD_ISA_AVX512) || defined(DCD_ISA_AVX2)
#include <immintrin.h>  // masked loads/stores only (static inline intrinsics)
#endif

#if defined(DCD_ISA_AVX512)
#define DCD_NS avx512
#ifndef DCD_KC
#define DCD_KC 128  // measured: 128 beats 64, 192, 256 at the 7x7 latent layers (B block 16 KB)
#endif
#define DCD_VW 16
#define DCD_MR 12
#elif defined(DCD_ISA_AVX2)
#define DCD_NS avx2
#ifndef DCD_KC
#define DCD_KC 768  // measured on a Zen 3: K up to 1152 in one block, the 7x7 layers 4% faster than 256
#endif
#define DCD_VW 8
#define DCD_MR 6
#else
#define DCD_NS portable
#ifndef DCD_KC
#define DCD_KC 256
#endif
#define DCD_VW 4
#if defined(__aarch64__)
// NEON has 32 vector registers (SSE 16): 8 x 2 accumulators + 2 B + 1 A fit with no spill
// in GCC 12's code (12 rows spill); speed not measured here, only correctness (under qemu)
#define DCD_MR 8
#else
#define DCD_MR 6
#endif
#endif

namespace dcd {
namespace DCD_NS {
namespace {

constexpr int VW = DCD_VW;   // floats per vector
constexpr int MR = DCD_MR;   // rows (pixels) per micro-tile
constexpr int NV = 2;        // vectors per micro-tile row
constexpr int NR = VW * NV;  // panel width (output channels)
constexpr int KC = DCD_KC;   // K block (X part); B block KC x NR stays in L1
constexpr int MC = MR * 16;  // rows per block
#ifndef DCD_PF_LOCALITY
#define DCD_PF_LOCALITY 2
#endif
#ifndef DCD_FORM_PF_ROWS
// measured on an Intel Xeon (AVX-512, AMX): forming W(x) 384 x 384 from a w0 out of L2
// 104-109 -> 77-82 µs (12 rows: 84, 96: 80-83, 192: 87-98); MobileNetV2 x1.0's forming
// 0.309-0.319 -> 0.291-0.293 ms per image (docs/performance.md, round twenty-six)
#define DCD_FORM_PF_ROWS 24
#endif
#ifndef DCD_ROWS_OUTER_BYTES
#define DCD_ROWS_OUTER_BYTES (64 * 1024)  // measured: helps 16->96@112 by ~10%, hurts 64->384@14 above it
#endif

typedef float vf __attribute__((vector_size(VW * 4)));
typedef float vfu __attribute__((vector_size(VW * 4), aligned(4), may_alias));

inline vf ld(const float* p) { return *reinterpret_cast<const vfu*>(p); }
inline void st(float* p, vf v) { *reinterpret_cast<vfu*>(p) = v; }
inline vf bc(float s) { return s - vf{}; }

// The first n (1..VW) floats of p, zeros after; store the first n lanes of v.
#if defined(DCD_ISA_AVX512)
constexpr bool kMask = true;
inline vf ld_mask(const float* p, int n) { return (vf)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p); }
inline void st_mask(float* p, vf v, int n) { _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v); }
#elif defined(DCD_ISA_AVX2)
constexpr bool kMask = true;
alignas(64) const int kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
inline __m256i mask8(int n) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - n)); }
inline vf ld_mask(const float* p, int n) { return (vf)_mm256_maskload_ps(p, mask8(n)); }
inline void st_mask(float* p, vf v, int n) { _mm256_maskstore_ps(p, mask8(n), (__m256)v); }
#else
constexpr bool kMask = false;  // edge tiles go through a temporary (edge_tile)
inline vf ld_mask(const float* p, int n) {
    vf v = vf{};
    for (int i = 0; i < n; ++i) v[i] = p[i];
    return v;
}
inline void st_mask(float* p, vf v, int n) {
    for (int i = 0; i < n; ++i) p[i] = v[i];
}
#endif  // (0 + s is not s for s = -0: not foldable)
inline int imin(int a, int b) { return a < b ? a : b; }
// lo < a ? lo : a (the larger, a if it is NaN: as PyTorch's relu) and hi < a ? hi : a:
// x86's max/min return their second operand when either is NaN, one instruction where
// the compiler makes a compare and a blend of the conditional (measured: see the GEMM)
#if defined(DCD_ISA_AVX512) && !defined(DCD_NO_MAXPS)
inline vf vmax_lo(vf lo, vf a) { return (vf)_mm512_max_ps((__m512)lo, (__m512)a); }
inline vf vmin_hi(vf hi, vf a) { return (vf)_mm512_min_ps((__m512)hi, (__m512)a); }
#elif defined(DCD_ISA_AVX2) && !defined(DCD_NO_MAXPS)
inline vf vmax_lo(vf lo, vf a) { return (vf)_mm256_max_ps((__m256)lo, (__m256)a); }
inline vf vmin_hi(vf hi, vf a) { return (vf)_mm256_min_ps((__m256)hi, (__m256)a); }
#else
inline vf vmax_lo(vf lo, vf a) { return a < lo ? lo : a; }
inline vf vmin_hi(vf hi, vf a) { return a > hi ? hi : a; }
#endif
typedef int vi __attribute__((vector_size(VW * 4)));

// exp(v), for SiLU: Cephes' expf (n = round(v / ln 2), ln 2 in two parts, a degree-5
// polynomial on the rest; about 1 ulp), v clamped to [-87, 88] so that 2^n is a normal
// float (sigmoid's tails are 0 or 1 to float precision long before). NaN stays NaN.
inline vf vexp(vf v) {
    v = vmin_hi(bc(88.f), vmax_lo(bc(-87.f), v));
    vf fx = v * 1.44269504088896341f + 0.5f;
    const vf t = __builtin_convertvector(__builtin_convertvector(fx, vi), vf);  // toward zero
    fx = t - (vf)((t > fx) & (vi)bc(1.f));                                      // floor
    v = v - fx * 0.693359375f - fx * -2.12194440e-4f;
    vf y = bc(1.9875691500e-4f);
    y = y * v + 1.3981999507e-3f;
    y = y * v + 8.3334519073e-3f;
    y = y * v + 4.1665795894e-2f;
    y = y * v + 1.6666665459e-1f;
    y = y * v + 5.0000001201e-1f;
    y = y * (v * v) + v + 1.f;
    return y * (vf)((__builtin_convertvector(fx, vi) + 127) << 23);  // y * 2^n
}

// GELU v * Φ(v), Φ the normal CDF, as PyTorch's exact (erf) form: Φ(v) = erfc(-v / √2) / 2.
// erfc(z) for z = |v| / √2 >= 0 is Numerical Recipes' Chebyshev fit (erfcc: fractional
// error below 1.2e-7 for every z, so the tails stay accurate where 1 + erf(v / √2) would
// cancel), Φ(v) = erfc(z) / 2 for v < 0 and 1 - erfc(z) / 2 otherwise. NaN stays NaN.
inline vf vgelu(vf v) {
    const vf z = vmax_lo(v, -v) * 0.70710678118654752f;  // |v| / √2 (NaN kept)
    const vf t = 1.f / (1.f + 0.5f * z);
    vf y = bc(0.17087277f);
    y = y * t - 0.82215223f;
    y = y * t + 1.48851587f;
    y = y * t - 1.13520398f;
    y = y * t + 0.27886807f;
    y = y * t - 0.18628806f;
    y = y * t + 0.09678418f;
    y = y * t + 0.37409196f;
    y = y * t + 1.00002368f;
    y = y * t - 1.26551223f;
    const vf half_erfc = 0.5f * t * vexp(y - z * z);
    const vi neg = v < 0.f;  // all ones where v < 0
    return v * (vf)(((vi)half_erfc & neg) | ((vi)(1.f - half_erfc) & ~neg));
}

// Mish v * tanh(softplus(v)) = v * t / (t + 2) with t = n (n + 2), n = e^v (tanh(log(1 + n))
// = ((1 + n)^2 - 1) / ((1 + n)^2 + 1), with no cancellation for small n). v above 20 takes
// n = e^20, where the factor is 1 to float precision (PyTorch's softplus is v there too);
// vexp's clamp at -87 leaves below that a result within 1e-36 of 0. NaN stays NaN (v *).
inline vf vmish(vf v) {
    const vf n = vexp(vmin_hi(bc(20.f), v));
    const vf t = n * (n + 2.f);
    return v * (t / (t + 2.f));
}

// The activations with more than a max and a min (ReLU, ReLU6 are written where they are
// used), as PyTorch computes them: SiLU v * sigmoid(v) = v / (1 + e^-v); Hardswish
// v * min(max(v + 3, 0), 6) / 6; GELU (vgelu); Mish (vmish).
inline vf act_smooth(vf v, int act) {
    if (act == ACT_SILU) return v / (1.f + vexp(-v));
    if (act == ACT_GELU) return vgelu(v);
    if (act == ACT_MISH) return vmish(v);
    return v * vmin_hi(bc(6.f), vmax_lo(vf{}, v + 3.f)) / 6.f;
}

// LeakyReLU with negative slope `slope` (any finite one), as PyTorch's leaky_relu: v where
// v >= 0, slope * v below; NaN stays NaN (v < 0 is false for it).
inline vf vleaky(vf v, vf slope) {
    const vi neg = v < 0.f;  // all ones where v < 0
    return (vf)(((vi)(v * slope) & neg) | ((vi)v & ~neg));
}

// The epilogue's activation on a register tile of accumulators (the GEMM kernels'); alpha:
// ACT_LEAKY_RELU's negative slope; slope: ACT_PRELU's, the tile's N vectors of channels
// (zero-padded past the layer's last).
template <int M, int N>
__attribute__((always_inline)) inline void activate(vf (&acc)[M][N], int act, float alpha, const float* slope) {
    if (act == ACT_RELU || act == ACT_RELU6) {
        const vf z = vf{};
#pragma GCC unroll 16
        for (int i = 0; i < M; ++i)
#pragma GCC unroll 6
            for (int v = 0; v < N; ++v) acc[i][v] = vmax_lo(z, acc[i][v]);  // NaN stays NaN, as in PyTorch
        if (act == ACT_RELU6) {
            const vf six = bc(6.f);
#pragma GCC unroll 16
            for (int i = 0; i < M; ++i)
#pragma GCC unroll 6
                for (int v = 0; v < N; ++v) acc[i][v] = vmin_hi(six, acc[i][v]);
        }
    } else if (act == ACT_LEAKY_RELU) {
        const vf a = bc(alpha);
        for (int i = 0; i < M; ++i)
            for (int v = 0; v < N; ++v) acc[i][v] = vleaky(acc[i][v], a);
    } else if (act == ACT_PRELU) {
        for (int v = 0; v < N; ++v) {
            const vf s = ld(slope + v * VW);
            for (int i = 0; i < M; ++i) acc[i][v] = vleaky(acc[i][v], s);
        }
    } else if (act != ACT_NONE) {
        for (int i = 0; i < M; ++i)
            for (int v = 0; v < N; ++v) acc[i][v] = act_smooth(acc[i][v], act);
    }
}
inline int roundup(int a, int b) { return (a + b - 1) / b * b; }

// ACT_PRELU's slopes zero-padded to whole panels (the tiles load them a vector at a time, as
// the bias), in scratch slot 15; null for the other activations.
inline const float* padded_slope(const Params& P) {
    if (P.act != ACT_PRELU) return nullptr;
    const int cpad = roundup(P.Cout, NR);
    float* s = scratch(15, (size_t)cpad);
    for (int o = 0; o < cpad; ++o) s[o] = o < P.Cout ? P.slope[o] : 0.f;
    return s;
}

inline float hsig(float v) {
    v = v * (1.f / 6.f) + 0.5f;
    return v < 0.f ? 0.f : (v > 1.f ? 1.f : v);
}
inline float hsum(vf v) {
    float s = 0.f;
    for (int i = 0; i < VW; ++i) s += v[i];
    return s;
}
// Fetch n floats at p into L2 (prefetcht1), one request per 64-byte line
inline void prefetch_l2(const float* p, long n) {
    for (long i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 2);
}
float dot(const float* a, const float* b, int n) {
    vf s0 = vf{}, s1 = vf{}, s2 = vf{}, s3 = vf{};
    int i = 0;
    for (; i + 4 * VW <= n; i += 4 * VW) {
        s0 += ld(a + i) * ld(b + i);
        s1 += ld(a + i + VW) * ld(b + i + VW);
        s2 += ld(a + i + 2 * VW) * ld(b + i + 2 * VW);
        s3 += ld(a + i + 3 * VW) * ld(b + i + 3 * VW);
    }
    for (; i + VW <= n; i += VW) s0 += ld(a + i) * ld(b + i);
    float s = hsum((s0 + s1) + (s2 + s3));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}
// out[0..4) = rows m, m + n, m + 2n, m + 3n of M . v: the four rows share each load of v, and
// two vectors per row at a time make eight independent chains of multiply-adds
void dot4(const float* m, const float* v, int n, float* out) {
    const float *m0 = m, *m1 = m + n, *m2 = m + 2L * n, *m3 = m + 3L * n;
    vf a0 = vf{}, a1 = vf{}, a2 = vf{}, a3 = vf{}, b0 = vf{}, b1 = vf{}, b2 = vf{}, b3 = vf{};
    int i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        const vf u = ld(v + i), w = ld(v + i + VW);
        a0 += ld(m0 + i) * u;
        b0 += ld(m0 + i + VW) * w;
        a1 += ld(m1 + i) * u;
        b1 += ld(m1 + i + VW) * w;
        a2 += ld(m2 + i) * u;
        b2 += ld(m2 + i + VW) * w;
        a3 += ld(m3 + i) * u;
        b3 += ld(m3 + i + VW) * w;
    }
    for (; i + VW <= n; i += VW) {
        const vf u = ld(v + i);
        a0 += ld(m0 + i) * u;
        a1 += ld(m1 + i) * u;
        a2 += ld(m2 + i) * u;
        a3 += ld(m3 + i) * u;
    }
    float s[4] = {hsum(a0 + b0), hsum(a1 + b1), hsum(a2 + b2), hsum(a3 + b3)};
    for (; i < n; ++i) {
        s[0] += m0[i] * v[i];
        s[1] += m1[i] * v[i];
        s[2] += m2[i] * v[i];
        s[3] += m3[i] * v[i];
    }
    for (int r = 0; r < 4; ++r) out[r] = s[r];
}
// out[r] = M[r, :] . v  (+ b[r]): four rows at a time (dot4). One row at a time, each row's
// dot waited on its own chain and its horizontal sum: fc1 and the gate are 4-128 rows of
// 4-2048 floats (ResNet-18's fc1 took 20% longer).
void matvec(const float* m, const float* v, const float* b, int rows, int n, float* out) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) dot4(m + (long)r * n, v, n, out + r);
    for (; r < rows; ++r) out[r] = dot(m + (long)r * n, v, n);
    if (b)
        for (r = 0; r < rows; ++r) out[r] += b[r];
}
struct MatvecJob {
    const float *m, *v;
    int n;
    float* out;
};
void matvec_rows(void* ctx, int r0, int r1) {
    const MatvecJob& j = *static_cast<const MatvecJob*>(ctx);
    matvec(j.m + (long)r0 * j.n, j.v, nullptr, r1 - r0, j.n, j.out + r0);
}
inline void add_row(float* acc, const float* src, int n) {
    int i = 0;
    for (; i + VW <= n; i += VW) st(acc + i, ld(acc + i) + ld(src + i));
    for (; i < n; ++i) acc[i] += src[i];
}
inline void zero(float* p, long n) {
    for (long i = 0; i < n; ++i) p[i] = 0.f;
}

// ---------------------------------------------------------------------------------------------
// Micro-kernel: an M x (N*VW) tile of C, accumulated in registers.
//   acc  = c0 ? c0 (* c0scale) : 0
//   acc += A1 (M x k1) . B1 (k1 x cols);  acc *= scale1 (per column)
//   acc += A2 (M x k2) . B2 (k2 x cols)
//   epi:  acc = act(acc + bias + res)
//   C = acc (full tiles only: gemm() routes an edge panel's tiles through a temporary)
struct Tile {
    const float* a1;
    long lda1;
    int k1;
    const float* b1;
    int ldb1;
    const float* scale1;
    const float* a2;
    long lda2;
    int k2;
    const float* b2;
    int ldb2;
    const float* c0;
    long ldc0;
    const float* c0scale;
    float* c;
    long ldc;
    const float* bias;
    const float* res;
    long ldres;
    int act;
    float alpha;         // ACT_LEAKY_RELU's slope
    const float* slope;  // ACT_PRELU's, from the tile's first column
    int epi;
    int ncols;
    // The B block the GEMM visits next (pf_lines cache lines from pf), fetched while this
    // tile's K loop runs: null but in the first row tile of a panel (gemm)
    const float* pf;
    int pf_lines;
};

// acc (M rows x N vectors) += A column (M, stride lda) * one packed row of B (N vectors)
template <int M, int N>
inline void rank_1(vf (&acc)[M][N], const float* a, long lda, const float* b) {
    vf bv[N];
#pragma GCC unroll 4
    for (int v = 0; v < N; ++v) bv[v] = ld(b + v * VW);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
        const vf av = bc(a[i * lda]);
#pragma GCC unroll 4
        for (int v = 0; v < N; ++v) acc[i][v] += av * bv[v];
    }
}

// acc (M rows x N vectors) += A (M x kn, row stride lda) * B (kn packed rows of N vectors)
template <int M, int N>
inline void rank_k(vf (&acc)[M][N], const float* a, long lda, const float* b, long ldb, int kn) {
    for (int k = 0; k < kn; ++k, b += ldb) {
        rank_1<M, N>(acc, a + k, lda, b);
    }
}
// The same for a one-vector tile (a panel of VW columns: a 24-wide layer's last panel, Z's
// columns past 16), even and odd k into two sets of accumulators: with M accumulators alone
// (6 on AVX2) the FMAs wait on their latency (4 cycles, two FMA units: 8 chains needed).
template <int M>
inline void rank_k_split(vf (&acc)[M][1], const float* a, long lda, const float* b, long ldb, int kn) {
    vf odd[M][1];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) odd[i][0] = vf{};
    int k = 0;
    for (; k + 2 <= kn; k += 2, b += 2 * ldb) {
        rank_1<M, 1>(acc, a + k, lda, b);
        rank_1<M, 1>(odd, a + k + 1, lda, b + ldb);
    }
    if (k < kn) rank_1<M, 1>(acc, a + k, lda, b);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) acc[i][0] += odd[i][0];
}
#if defined(DCD_ISA_AVX2) && !defined(DCD_NO_SPLIT1)
constexpr bool kSplit1 = true;
#else
constexpr bool kSplit1 = false;
#endif
template <int M, int N>
inline void rank_k_any(vf (&acc)[M][N], const float* a, long lda, const float* b, long ldb, int kn) {
    if constexpr (N == 1 && kSplit1) rank_k_split<M>(acc, a, lda, b, ldb, kn);
    else rank_k<M, N>(acc, a, lda, b, ldb, kn);
}
// the same, fetching pf_lines cache lines from pf into L2 along the way (about as many per k
// as B takes): the next B block, which the layers whose weights come from memory (the
// latent form's w0 and q) otherwise wait for at each panel's first row tile
template <int M, int N>
inline void rank_k_pf(vf (&acc)[M][N], const float* a, long lda, const float* b, long ldb, int kn, const float* pf,
                      int pf_lines) {
    const int per_k = (pf_lines + kn - 1) / kn;
    int line = 0;
    for (int k = 0; k < kn; ++k, b += ldb) {
        for (int u = 0; u < per_k && line < pf_lines; ++u, ++line)
            __builtin_prefetch(pf + line * 16L, 0, DCD_PF_LOCALITY);
        rank_1<M, N>(acc, a + k, lda, b);
    }
}
// MASK: the last vector of each row holds only rem = ncols - (N-1)*VW valid columns
// (masked loads of c0 and res, masked store); everything else is full width. PF: the K loop
// fetches t.pf (a kernel of its own: with both loops in one kernel the weight form's
// short-K expansions took 1.5-7% longer).
template <int M, int N, bool MASK, bool PF = false>
__attribute__((noinline)) void ukernel(const Tile& t) {
    vf acc[M][N];
    const int rem = t.ncols - (N - 1) * VW;
    auto ldc = [rem](const float* p, int v) { return (MASK && v == N - 1) ? ld_mask(p, rem) : ld(p); };
    if (t.c0) {
#pragma GCC unroll 16
        for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
            for (int v = 0; v < N; ++v) acc[i][v] = ldc(t.c0 + i * t.ldc0 + v * VW, v);
        if (t.c0scale) {
#pragma GCC unroll 4
            for (int v = 0; v < N; ++v) {
                const vf s = ld(t.c0scale + v * VW);
#pragma GCC unroll 16
                for (int i = 0; i < M; ++i) acc[i][v] *= s;
            }
        }
    } else {
#pragma GCC unroll 16
        for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
            for (int v = 0; v < N; ++v) acc[i][v] = vf{};
    }
    // The tile's output lines, fetched for writing while the K loop runs (a short K, as in
    // MobileNetV2's expansions, otherwise waits for them at the stores): measured 3-10% off
    // those layers' GEMM, 2.6-3.7% off all the fused layers' GEMMs (x1.0, x0.5) on an EPYC.
    if (t.epi)
        for (int i = 0; i < M; ++i)
            for (int v = 0; v < N; ++v) __builtin_prefetch(t.c + i * t.ldc + v * VW, 1, 3);
    if constexpr (PF) rank_k_pf<M, N>(acc, t.a1, t.lda1, t.b1, t.ldb1, t.k1, t.pf, t.pf_lines);
    else rank_k_any<M, N>(acc, t.a1, t.lda1, t.b1, t.ldb1, t.k1);
    if (t.scale1) {
#pragma GCC unroll 4
        for (int v = 0; v < N; ++v) {
            const vf s = ld(t.scale1 + v * VW);
#pragma GCC unroll 16
            for (int i = 0; i < M; ++i) acc[i][v] *= s;
        }
    }
    if (t.k2 > 0) rank_k_any<M, N>(acc, t.a2, t.lda2, t.b2, t.ldb2, t.k2);  // the latent form's Z columns
    if (t.epi) {
        if (t.bias) {
#pragma GCC unroll 4
            for (int v = 0; v < N; ++v) {
                const vf bb = ld(t.bias + v * VW);
#pragma GCC unroll 16
                for (int i = 0; i < M; ++i) acc[i][v] += bb;
            }
        }
        if (t.res) {
#pragma GCC unroll 16
            for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
                for (int v = 0; v < N; ++v) acc[i][v] += ldc(t.res + i * t.ldres + v * VW, v);
        }
        activate<M, N>(acc, t.act, t.alpha, t.slope);
    }
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < N; ++v) {
            if (MASK && v == N - 1) st_mask(t.c + i * t.ldc + v * VW, acc[i][v], rem);
            else st(t.c + i * t.ldc + v * VW, acc[i][v]);
        }
}

template <int M, int N, bool MASK, bool PF = false>
struct Rows {
    static void run(int m, const Tile& t) {
        if (m == M) ukernel<M, N, MASK, PF>(t);
        else Rows<M - 1, N, MASK, PF>::run(m, t);
    }
};
template <int N, bool MASK, bool PF>
struct Rows<0, N, MASK, PF> {
    static void run(int, const Tile&) {}
};
// a tile of m <= MR rows in a panel of wp columns (t.ncols valid)
inline void tile(int m, int wp, const Tile& t) {
    const bool full = t.ncols == wp;
    if (wp == NR) {
        if (full && t.pf) Rows<MR, NV, false, true>::run(m, t);  // (an edge panel's tile drops pf)
        else if (full) Rows<MR, NV, false>::run(m, t);
        else Rows<MR, NV, kMask>::run(m, t);
    } else {
        if (full) Rows<MR, 1, false>::run(m, t);
        else Rows<MR, 1, kMask>::run(m, t);
    }
}

// A tile of the last panel whose columns do not fill its vectors: run it on a temporary
// full-width tile (the initial value and the residual copied in, zero-padded) and copy the
// valid columns out.
[[maybe_unused]] void edge_tile(const Tile& t0, int mm, int wp) {
    alignas(64) float cbuf[MR * NR];
    alignas(64) float rbuf[MR * NR];
    const int nc = t0.ncols;
    Tile t = t0;
    if (t0.c0) {
        for (int i = 0; i < mm; ++i)
            for (int j = 0; j < wp; ++j) cbuf[i * wp + j] = j < nc ? t0.c0[i * t0.ldc0 + j] : 0.f;
        t.c0 = cbuf;
        t.ldc0 = wp;
    }
    if (t0.res) {
        for (int i = 0; i < mm; ++i)
            for (int j = 0; j < wp; ++j) rbuf[i * wp + j] = j < nc ? t0.res[i * t0.ldres + j] : 0.f;
        t.res = rbuf;
        t.ldres = wp;
    }
    t.c = cbuf;
    t.ldc = wp;
    t.ncols = wp;
    tile(mm, wp, t);
    for (int i = 0; i < mm; ++i)
        for (int j = 0; j < nc; ++j) t0.c[i * t0.ldc + j] = cbuf[i * wp + j];
}

// C (m x n, row-major with ldc) = epilogue(init + A1 . B1ᵀ [*scale1] + A2 . B2ᵀ).
// B1: packed with K = k1, B2: packed with K = k2 (same panel columns as C).
struct Gemm {
    int m, n;
    const float* a1;
    long lda1;
    int k1;
    const float* b1;
    const float* scale1;
    const float* a2;
    long lda2;
    int k2;
    const float* b2;
    const float* c0;
    long ldc0;
    const float* c0scale;
    float* c;
    long ldc;
    const float* bias;
    const float* res;
    long ldres;
    int act;
    float alpha;         // ACT_LEAKY_RELU's slope
    const float* slope;  // ACT_PRELU's per column, zero-padded to the panels' width
    // B1 is a prepared constant the layers between two calls push out of the caches (the
    // latent form's w0 and q): each panel's first row tile fetches the next B block
    // (Tile::pf). Off for a B just written (W(x), ppk): there it measured 2-4% slower.
    bool prefetch_b;
    // C0 is a constant streamed from memory, rows ldc0 == n apart (the weight form's w0
    // panel when forming W(x)): each row tile fetches the C0 rows this many rows ahead
    int prefetch_c0_rows;
};

// One micro-tile: rows [i, i + mm), the panel at column j0, K block [k0, k0 + kc); pf: the
// B block to fetch meanwhile (next_block), or null.
struct BlockRef {
    const float* p;
    int lines;
};
inline void gemm_tile(const Gemm& g, int k0, int kc, bool first, bool last, int i, int mm, int j0, BlockRef pf) {
    const int wp = imin(NR, roundup(g.n - j0, VW));
    Tile t;
    t.pf = pf.p;
    t.pf_lines = pf.lines;
    t.a1 = g.a1 + i * g.lda1 + k0;
    t.lda1 = g.lda1;
    t.k1 = kc;
    t.b1 = g.b1 + (long)j0 * g.k1 + (long)k0 * wp;
    t.ldb1 = wp;
    t.scale1 = (last && g.scale1) ? g.scale1 + j0 : nullptr;
    t.k2 = last ? g.k2 : 0;
    t.a2 = t.k2 ? g.a2 + i * g.lda2 : nullptr;
    t.lda2 = g.lda2;
    t.b2 = t.k2 ? g.b2 + (long)j0 * g.k2 : nullptr;
    t.ldb2 = wp;
    t.c = g.c + i * g.ldc + j0;
    t.ldc = g.ldc;
    if (first) {
        t.c0 = g.c0 ? g.c0 + i * g.ldc0 + j0 : nullptr;
        t.ldc0 = g.ldc0;
        t.c0scale = g.c0scale ? g.c0scale + j0 : nullptr;
    } else {  // later K blocks continue from the partial sums in C
        t.c0 = t.c;
        t.ldc0 = g.ldc;
        t.c0scale = nullptr;
    }
    t.bias = (last && g.bias) ? g.bias + j0 : nullptr;
    t.res = (last && g.res) ? g.res + i * g.ldres + j0 : nullptr;
    t.ldres = g.ldres;
    t.act = last ? g.act : ACT_NONE;
    t.alpha = g.alpha;
    t.slope = g.slope ? g.slope + j0 : nullptr;
    t.epi = last;
    t.ncols = imin(wp, g.n - j0);
    if (kMask || t.ncols == wp) tile(mm, wp, t);
    else edge_tile(t, mm, wp);
}

inline bool last_block(int b, int nb) { return b == nb - 1; }
inline int block_k0(int k1, int b, int nb) { return (int)((long)k1 * b / nb) & ~15; }
inline int block_k1(int k1, int b, int nb) { return last_block(b, nb) ? k1 : block_k0(k1, b + 1, nb); }

// The B block (panel j0, K block b) the first row tile visits after (j0 - NR, b): the next
// panel of the block, or the next block's first panel; {null, 0} after the last. The
// packed layout keeps a panel's K rows together, so a block is one contiguous range.
BlockRef next_block(const Gemm& g, int b, int nb, int j0) {
    while (j0 >= g.n) {
        if (last_block(b, nb)) return {nullptr, 0};
        ++b;
        j0 -= roundup(g.n, NR);
    }
    const int wp = imin(NR, roundup(g.n - j0, VW));
    const int k0 = block_k0(g.k1, b, nb), kc = block_k1(g.k1, b, nb) - k0;
    return {g.b1 + (long)j0 * g.k1 + (long)k0 * wp, (int)(((long)kc * wp + 15) / 16)};
}

// The C0 rows g.prefetch_c0_rows below row i (h rows' worth), or {null, 0}
inline BlockRef c0_ahead(const Gemm& g, bool first, int i, int h) {
    const int r = i + g.prefetch_c0_rows;
    if (!first || !g.prefetch_c0_rows || r >= g.m) return {nullptr, 0};
    return {g.c0 + (long)r * g.ldc0, (int)(((long)imin(h, g.m - r) * g.ldc0 + 15) / 16)};
}

// shortk_gemm: a short K's GEMM (the expansions), in its own file but this translation unit
#include "shortk_kernels.inc"

void gemm(const Gemm& g) {
    if (shortk_applies(g)) return shortk_gemm(g);
    const int npad = roundup(g.n, VW);
    // K1 in nb even blocks of at most 1.5 KC (K = 160 is one block, not 128 + 32)
    const int nb = (g.k1 + KC * 3 / 2 - 1) / (KC * 3 / 2);
    for (int b = 0; b < nb; ++b) {
        // block bounds on multiples of 16 floats (whole cache lines of the A rows)
        const int k0 = block_k0(g.k1, b, nb);
        const int kc = block_k1(g.k1, b, nb) - k0;
        const bool first = b == 0;
        const bool last = b == nb - 1;
        // A K block of B that stays in L2 (a short K): each row tile does all panels, so
        // output rows are written whole and the A tile stays in L1. Otherwise each B panel
        // block stays in L1 for all the row tiles of a row block. Either way the first row
        // tile of each panel fetches the next B block (measured: see Tile::pf).
        const bool rows_outer = (long)(kc + (last ? g.k2 : 0)) * npad * 4 <= DCD_ROWS_OUTER_BYTES;
        for (int i0 = 0; i0 < g.m; i0 += MC) {
            const int i1 = imin(i0 + MC, g.m);
            // the block's rows in nt tiles of as even a height as can be (49 = 10 x 4 + 9,
            // not 12 x 4 + 1: a one-row tile runs at the FMA latency, not its throughput); the
            // first `tall` tiles are one row higher
            const int nt = (i1 - i0 + MR - 1) / MR, h = (i1 - i0) / nt, tall = (i1 - i0) % nt;
            const bool pf = i0 == 0 && g.prefetch_b;
            if (rows_outer) {
                for (int ti = 0, i = i0; ti < nt; i += h + (ti < tall), ++ti)
                    for (int j0 = 0; j0 < g.n; j0 += NR)
                        gemm_tile(g, k0, kc, first, last, i, h + (ti < tall), j0,
                                  pf && ti == 0 ? next_block(g, b, nb, j0 + NR) : c0_ahead(g, first, i, h));
            } else {
                for (int j0 = 0; j0 < g.n; j0 += NR)
                    for (int ti = 0, i = i0; ti < nt; i += h + (ti < tall), ++ti)
                        gemm_tile(g, k0, kc, first, last, i, h + (ti < tall), j0,
                                  pf && ti == 0 ? next_block(g, b, nb, j0 + NR) : BlockRef{nullptr, 0});
            }
        }
    }
}
// gemm() over a row range of g (the rows are independent)
void gemm_rows(void* ctx, int r0, int r1) {
    const Gemm& g = *static_cast<const Gemm*>(ctx);
    Gemm s = g;
    s.m = r1 - r0;
    s.a1 = g.a1 + r0 * g.lda1;
    if (g.k2) s.a2 = g.a2 + r0 * g.lda2;
    if (g.c0) s.c0 = g.c0 + r0 * g.ldc0;
    s.c = g.c + r0 * g.ldc;
    if (g.res) s.res = g.res + r0 * g.ldres;
    gemm(s);
}
// gemm(), split over rows when the op was given a parallel runner (more than one thread)
[[maybe_unused]] void gemm_par(const Params& P, const Gemm& g) {
    if (P.parallel_rows && g.m >= 2 * MR) P.parallel_rows(g.m, MR, gemm_rows, const_cast<Gemm*>(&g));
    else gemm(g);
}
static_assert(NV == 2, "the edge-panel dispatch in gemm() assumes two vectors per row");

// A phase split the same way, over channels, outputs or panels, when it reads at least
// kSplitMin floats: a region of its own. The ops' phases do not use it: they are stages of
// one region per call (stages.inc; Team::add takes the same arguments).
constexpr long kSplitMin = 32768;
[[maybe_unused]] void par(const Params& P, int m, int grain, long work, void (*body)(void*, int, int), void* ctx) {
    if (P.parallel_rows && work >= kSplitMin && m >= 2 * grain) P.parallel_rows(m, grain, body, ctx);
    else body(ctx, 0, m);
}

#include "stages.inc"

// Pack src (rows x k, row-major, optional per-row scale) transposed into panels of a
// packed matrix with K = ktot, at K offset koff.
void pack_t(const float* src, int rows, int k, const float* scale, float* dst, int ktot, int koff) {
    for (int j0 = 0; j0 < rows; j0 += NR) {
        const int wp = imin(NR, roundup(rows - j0, VW));
        const int nj = imin(wp, rows - j0);
        float* d = dst + (long)j0 * ktot + (long)koff * wp;
        for (int kk = 0; kk < k; ++kk) {
            float* dk = d + (long)kk * wp;
            for (int jj = 0; jj < nj; ++jj) dk[jj] = src[(long)(j0 + jj) * k + kk] * (scale ? scale[j0 + jj] : 1.f);
            for (int jj = nj; jj < wp; ++jj) dk[jj] = 0.f;
        }
    }
}

size_t packed_size(int rows, int k) { return (size_t)roundup(rows, VW) * (size_t)k; }

// Φ' is L x phi_cols: L, or Lz for the epilogue's latent input (no q then)
inline int phi_cols(const Params& P) { return P.Lz > 0 ? P.Lz : P.L; }

// prepared constants: [w0 packed (K = Cin)] [q packed (K = Cin)] [p packed (K = L)]
// [qᵀ (Cin x L)] [the heads' weights, transposed and side by side: S x R, each row
// scale_w[:, s] (with attention) then phi_w[:, s]], R = head_width(P): one weight stream
// for both heads, read row by row
struct Prepared {
    const float *w0p, *qp, *pp, *qt, *headt;
};
inline int head_width(const Params& P) { return (P.attention ? P.Cout : 0) + P.L * phi_cols(P); }
template <class T>
Prepared prepared_parts(T* base, const Params& P) {
    const bool q = P.q && P.Lz == 0;  // no q: the depthwise op's, or the latent input's
    Prepared r;
    r.w0p = base;
    r.qp = r.w0p + (P.w0 ? packed_size(P.Cout, P.Cin) : 0);  // no w0: the epilogue op's
    r.pp = r.qp + (q ? packed_size(P.L, P.Cin) : 0);
    r.qt = r.pp + packed_size(P.Cout, P.L);
    r.headt = r.qt + (q ? (size_t)P.Cin * P.L : 0);
    return r;
}
size_t prepared_size(const Params* P) {
    const Prepared r = prepared_parts((const float*)nullptr, *P);
    return (size_t)(r.headt - r.w0p) + (size_t)P->S * head_width(*P);
}
void transpose(const float* src, int rows, int cols, float* dst) {  // dst (cols x rows)
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) dst[(long)c * rows + r] = src[(long)r * cols + c];
}
void prepare(const Params* P, float* dst) {
    const Prepared r = prepared_parts(dst, *P);
    const int cout = P->Cout, cin = P->Cin, L = P->L;
    if (P->w0) pack_t(P->w0, cout, cin, nullptr, const_cast<float*>(r.w0p), cin, 0);
    if (P->q && P->Lz == 0) pack_t(P->q, L, cin, nullptr, const_cast<float*>(r.qp), cin, 0);
    pack_t(P->p, cout, L, nullptr, const_cast<float*>(r.pp), L, 0);
    if (P->q && P->Lz == 0) transpose(P->q, L, cin, const_cast<float*>(r.qt));
    const int R = head_width(*P), lo = P->attention ? cout : 0;
    float* ht = const_cast<float*>(r.headt);
    for (int s = 0; s < P->S; ++s) {
        for (int o = 0; o < lo; ++o) ht[(long)s * R + o] = P->scale_w[(long)o * P->S + s];
        for (int m = 0; m < L * phi_cols(*P); ++m) ht[(long)s * R + lo + m] = P->phi_w[(long)m * P->S + s];
    }
}

// out[0..R) = b + sum_s y[s] * mt[s, :]: a matrix-vector product with the matrix stored
// transposed (S x R), so the vector runs over the R outputs (no horizontal sums), read
// row after row, eight rows at a time: sequential streams the prefetchers follow (the
// first version walked 64-column strips down all S rows: the branch took 7-11% longer;
// four rows a pass read and wrote `out` twice as often: the branch 5-7% longer on AVX2,
// sixteen rows were slower again), two chains of adds per output vector.
void matvec_t(const float* mt, long ldm, const float* y, const float* b, int S, int R, float* out) {
    constexpr int KR = 8;
    for (int s = 0; s < S || s == 0; s += KR) {
        const int ns = imin(KR, S - s);
        const float* m[KR];
        vf v[KR];
        float yk[KR];
#pragma GCC unroll 8
        for (int k = 0; k < KR; ++k) {
            m[k] = mt + (long)s * ldm + (k < ns ? k * ldm : 0);
            yk[k] = k < ns ? y[s + k] : 0.f;
            v[k] = bc(yk[k]);
        }
        const float* acc = s == 0 ? b : out;
        int r = 0;
        for (; r + VW <= R; r += VW) {
            vf a0 = acc ? ld(acc + r) : vf{}, a1 = vf{};
#pragma GCC unroll 8
            for (int k = 0; k < KR; k += 2) {
                a0 += v[k] * ld(m[k] + r);
                a1 += v[k + 1] * ld(m[k + 1] + r);
            }
            st(out + r, a0 + a1);
        }
        for (; r < R; ++r) {
            float a0 = acc ? acc[r] : 0.f, a1 = 0.f;
            for (int k = 0; k < KR; k += 2) {
                a0 += yk[k] * m[k][r];
                a1 += yk[k + 1] * m[k + 1][r];
            }
            out[r] = a0 + a1;
        }
    }
}
struct MatvecTJob {
    const float *mt, *y;
    int S, R;
    float* out;
};
void matvec_t_cols(void* ctx, int r0, int r1) {
    const MatvecTJob& j = *static_cast<const MatvecTJob*>(ctx);
    matvec_t(j.mt + r0, j.R, j.y, nullptr, j.S, r1 - r0, j.out + r0);
}

// out[0, NVB*VW) (+)= sum_{i < count} x[i * stride + ...]: NVB vectors of channels, the
// last one holding only `last` (1..VW) valid channels. U pixels at a time into separate
// accumulators: with one dependent chain of adds per vector (the first version) a narrow
// block (C 16-48) waits on each add's latency; pooling took 19-25% longer.
template <int NVB, int U>
void colsum_vec(const float* x, long stride, long count, int last, float* out, bool accumulate) {
    vf a[U][NVB];
    for (int u = 0; u < U; ++u)
        for (int v = 0; v < NVB; ++v) a[u][v] = vf{};
    const bool part = last < VW;
    long i = 0;
    auto add = [&](int u, const float* p) {
#pragma GCC unroll 8
        for (int v = 0; v < NVB; ++v) a[u][v] += (v == NVB - 1 && part) ? ld_mask(p + v * VW, last) : ld(p + v * VW);
    };
    for (; i + U <= count; i += U)
#pragma GCC unroll 8
        for (int u = 0; u < U; ++u) add(u, x + (i + u) * stride);
    for (; i < count; ++i) add(0, x + i * stride);
    for (int u = 1; u < U; ++u)
        for (int v = 0; v < NVB; ++v) a[0][v] += a[u][v];
    for (int v = 0; v < NVB; ++v) {
        const int n = v == NVB - 1 ? last : VW;
        vf s = a[0][v];
        if (accumulate) s += ld_mask(out + v * VW, n);
        if (n == VW) st(out + v * VW, s);
        else st_mask(out + v * VW, s, n);
    }
}

// out[c] (+)= sum_{i < count} x[i * stride + c], c < C: blocks of up to 8 vectors of
// channels, each one pass over the rows
void colsum_block(const float* x, long stride, long count, int C, float* out, bool accumulate) {
    for (int c = 0; c < C; c += 8 * VW) {
        const int n = imin(C - c, 8 * VW), nv = (n + VW - 1) / VW, last = n - (nv - 1) * VW;
        const float* p = x + c;
        float* o = out + c;
        switch (nv) {
            case 1:
                colsum_vec<1, 8>(p, stride, count, last, o, accumulate);
                break;
            case 2:
                colsum_vec<2, 4>(p, stride, count, last, o, accumulate);
                break;
            case 3:
                colsum_vec<3, 4>(p, stride, count, last, o, accumulate);
                break;
            case 4:
                colsum_vec<4, 2>(p, stride, count, last, o, accumulate);
                break;
            case 5:
                colsum_vec<5, 2>(p, stride, count, last, o, accumulate);
                break;
            case 6:
                colsum_vec<6, 2>(p, stride, count, last, o, accumulate);
                break;
            case 7:
                colsum_vec<7, 2>(p, stride, count, last, o, accumulate);
                break;
            default:
                colsum_vec<8, 2>(p, stride, count, last, o, accumulate);
                break;
        }
    }
}

// the same over row chunks of about 32 KB, so x is read from memory once however many
// channel blocks there are
void colsum(const float* x, long stride, long count, int C, float* out, bool accumulate) {
    const long chunk = C * 4L * 64 > 32768 ? 64 : 32768 / (C * 4L) + 1;
    for (long i = 0; i < count; i += chunk) {
        const long n = count - i < chunk ? count - i : chunk;
        colsum_block(x + i * stride, stride, n, C, out, accumulate || i > 0);
    }
}

// The 2x2 bins of rows [h0, h1) of a map of at most 4 vectors of channels (NVB; the last
// holding `last`; U pixels at a time per side): bl (+)= the sums over columns [0, cl), br
// over [cr, W), ldx floats per pixel. Each row read in order, left half then right, into
// accumulators kept across the rows: with a colsum call per half row, whose set-up and
// stored sums cost more than the loads on narrow maps, MobileNetV2's 112² x 8 and 56² x
// 16-24 poolings took 1.3-2x as long (x in cache; 1.3-1.4x with x in memory). Summing each
// bin as a rectangle instead (half rows, one bin after the other) was as fast in cache but
// up to 25% slower with x in memory.
template <int NVB, int U>
void bin_rows(const float* x, long ldx, int W, int cl, int cr, int h0, int h1, int last, float* bl, float* br) {
    vf a[2][U][NVB];
    for (int s = 0; s < 2; ++s)
        for (int u = 0; u < U; ++u)
            for (int v = 0; v < NVB; ++v) a[s][u][v] = vf{};
    const bool part = last < VW;
    auto add = [&](vf(&acc)[NVB], const float* p) {
#pragma GCC unroll 4
        for (int v = 0; v < NVB; ++v) acc[v] += (v == NVB - 1 && part) ? ld_mask(p + v * VW, last) : ld(p + v * VW);
    };
    for (int h = h0; h < h1; ++h) {
        const float* xr = x + (long)h * W * ldx;
        int i = 0;
        for (; i + U <= cl; i += U)
            for (int u = 0; u < U; ++u) add(a[0][u], xr + (i + u) * ldx);
        for (; i < cl; ++i) add(a[0][0], xr + i * ldx);
        for (i = cr; i + U <= W; i += U)
            for (int u = 0; u < U; ++u) add(a[1][u], xr + (i + u) * ldx);
        for (; i < W; ++i) add(a[1][0], xr + i * ldx);
    }
    for (int s = 0; s < 2; ++s) {
        float* out = s ? br : bl;
        for (int v = 0; v < NVB; ++v) {
            const int n = v == NVB - 1 ? last : VW;
            vf sum = ld_mask(out + v * VW, n);
            for (int u = 0; u < U; ++u) sum += a[s][u][v];
            if (n == VW) st(out + v * VW, sum);
            else st_mask(out + v * VW, sum, n);
        }
    }
}

// The 2x2 bins (bins: 4 x C, accumulated, then 2 x C of scratch) row after row, each half
// row a colsum (a row in both row bins, odd H, summed once and added to both)
void bins_by_rows(const float* x, long ldx, int H, int W, int C, float* bins) {
    const int r0e = (H + 1) / 2, r1s = H / 2, c0e = (W + 1) / 2, c1s = W / 2;
    float* cs0 = bins + 4 * C;
    float* cs1 = bins + 5 * C;
    for (int h = 0; h < H; ++h) {
        const float* xr = x + (long)h * W * ldx;
        const bool in0 = h < r0e, in1 = h >= r1s;
        if (in0 != in1) {  // the row is in one row bin: sum straight into it
            float* b = bins + (in0 ? 0 : 2 * C);
            colsum(xr, ldx, c0e, C, b, true);
            colsum(xr + (long)c1s * ldx, ldx, W - c1s, C, b + C, true);
        } else {
            colsum(xr, ldx, c0e, C, cs0, false);
            colsum(xr + (long)c1s * ldx, ldx, W - c1s, C, cs1, false);
            add_row(bins, cs0, C);
            add_row(bins + C, cs1, C);
            add_row(bins + 2 * C, cs0, C);
            add_row(bins + 3 * C, cs1, C);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// pooled (Cin x pool²) for the channels [c0, c1) of x
void pool_channels(const Params& P, const float* x0, float* pooled, int c0, int c1) {
    const int H = P.H, W = P.W, C = c1 - c0;
    const long ldx = P.Cin;
    const float* x = x0 + c0;
    if (P.pool == 1) {
        const long n = (long)H * W;
        colsum(x, ldx, n, C, pooled + c0, false);
        const float s = 1.f / (float)n;
        for (int c = c0; c < c1; ++c) pooled[c] *= s;
        return;
    }
    // adaptive 2x2: row bin 0 = [0, ceil(H/2)), bin 1 = [floor(H/2), H); same for columns
    const int r0e = (H + 1) / 2, r1s = H / 2, c0e = (W + 1) / 2, c1s = W / 2;
    float* bins = scratch(10, (size_t)6 * C);  // 4 x C, then one row's two column-bin sums
    zero(bins, 4L * C);
    if (C <= 4 * VW) {  // narrow: one pass per row bin
        const int nv = (C + VW - 1) / VW, last = C - (nv - 1) * VW;
        auto rows = nv == 1 ? bin_rows<1, 2> : nv == 2 ? bin_rows<2, 2> : nv == 3 ? bin_rows<3, 1> : bin_rows<4, 1>;
        rows(x, ldx, W, c0e, c1s, 0, r0e, last, bins, bins + C);
        rows(x, ldx, W, c0e, c1s, r1s, H, last, bins + 2 * C, bins + 3 * C);
    } else {
        bins_by_rows(x, ldx, H, W, C, bins);
    }
    const float rows[2] = {(float)r0e, (float)(H - r1s)}, cols[2] = {(float)c0e, (float)(W - c1s)};
    for (int b = 0; b < 4; ++b) {
        const float s = 1.f / (rows[b >> 1] * cols[b & 1]);
        for (int c = 0; c < C; ++c) pooled[(c0 + c) * 4 + b] = bins[b * C + c] * s;
    }
}
struct PoolJob {
    const Params* P;
    const float* x;
    float* pooled;
};
void pool_range(void* ctx, int c0, int c1) {
    const PoolJob& j = *static_cast<const PoolJob*>(ctx);
    pool_channels(*j.P, j.x, j.pooled, c0, c1);
}

void add_phases(Params& P, const double* ts);

// The order of the products. The latent path's term (p Φ') z for n pixels costs Cout·L·Lz
// to form p Φ' plus n·Cout·L for the GEMM; p (Φ' z), i.e. z2 = z Φ'ᵀ (n·L·Lz) and then the
// GEMM with the prepared packed p as its B, skips forming p Φ' for n·L·Lz: fewer
// multiply-adds when n < Cout (the 7x7 layers, the classifier: 1 pixel, Cout·L² = 1 M).
// Measured (AVX2, EPYC): MobileNetV2's 7x7 layers with Cout 80 (n 49) 1-7% slower, so
// only from 2n <= Cout: the classifiers -25 to -32%, x1.0's 7x7 layers -3 to -6%,
// ResNet-18's 7x7 ones -4 to -6%.
inline bool phi_first_pays(long n, const Params& P) { return 2 * n <= P.Cout; }
// ppk holds p Φ' (Cout x Lz) or, phi_first, Φ' (L x Lz), both packed with K = Lz
inline size_t ppk_size(const Params& P) {
    const size_t a = packed_size(P.Cout, phi_cols(P)), b = packed_size(P.L, phi_cols(P));
    return a > b ? a : b;
}
// z2 (n x L) = z (n x Lz, row stride Lz) Φ'ᵀ, Φ' packed in phik (K = Lz): phi_first's product
Gemm z_phi(const Params& P, const float* z, int n, const float* phik, float* z2) {
    Gemm g{};
    g.m = n;
    g.n = P.L;
    g.a1 = z;
    g.lda1 = phi_cols(P);
    g.k1 = phi_cols(P);
    g.b1 = phik;
    g.c = z2;
    g.ldc = P.L;
    return g;
}

// The dynamic branch of one sample (all three ops) as stages of a Team: pooling (over
// channel blocks), fc1 (over its rows), the gate, both heads as one product over the
// prepared [scale_wᵀ | phi_wᵀ] (over its outputs), then lam (Cout, padded with zeros to a
// whole panel), phi (L x phi_cols, Φ' row-major) and ppk = p phi in one serial step.
struct BranchJob {
    const Params* P;
    const Prepared* pre;
    float *y, *g, *h, *lam, *ppk;
    bool phi_first;  // ppk = Φ' packed (K = phi_cols) for the consumer's z Φ'ᵀ, not p Φ' (phi_first_pays)
    PoolJob pool;
    MatvecJob fc1;
    MatvecTJob heads;
};
void gate_step(void* ctx, int, int) {
    const BranchJob& j = *static_cast<const BranchJob*>(ctx);
    const int S = j.P->S;
    float* y = j.y;
    if (j.P->se) {
        matvec(j.P->gate, y, nullptr, S, S, j.g);
        for (int s = 0; s < S; ++s) y[s] *= hsig(j.g[s]);
    } else {
        for (int s = 0; s < S; ++s) y[s] = y[s] > 0.f ? y[s] : 0.f;
    }
}
void form_pphi(const Params& P, const Prepared& pre, const float* phi, float* ppk);
void heads_step(void* ctx, int, int) {
    const BranchJob& j = *static_cast<const BranchJob*>(ctx);
    const Params& P = *j.P;
    const int Cout = P.Cout;
    for (int o = 0; o < Cout; ++o) j.lam[o] = P.attention ? hsig(j.h[o]) : 1.f;
    for (int o = Cout; o < roundup(Cout, NR); ++o) j.lam[o] = 0.f;
    float* phi = P.attention ? j.h + Cout : j.h;
    add_row(phi, P.phi_b, P.L * phi_cols(P));  // (phi_b is not in the prepared weights: their cache key)
    if (j.phi_first) {
        // p (packed) is now the GEMM's B, read in short panels (K = L) with no stream for the
        // prefetchers to follow: without this fetch x0.5's 7x7 layers were 2-8% slower
        prefetch_l2(j.pre->pp, (long)packed_size(P.Cout, P.L));
        pack_t(phi, P.L, phi_cols(P), nullptr, j.ppk, phi_cols(P), 0);
    } else form_pphi(P, *j.pre, phi, j.ppk);
}
// j's buffers are the calling thread's scratch: the members write into them through j.
// phi_first: ppk gets Φ' packed instead of p Φ' (see phi_first_pays); ppk must hold
// ppk_size(P) floats either way.
void add_branch(Team& t, BranchJob& j, const Params& P, const Prepared& pre, const float* x, float* lam, float* ppk,
                bool phi_first = false) {
    const int S = P.S, R = head_width(P), n1 = P.Cin * P.pool * P.pool;
    j.P = &P;
    j.pre = &pre;
    j.y = scratch(1, (size_t)2 * S);
    j.g = j.y + S;
    j.h = scratch(3, (size_t)R);
    j.lam = lam;
    j.ppk = ppk;
    j.phi_first = phi_first;
    j.pool = PoolJob{&P, x, scratch(0, (size_t)n1)};
    j.fc1 = MatvecJob{P.fc1, j.pool.pooled, n1, j.y};
    j.heads = MatvecTJob{pre.headt, j.y, S, R, j.h};
    t.add(pool_range, &j.pool, P.Cin, VW, (long)P.H * P.W * P.Cin);
    t.add(matvec_rows, &j.fc1, S, 1, (long)S * n1);
    t.add1(gate_step, &j);
    t.add(matvec_t_cols, &j.heads, R, VW, (long)S * R);
    t.add1(heads_step, &j);
}

// out (M x NVP*VW, row stride wp) = phiᵀ rows [0, M) (phi read in place: (L x ld), column i is
// row i of phiᵀ) . b (L x wp, one packed panel of p)
template <int M, int NVP>
inline void pphi_rows(const float* phi, int ldp, int L, const float* b, int wp, float* out) {
    vf acc[M][NVP];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i)
        for (int v = 0; v < NVP; ++v) acc[i][v] = vf{};
    for (int m = 0; m < L; ++m) {
        vf bv[NVP];
        for (int v = 0; v < NVP; ++v) bv[v] = ld(b + (long)m * wp + v * VW);
#pragma GCC unroll 16
        for (int i = 0; i < M; ++i) {
            const vf a = bc(phi[(long)m * ldp + i]);
            for (int v = 0; v < NVP; ++v) acc[i][v] += a * bv[v];
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i)
        for (int v = 0; v < NVP; ++v) st(out + (long)i * wp + v * VW, acc[i][v]);
}
// the last m (< MR) rows of a panel: a register tile of exactly m rows
template <int M, int NVP>
inline void pphi_tail(int m, const float* phi, int ldp, int L, const float* b, int wp, float* out) {
    if constexpr (M > 0) {
        if (m == M) return pphi_rows<M, NVP>(phi, ldp, L, b, wp, out);
        pphi_tail<M - 1, NVP>(m, phi, ldp, L, b, wp, out);
    }
}
template <int NVP>
void pphi_panel(const float* phi, int Lz, int L, const float* b, float* out) {
    constexpr int wp = NVP * VW;
    int l = 0;
    for (; l + MR <= Lz; l += MR) pphi_rows<MR, NVP>(phi + l, Lz, L, b, wp, out + (long)l * wp);
    pphi_tail<MR - 1, NVP>(Lz - l, phi + l, Lz, L, b, wp, out + (long)l * wp);
}

// ppk = (p phi) (Cout x Lz), Lz = phi_cols, packed with K = Lz: per panel, PP_panelᵀ
// (Lz x wp) = phiᵀ (Lz x L) . p_panelᵀ (L x wp). Register tiles of MR rows of phiᵀ (broadcast
// from phi in place) by the panel's vectors, K = L whole: the first version ran gemm() per
// panel, whose per-call and per-tile set-up made this step ~30% of the branch (AVX2, EPYC).
void form_pphi(const Params& P, const Prepared& pre, const float* phi, float* ppk) {
    const int L = P.L, Lz = phi_cols(P), Cout = P.Cout;
    for (int j0 = 0; j0 < Cout; j0 += NR) {
        const float* b = pre.pp + (long)j0 * L;
        float* out = ppk + (long)j0 * Lz;
        if (Cout - j0 > NR - VW) pphi_panel<NV>(phi, Lz, L, b, out);
        else pphi_panel<1>(phi, Lz, L, b, out);
    }
}

// The profile's phase ends from the stages' (pool: stage 0, branch: stage `branch_end`,
// forming: stage `form_end`); t0 the call's start, t4 its end.
void add_team_phases(Params& P, const Team& t, double t0, int branch_end, int form_end, double t4) {
    const double ts[5] = {t0, t.st[0].end, t.st[branch_end].end, t.st[form_end].end, t4};
    add_phases(P, ts);
}

void add_phases(Params& P, const double* ts) {
    P.phase_seconds[PH_POOL] += ts[1] - ts[0];
    P.phase_seconds[PH_BRANCH] += ts[2] - ts[1];
    P.phase_seconds[PH_FORM] += ts[3] - ts[2];
    P.phase_seconds[PH_GEMM] += ts[4] - ts[3];
}

// The weight form's B = W(x)ᵀ = diag(lam) w0 + (p phi) q, packed with K = Cin, as a GEMM over
// the panels: W_panel (Cin x wp) = lam * w0p_panel + qᵀ (Cin x L) . PP_panelᵀ; and
// cvec = (p phi) q_b + bias. One stage of panels + 1 items, the last one cvec.
struct FormJob {
    const Params* P;
    const Prepared* pre;
    const float *lam, *ppk;
    float *wpk, *cvec;
};
void form_cvec(const FormJob& j) {
    const Params& P = *j.P;
    const int Cout = P.Cout, L = P.L;
    float* cvec = j.cvec;
    for (int o = 0; o < roundup(Cout, NR); ++o) cvec[o] = 0.f;
    for (int j0 = 0; j0 < Cout; j0 += NR) {
        const int wp = imin(NR, roundup(Cout - j0, VW));
        const float* d = j.ppk + (long)j0 * L;
        for (int l = 0; l < L; ++l)
            for (int jj = 0; jj < wp; ++jj) cvec[j0 + jj] += d[l * wp + jj] * P.q_b[l];
    }
    for (int o = 0; o < Cout; ++o) cvec[o] += P.bias[o];
}
void form_panels(void* ctx, int p0, int p1) {
    const FormJob& j = *static_cast<const FormJob*>(ctx);
    const Params& P = *j.P;
    const Prepared& pre = *j.pre;
    const float *lam = j.lam, *ppk = j.ppk;
    float* wpk = j.wpk;
    const int Cin = P.Cin, Cout = P.Cout, L = P.L;
    for (int j0 = p0 * NR; j0 < imin(Cout, p1 * NR); j0 += NR) {
        const int wp = imin(NR, roundup(Cout - j0, VW));
        Gemm f{};
        f.m = Cin;
        f.n = wp;
        f.a1 = pre.qt;
        f.lda1 = L;
        f.k1 = L;
        f.b1 = ppk + (long)j0 * L;
        f.c0 = pre.w0p + (long)j0 * Cin;
        f.ldc0 = wp;
        f.c0scale = lam + j0;  // (B, Cin, wp) = lam * w0 + qᵀ (Cin x L) . (p phi)ᵀ (L x wp)
        f.c = wpk + (long)j0 * Cin;
        f.ldc = wp;
        f.prefetch_c0_rows = DCD_FORM_PF_ROWS;
        gemm(f);
    }
    if (p1 > (Cout + NR - 1) / NR) form_cvec(j);
}

// z (m x L) = a (m x Cin, row stride Cin) qᵀ + q_b: the latent path's first product
Gemm latent_z(const Params& P, const Prepared& pre, const float* a, int m, float* z) {
    const int L = P.L;
    float* qb = scratch(8, (size_t)roundup(L, NR));
    for (int l = 0; l < roundup(L, NR); ++l) qb[l] = l < L ? P.q_b[l] : 0.f;
    Gemm zg{};
    zg.m = m;
    zg.n = L;
    zg.a1 = a;
    zg.lda1 = P.Cin;
    zg.k1 = P.Cin;
    zg.b1 = pre.qp;
    zg.prefetch_b = true;
    zg.c = z;
    zg.ldc = L;
    zg.bias = qb;
    return zg;
}

// The output rows of a sample: z's rows (the latent form's Z = X qᵀ + q_b, z.m 0: none),
// then out's; both split the same way (a row of out reads only the same row of Z).
// With phi_first, zphi's rows (z2 = z Φ'ᵀ) between the two (zphi.m 0: none).
struct RowsJob {
    Gemm z, zphi, out;
};
void rows_step(void* ctx, int r0, int r1) {
    RowsJob& j = *static_cast<RowsJob*>(ctx);
    if (j.z.m) gemm_rows(&j.z, r0, r1);
    if (j.zphi.m) gemm_rows(&j.zphi, r0, r1);
    gemm_rows(&j.out, r0, r1);
}
// multiply-adds of the branch: pooling, fc1 and the heads (the region's threshold)
long branch_work(const Params& P) {
    return (long)P.H * P.W * P.Cin + (long)P.S * (P.Cin * P.pool * P.pool + head_width(P));
}

void run(Params* pp) {
    Params& P = *pp;
    const int Cin = P.Cin, Cout = P.Cout, L = P.L;
    const long N = (long)P.H * P.W;
    const int cpad = roundup(Cout, NR);
    float* lam = scratch(2, (size_t)cpad);
    float* ppk = scratch(4, ppk_size(P));
    float* cvec = scratch(5, (size_t)cpad);
    const Prepared pre = prepared_parts(P.prepared, P);

    bool weight_form;
    if (P.form == FORM_WEIGHT) weight_form = true;
    else if (P.form == FORM_LATENT) weight_form = false;
    else weight_form = N * (long)(Cin + Cout + L) > (long)Cin * Cout;
    float* wpk = weight_form ? scratch(7, packed_size(Cout, Cin)) : nullptr;
    float* z = weight_form ? nullptr : scratch(7, (size_t)N * L);
    const bool phi_first = !weight_form && phi_first_pays(N, P);
    float* z2 = phi_first ? scratch(6, (size_t)N * L) : nullptr;
    if (!weight_form)
        for (int o = 0; o < cpad; ++o) cvec[o] = o < Cout ? P.bias[o] : 0.f;

    for (int b = 0; b < P.B; ++b) {
        const double t0 = P.profile ? now_seconds() : 0.0;
        const float* x = P.x + b * N * Cin;
        Team t(P, branch_work(P) + N * Cin * (long)(weight_form ? Cout : Cout + L));
        BranchJob bj;
        add_branch(t, bj, P, pre, x, lam, ppk, phi_first);
        RowsJob rj{};
        Gemm& m = rj.out;  // (N, Cout) = x (N, Cin) W(x)ᵀ, or the latent form below
        m.m = (int)N;
        m.n = Cout;
        m.a1 = x;
        m.lda1 = Cin;
        m.k1 = Cin;
        m.c = P.out + b * N * Cout;
        m.ldc = Cout;
        m.res = P.residual ? P.residual + b * N * Cout : nullptr;
        m.ldres = Cout;
        m.act = P.act;
        m.alpha = P.alpha;
        m.slope = padded_slope(P);
        m.bias = cvec;
        FormJob fj{&P, &pre, lam, ppk, wpk, cvec};
        if (weight_form) {
            t.add(form_panels, &fj, (Cout + NR - 1) / NR + 1, 1, (long)Cin * Cout);
            m.b1 = wpk;
        } else {
            // latent: Z = X qᵀ + q_b (N x L); out = lam * (X w0ᵀ) + Z (p phi)ᵀ + bias, or
            // phi_first: + (Z phiᵀ) pᵀ
            rj.z = latent_z(P, pre, x, (int)N, z);
            if (phi_first) rj.zphi = z_phi(P, z, (int)N, ppk, z2);
            m.b1 = pre.w0p;
            m.prefetch_b = true;
            m.scale1 = lam;
            m.a2 = phi_first ? z2 : z;
            m.lda2 = L;
            m.k2 = L;
            m.b2 = phi_first ? pre.pp : ppk;
        }
        t.add(rows_step, &rj, (int)N, MR, N * Cin);
        team_run(P, t);
        if (P.profile) add_team_phases(P, t, t0, 4, weight_form ? 5 : 4, now_seconds());
    }
}

// x_s (Ho*Wo x Cin) = x at rows/columns i * stride + offset: the pixels the conv's centre
// tap reads (the caller checked that they lie inside x), output rows [i0, i1)
struct GatherJob {
    const Params* P;
    const float* x;
    float* xs;
};
void gather_centre(void* ctx, int i0, int i1) {
    const GatherJob& g = *static_cast<const GatherJob*>(ctx);
    const Params& P = *g.P;
    const int Cin = P.Cin;
    for (int i = i0; i < i1; ++i) {
        const float* row = g.x + ((long)(i * P.stride + P.offset) * P.W + P.offset) * Cin;
        for (int j = 0; j < P.Wo; ++j) {
            const float* src = row + (long)j * P.stride * Cin;
            float* dst = g.xs + ((long)i * P.Wo + j) * Cin;
            for (int c = 0; c < Cin; ++c) dst[c] = src[c];
        }
    }
}

// Both epilogues' GEMM for sample b: out = act(lam * conv + a (No x k) (p phi)ᵀ + cvec +
// residual), the tiles starting from lam * conv and taking the rest as they leave the registers.
Gemm epilogue_gemm(const Params& P, long b, const float* a, int k, const float* lam, const float* ppk,
                   const float* cvec) {
    const long No = (long)P.Ho * P.Wo;
    const int Cout = P.Cout;
    Gemm m{};
    m.m = (int)No;
    m.n = Cout;
    m.a1 = a;
    m.lda1 = k;
    m.k1 = k;
    m.b1 = ppk;
    m.c0 = P.conv + b * No * Cout;
    m.ldc0 = Cout;
    m.c0scale = lam;
    m.c = P.out + b * No * Cout;
    m.ldc = Cout;
    m.bias = cvec;
    m.act = P.act;
    m.alpha = P.alpha;
    m.slope = padded_slope(P);
    m.res = P.residual ? P.residual + b * No * Cout : nullptr;
    m.ldres = Cout;
    return m;
}

void run_latent_epilogue(Params* pp);

// DCDConvEpilogue: out = act(lam * conv + (p phi) (q x_s + q_b) + bias + residual). Per
// sample the branch, x_s gathered (stride or offset), then per row range Z = x_s qᵀ + q_b
// and one GEMM, (No x L) z times (L x Cout) (p phi)ᵀ, whose tiles start from lam * conv and
// take bias, residual and activation as they leave the registers.
void run_epilogue(Params* pp) {
    if (pp->Lz > 0) return run_latent_epilogue(pp);
    Params& P = *pp;
    const int Cin = P.Cin, Cout = P.Cout, L = P.L;
    const long N = (long)P.H * P.W, No = (long)P.Ho * P.Wo;
    const int cpad = roundup(Cout, NR);
    const bool direct = P.stride == 1 && P.offset == 0 && P.Ho == P.H && P.Wo == P.W;
    float* lam = scratch(2, (size_t)cpad);
    float* ppk = scratch(4, ppk_size(P));
    float* cvec = scratch(5, (size_t)cpad);
    float* z = scratch(7, (size_t)No * L);
    const bool phi_first = phi_first_pays(No, P);
    float* z2 = phi_first ? scratch(6, (size_t)No * L) : nullptr;
    float* xs = direct ? nullptr : scratch(9, (size_t)No * Cin);
    const Prepared pre = prepared_parts(P.prepared, P);
    for (int o = 0; o < cpad; ++o) cvec[o] = o < Cout ? P.bias[o] : 0.f;

    for (int b = 0; b < P.B; ++b) {
        const double t0 = P.profile ? now_seconds() : 0.0;
        const float* x = P.x + b * N * Cin;
        Team t(P, branch_work(P) + No * L * (long)(Cin + Cout));
        BranchJob bj;
        add_branch(t, bj, P, pre, x, lam, ppk, phi_first);
        GatherJob gj{&P, x, xs};
        if (!direct) t.add(gather_centre, &gj, P.Ho, 1, No * Cin);
        RowsJob rj{latent_z(P, pre, direct ? x : xs, (int)No, z), Gemm{},
                   epilogue_gemm(P, b, phi_first ? z2 : z, L, lam, phi_first ? pre.pp : ppk, cvec)};
        if (phi_first) rj.zphi = z_phi(P, z, (int)No, ppk, z2);
        t.add(rows_step, &rj, (int)No, MR, No * (Cin + Cout));
        team_run(P, t);
        if (P.profile) add_team_phases(P, t, t0, 4, direct ? 4 : 5, now_seconds());
    }
}

// DCDConvEpilogue with latent_input (joint fusion, Eq. 8): out = act(lam * conv + (p phi) z +
// bias + residual), z (No x Lz) the graph's R(Q x) and phi L x Lz. The same branch, then one
// GEMM over the output pixels, (No x Lz) z times (Lz x Cout) (p phi)ᵀ, whose tiles start from
// lam * conv and take bias, residual and activation as they leave the registers.
void run_latent_epilogue(Params* pp) {
    Params& P = *pp;
    const int Cin = P.Cin, Cout = P.Cout, Lz = P.Lz;
    const long N = (long)P.H * P.W, No = (long)P.Ho * P.Wo;
    const int cpad = roundup(Cout, NR);
    float* lam = scratch(2, (size_t)cpad);
    float* ppk = scratch(4, packed_size(Cout, Lz));
    float* cvec = scratch(5, (size_t)cpad);
    const Prepared pre = prepared_parts(P.prepared, P);
    for (int o = 0; o < cpad; ++o) cvec[o] = o < Cout ? P.bias[o] : 0.f;

    for (int b = 0; b < P.B; ++b) {
        const double t0 = P.profile ? now_seconds() : 0.0;
        Team t(P, branch_work(P) + No * Lz * (long)Cout);
        BranchJob bj;
        add_branch(t, bj, P, pre, P.x + b * N * Cin, lam, ppk);
        RowsJob rj{};
        rj.out = epilogue_gemm(P, b, P.z + b * No * Lz, Lz, lam, ppk, cvec);
        t.add(rows_step, &rj, (int)No, MR, No * Cout);
        team_run(P, t);
        if (P.profile) add_team_phases(P, t, t0, 4, 4, now_seconds());
    }
}

// run_depthwise: the DCDDepthwise op's kernels, in their own file but this translation unit
// (the same ISA, vector helpers and branch)
#include "depthwise_kernels.inc"

#define DCD_STR2(x) #x
#define DCD_STR(x) DCD_STR2(x)
const KernelTable table = {DCD_STR(DCD_NS), NR, prepared_size, prepare, run, run_epilogue, run_depthwise};

}  // namespace
}  // namespace DCD_NS

#if defined(DCD_ISA_AVX512)
const KernelTable* kernels_avx512() { return &DCD_NS::table; }
#elif defined(DCD_ISA_AVX2)
const KernelTable* kernels_avx2() { return &DCD_NS::table; }
#else
const KernelTable* kernels_portable() { return &DCD_NS::table; }
#endif

}  // namespace dcd
