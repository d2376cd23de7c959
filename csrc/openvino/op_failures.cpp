// The record of the ops' failures (op_failures.hpp).
#include "op_failures.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>

namespace dcd {

namespace {
std::mutex g_err_mutex;
std::string g_err;
unsigned long long g_err_count = 0;
bool g_quiet = false;

// The last line of an OpenVINO check's message (the reason, without the node dump).
std::string reason_of(const std::string& what) {
    const size_t end = what.find_last_not_of("\n ");
    if (end == std::string::npos) return what;
    const size_t nl = what.rfind('\n', end);
    const size_t start = nl == std::string::npos ? 0 : nl + 1;
    return clip(what.substr(start, end + 1 - start), 300);
}
}  // namespace

std::string clip(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

void record_validation_failure(const std::string& what) {
    std::lock_guard<std::mutex> lock(g_err_mutex);
    g_err = reason_of(what);
    ++g_err_count;
}

void record_failure(ov::TensorVector& outputs, const std::string& what, const char* op) {
    for (auto& o : outputs)
        if (o.get_element_type() == ov::element::f32 && o.get_size())
            std::fill_n(o.data<float>(), o.get_size(), std::numeric_limits<float>::quiet_NaN());
    std::lock_guard<std::mutex> lock(g_err_mutex);
    g_err = reason_of(what);
    ++g_err_count;
    if (!g_quiet) std::fprintf(stderr, "%s: %s (output set to NaN)\n", op, what.c_str());
}

unsigned long long failure_count() {
    std::lock_guard<std::mutex> lock(g_err_mutex);
    return g_err_count;
}

int last_failure(char* out, int n) {
    std::lock_guard<std::mutex> lock(g_err_mutex);
    if (out && n > 0) {
        const size_t w = std::min(g_err.size(), (size_t)n - 1);
        std::memcpy(out, g_err.data(), w);
        out[w] = '\0';
    }
    return (int)std::min(g_err.size(), (size_t)INT32_MAX);
}

void set_quiet(bool quiet) {
    std::lock_guard<std::mutex> lock(g_err_mutex);
    g_quiet = quiet;
}

}  // namespace dcd
