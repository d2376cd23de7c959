// Failures the CPU plugin would swallow, recorded for the C entry points
// (dcd_deploy_ov_error_count, dcd_deploy_ov_last_error; see c_api.cpp).
//
// OpenVINO's CPU plugin ignores a failing evaluate of an extension op (an exception or
// false), and an exception thrown through it left the plugin unusable (a later crash); it
// also re-infers shapes while it runs a model, and there it swallows a failed check and
// skips evaluate. So the ops catch their own failures, record why, and (in evaluate)
// make their output NaN; the Python side reads the record after each inference.
#pragma once

#include <openvino/runtime/tensor.hpp>

#include <cstddef>
#include <string>

namespace dcd {

// At most n characters of a value read from a file, for a message (a 1 MB attribute must
// not become a 1 MB error line).
std::string clip(const std::string& s, size_t n = 60);
// A failed validate_and_infer_types (re-thrown by the caller).
void record_validation_failure(const std::string& what);
// A failed evaluate: the f32 outputs set to NaN, the reason recorded (and printed on
// stderr, prefixed with op, unless quiet).
void record_failure(ov::TensorVector& outputs, const std::string& what, const char* op);

// For the C entry points.
unsigned long long failure_count();
// Copies the last reason (NUL-terminated, at most n - 1 bytes) into out; its full length.
int last_failure(char* out, int n);
void set_quiet(bool quiet);

}  // namespace dcd
