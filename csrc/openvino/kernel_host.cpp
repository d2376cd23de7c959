// What the kernels ask of the program they run in (dcd_kernels.hpp, "Provided by the
// host"): a clock and per-thread scratch buffers. One implementation for both hosts, the
// OpenVINO extension and the stand-alone test driver (test_driver.cpp). Compiled for the
// baseline ISA only (never with the kernels' -m flags).
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>

#include "dcd_kernels.hpp"

namespace dcd {

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {
constexpr int kScratchSlots = 16;

struct Scratch {
    float* ptr[kScratchSlots] = {};
    size_t cap[kScratchSlots] = {};
    ~Scratch() {
        for (auto* p : ptr) std::free(p);
    }
};
thread_local Scratch t_scratch;
}  // namespace

// Grown with a quarter's slack (fewer reallocations while the first inference meets ever
// larger layers), in multiples of 64 bytes; std::bad_alloc when memory runs out.
float* scratch(int slot, size_t n) {
    Scratch& s = t_scratch;
    if (n > s.cap[slot]) {
        std::free(s.ptr[slot]);
        size_t cap = (n + n / 4 + 64 + 15) & ~size_t(15);  // bytes multiple of 64
        s.ptr[slot] = static_cast<float*>(std::aligned_alloc(64, cap * sizeof(float)));
        if (!s.ptr[slot]) {
            s.cap[slot] = 0;
            throw std::bad_alloc();
        }
        s.cap[slot] = cap;
    }
    return s.ptr[slot];
}

void spin_pause(int spins) {
    // about 20 µs of pauses (about 100 ns each on the EPYC), then yields: on an idle machine
    // a yield returns at once, on a loaded one it gives this core to a thread that needs it
    if (spins < 200) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        asm volatile("yield");
#endif
    } else {
        std::this_thread::yield();
    }
}

}  // namespace dcd
