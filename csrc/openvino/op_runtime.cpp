// Kernel choice, thread split and profiling counters of the ops (op_runtime.hpp).
#include "op_runtime.hpp"

#include <openvino/core/parallel.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dcd {

// ------------------------------------------------------------------------- ISA selection
namespace {
bool cpu_has(const char* isa) {
#if defined(DCD_WITH_X86)
    __builtin_cpu_init();
    if (!std::strcmp(isa, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("fma");
    if (!std::strcmp(isa, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return !std::strcmp(isa, "portable");
}
}  // namespace

const KernelTable* select_kernels(std::string* err) {
    const char* env = std::getenv("DCD_DEPLOY_ISA");
    std::string want = env ? env : "";
    if (want.empty() || want == "auto") {
#if defined(DCD_WITH_X86)
        if (cpu_has("avx512")) return kernels_avx512();
        if (cpu_has("avx2")) return kernels_avx2();
#endif
        return kernels_portable();
    }
    if (want != "avx512" && want != "avx2" && want != "portable") {
        *err = "DCD_DEPLOY_ISA=" + want + " is not one of auto, avx512, avx2, portable";
        return nullptr;
    }
    if (!cpu_has(want.c_str())) {
        *err = "DCD_DEPLOY_ISA=" + want + " but this CPU (or this build) has no " + want;
        return nullptr;
    }
#if defined(DCD_WITH_X86)
    if (want == "avx512") return kernels_avx512();
    if (want == "avx2") return kernels_avx2();
#endif
    return kernels_portable();
}

// -------------------------------------------------------------------------------- threads
std::atomic<long> g_split_calls{0};

namespace {
void parallel_rows(int m, int grain, void (*body)(void*, int, int), void* ctx) {
    const int nthr = parallel_get_max_threads();
    const int tiles = (m + grain - 1) / grain;
    const int chunks = std::min(tiles, std::max(nthr, 1));
    if (chunks <= 1) {
        body(ctx, 0, m);
        return;
    }
    g_split_calls.fetch_add(1, std::memory_order_relaxed);
    ov::parallel_for(chunks, [&](int i) {
        const int t0 = (int)((long)tiles * i / chunks), t1 = (int)((long)tiles * (i + 1) / chunks);
        body(ctx, t0 * grain, std::min(m, t1 * grain));
    });
}
}  // namespace

namespace {
bool regions_are(const char* value) {
    const char* env = std::getenv("DCD_DEPLOY_REGIONS");
    return env && !std::strcmp(env, value);
}
}  // namespace

ParallelRows parallel_rows_or_null() {
    return parallel_get_max_threads() > 1 && !regions_are("none") ? parallel_rows : nullptr;
}

bool region_per_stage() { return regions_are("stage"); }

// ------------------------------------------------------------------------------ profiling
namespace {
std::mutex g_prof_mutex;
double g_prof[PH_COUNT + 1] = {};  // pool, branch, form, gemm, total
double g_prof_calls = 0;
}  // namespace

bool profiling() {
    const char* env = std::getenv("DCD_DEPLOY_PROFILE");
    return env && env[0] == '1' && env[1] == '\0';
}

void add_profile(const Params& p, double total) {
    std::lock_guard<std::mutex> lock(g_prof_mutex);
    for (int i = 0; i < PH_COUNT; ++i) g_prof[i] += p.phase_seconds[i];
    g_prof[PH_COUNT] += total;
    g_prof_calls += 1;
}

int read_profile(double* out, int n) {
    std::lock_guard<std::mutex> lock(g_prof_mutex);
    double v[PH_COUNT + 2];
    for (int i = 0; i <= PH_COUNT; ++i) v[i] = g_prof[i];
    v[PH_COUNT + 1] = g_prof_calls;
    int w = 0;
    for (; w < n && w < PH_COUNT + 2; ++w) out[w] = v[w];
    return w;
}

void reset_profile() {
    std::lock_guard<std::mutex> lock(g_prof_mutex);
    for (double& d : g_prof) d = 0;
    g_prof_calls = 0;
}

}  // namespace dcd
