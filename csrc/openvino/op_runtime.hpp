// What the ops' evaluate asks of its environment at every call: the kernel table for this
// CPU and DCD_DEPLOY_ISA, the row split over OpenVINO's threads, and the profiling
// counters of DCD_DEPLOY_PROFILE=1.
#pragma once

#include <atomic>
#include <string>

#include "dcd_kernels.hpp"

namespace dcd {

// The kernel table evaluate uses now (DCD_DEPLOY_ISA, else the best this CPU has), or null
// with *err set.
const KernelTable* select_kernels(std::string* err);

// Params::parallel_rows over the threads of the TBB arena OpenVINO runs the inference in
// (INFERENCE_NUM_THREADS); null when there is one thread. The kernels open one region per
// call with it (stages.inc: m large, every member runs the call's stages).
using ParallelRows = void (*)(int m, int grain, void (*body)(void*, int, int), void* ctx);
ParallelRows parallel_rows_or_null();
// DCD_DEPLOY_REGIONS=stage: a parallel region per split phase instead of one per call
// (Params::region_per_stage; the measurement of docs/performance.md "Two threads").
bool region_per_stage();
// Parallel regions (ov::parallel_for) since the last reset (dcd_deploy_ov_split_calls).
extern std::atomic<long> g_split_calls;

// DCD_DEPLOY_PROFILE=1.
bool profiling();
// Adds p's phase times and the whole evaluate's (total seconds) to the counters.
void add_profile(const Params& p, double total);
// pool, branch, form, gemm, total (seconds), then the number of calls: up to n values
// into out; how many were written.
int read_profile(double* out, int n);
void reset_profile();

}  // namespace dcd
