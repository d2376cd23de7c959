// OpenVINO extension: the fused DCD 1x1 op "DCDPointwise" (domain/opset "dcd_deploy"); the
// k x k one, DCDConvEpilogue, is in dcd_epilogue.cpp and registered here too.
//
// * ov::op::Op subclass DCDPointwise, registered with ov::OpExtension (IR round trips);
// * ONNX frontend ConversionExtension("DCDPointwise", "dcd_deploy") mapping the ONNX node;
// * evaluate() picks an ISA-specific kernel table at every call (env DCD_DEPLOY_ISA) and
//   runs it on the whole batch; the two big GEMMs split their rows over the threads of
//   OpenVINO's TBB arena (INFERENCE_NUM_THREADS), the rest runs on the calling thread;
// * every size read from a file is checked (PackedLayout::make) before it is used, and
//   failures the CPU plugin would swallow are recorded (record_failure);
// * C entry points for tests, profiling and the builder: dcd_deploy_ov_isa,
//   dcd_deploy_ov_profile, dcd_deploy_ov_profile_reset, dcd_deploy_ov_error_count,
//   dcd_deploy_ov_last_error, dcd_deploy_ov_set_quiet, dcd_deploy_ov_selfcheck,
//   dcd_deploy_ov_build_id.
#include <openvino/core/extension.hpp>
#include <openvino/core/op_extension.hpp>
#include <openvino/core/parallel.hpp>
#include <openvino/frontend/onnx/extension/conversion.hpp>
#include <openvino/op/constant.hpp>
#include <openvino/op/op.hpp>
#include <openvino/runtime/tensor.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <cstdint>
#include <vector>

#include "dcd_kernels.hpp"
#include "dcd_op_common.hpp"

#define DCD_EXPORT extern "C" __attribute__((visibility("default")))

namespace dcd {

// ------------------------------------------------------------------ helpers for the kernels
double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {
struct Scratch {
    float* ptr[16] = {};
    size_t cap[16] = {};
    ~Scratch() {
        for (auto* p : ptr) std::free(p);
    }
};
thread_local Scratch t_scratch;
}  // namespace

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

// ------------------------------------------------------------------------- ISA selection
// (shared with dcd_epilogue.cpp through dcd_op_common.hpp)
static bool cpu_has(const char* isa) {
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

// The kernel table evaluate() uses now, or null with *err set.
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
// Row ranges over the threads of the TBB arena OpenVINO runs the inference in
// (INFERENCE_NUM_THREADS); with one thread, the caller does all rows itself.
std::atomic<long> g_split_calls{0};  // row ranges handed to ov::parallel_for (dcd_deploy_ov_split_calls)

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

// ------------------------------------------------------------------------------ profiling
std::mutex g_prof_mutex;
double g_prof[PH_COUNT + 1] = {};  // pool, branch, form, gemm, total
double g_prof_calls = 0;

bool profiling() {
    const char* env = std::getenv("DCD_DEPLOY_PROFILE");
    return env && env[0] == '1' && env[1] == '\0';
}


// ----------------------------------------------------------------------------------- the op
// (non-static: the helpers below serve dcd_epilogue.cpp too, see dcd_op_common.hpp)
// Where the inputs are. Two forms of the same op:
// * the contract's (the ONNX node's): x, [residual], fc1, [gate], [scale_w], phi_w, phi_b,
//   q, q_b, p, w0, bias;
// * packed (what the ONNX conversion makes when the weights are Constants): x, [residual],
//   one 1-D f32 Constant holding the ten weight tensors (PackedLayout). OpenVINO's CPU
//   plugin wraps every input of an extension op in a new ov::Tensor at every call (about
//   1 us each, 10-12 per node): one weight input instead of ten is most of the op's
//   per-call overhead.
struct InputIndex {
    int x = 0, residual = -1, fc1 = -1, gate = -1, scale_w = -1, phi_w = -1, phi_b = -1, q = -1, q_b = -1, p = -1,
        w0 = -1, bias = -1, packed = -1, count;
    InputIndex(bool res, bool se, bool att, bool is_packed) {
        int i = 1;
        if (res) residual = i++;
        if (is_packed) {
            packed = i++;
            count = i;
            return;
        }
        fc1 = i++;
        if (se) gate = i++;
        if (att) scale_w = i++;
        phi_w = i++;
        phi_b = i++;
        q = i++;
        q_b = i++;
        p = i++;
        w0 = i++;
        bias = i++;
        count = i;
    }
};


// At most this many characters of a value read from a file in a message (a 1 MB
// attribute must not become a 1 MB error line).
std::string clip(const std::string& s, size_t n) {
    return s.size() <= n ? s : s.substr(0, n) + "...";
}

// The last failure of an evaluate (the CPU plugin swallows them): read through the C
// entry points by the Python side after each inference.
std::mutex g_err_mutex;
std::string g_err;
unsigned long long g_err_count = 0;
bool g_quiet = false;

// The last line of an OpenVINO check's message (the reason, without the node dump).
std::string reason_of(const std::string& what) {
    size_t end = what.find_last_not_of("\n ");
    if (end == std::string::npos) return what;
    size_t start = what.rfind('\n', end);
    return clip(what.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1)), 300);
}

void record_validation_failure(const std::string& what) {
    std::lock_guard<std::mutex> lock(g_err_mutex);
    g_err = reason_of(what);
    ++g_err_count;
}

void record_failure(ov::TensorVector& outputs, const std::string& what, const char* op) {
    // OpenVINO's CPU plugin ignores a failing evaluate of an extension op (an exception or
    // false), and an exception thrown through it left the plugin unusable (a later crash):
    // make the output unusable (NaN) and record why.
    for (auto& o : outputs)
        if (o.get_element_type() == ov::element::f32 && o.get_size())
            std::fill_n(o.data<float>(), o.get_size(), std::numeric_limits<float>::quiet_NaN());
    std::lock_guard<std::mutex> lock(g_err_mutex);
    g_err = reason_of(what);
    ++g_err_count;
    if (!g_quiet) std::fprintf(stderr, "%s: %s (output set to NaN)\n", op, what.c_str());
}

int parse_act(const std::string& a) {
    if (a == "none") return ACT_NONE;
    if (a == "relu") return ACT_RELU;
    if (a == "relu6") return ACT_RELU6;
    return -1;
}
int parse_form(const std::string& f) {
    if (f == "weight") return FORM_WEIGHT;
    if (f == "latent") return FORM_LATENT;
    if (f == "auto" || f.empty()) return FORM_AUTO;
    return -1;
}


class DCDPointwise : public ov::op::Op {
public:
    OPENVINO_OP("DCDPointwise", "dcd_deploy");

    DCDPointwise() = default;
    // packed: empty for the contract's inputs, else {Cout, Cin, S, L} of the packed weights.
    DCDPointwise(const ov::OutputVector& args, int64_t pool, int64_t se, int64_t attention, int64_t residual,
                 std::string activation, std::string form, std::vector<int64_t> packed = {})
        : Op(args),
          m_pool(pool),
          m_se(se),
          m_attention(attention),
          m_residual(residual),
          m_activation(std::move(activation)),
          m_form(std::move(form)),
          m_packed(std::move(packed)) {
        constructor_validate_and_infer_types();
    }

    bool visit_attributes(ov::AttributeVisitor& v) override {
        v.on_attribute("pool", m_pool);
        v.on_attribute("se", m_se);
        v.on_attribute("attention", m_attention);
        v.on_attribute("residual", m_residual);
        v.on_attribute("activation", m_activation);
        v.on_attribute("form", m_form);
        v.on_attribute("packed", m_packed);
        return true;
    }

    void validate_and_infer_types() override {
        try {
            validate_checked();
        } catch (const std::exception& e) {
            // Thrown at read_model/compile_model, this reaches the caller. But the CPU plugin
            // also re-infers shapes while it runs a model, and there it swallows the failure
            // and skips evaluate (the output keeps whatever memory held): record it, so that
            // dcd_deploy_ov_error_count tells the caller the inference failed.
            record_validation_failure(e.what());
            throw;
        }
    }

    void validate_checked() {
        NODE_VALIDATION_CHECK(this, m_pool == 1 || m_pool == 2, "pool must be 1 or 2, got ", m_pool);
        NODE_VALIDATION_CHECK(this, (m_se | 1) == 1 && (m_attention | 1) == 1 && (m_residual | 1) == 1,
                              "se, attention and residual must be 0 or 1");
        NODE_VALIDATION_CHECK(this, parse_act(m_activation) >= 0, "activation must be none, relu or relu6, got '",
                              clip(m_activation), "'");
        NODE_VALIDATION_CHECK(this, parse_form(m_form) >= 0, "form must be weight or latent, got '", clip(m_form),
                              "'");
        NODE_VALIDATION_CHECK(this, m_packed.empty() || m_packed.size() == 4,
                              "packed must be empty or {Cout, Cin, S, L}, got ", m_packed.size(), " values");
        for (int64_t d : m_packed) NODE_VALIDATION_CHECK(this, d > 0, "packed dimensions must be positive");
        PackedLayout lay;
        if (packed()) {
            const std::string bad = layout(&lay);
            NODE_VALIDATION_CHECK(this, bad.empty(), "packed: ", bad);
        }
        std::string isa_error;
        NODE_VALIDATION_CHECK(this, select_kernels(&isa_error) != nullptr, isa_error);
        const InputIndex I = index();
        NODE_VALIDATION_CHECK(this, (int)get_input_size() == I.count, "expected ", I.count,
                              " inputs for these attributes, got ", get_input_size());
        for (size_t i = 0; i < get_input_size(); ++i)
            NODE_VALIDATION_CHECK(this, get_input_element_type(i).compatible(ov::element::f32),
                                  "input ", i, " must be f32");
        const auto& xs = get_input_partial_shape(I.x);
        NODE_VALIDATION_CHECK(this, xs.rank().compatible(4), "x must be (B, H, W, Cin)");
        ov::Dimension cin, cout;
        if (packed()) {
            cout = m_packed[0];
            cin = m_packed[1];
            const auto& ps = get_input_partial_shape(I.packed);
            NODE_VALIDATION_CHECK(this, ps.compatible(ov::PartialShape{(int64_t)lay.total}), "packed weights have shape ",
                                  ps, ", expected (", lay.total, ")");
            if (I.residual >= 0 && xs.rank().is_static()) {
                const auto& rs = get_input_partial_shape(I.residual);
                NODE_VALIDATION_CHECK(this, rs.compatible(ov::PartialShape{xs[0], xs[1], xs[2], cout}),
                                      "residual has shape ", rs, ", expected (B, H, W, Cout) = ", xs[0], ", ", xs[1],
                                      ", ", xs[2], ", ", cout);
            }
        } else {
            const auto& ws = get_input_partial_shape(I.w0);
            NODE_VALIDATION_CHECK(this, ws.rank().compatible(2), "w0 must be (Cout, Cin)");
            check_constant_shapes(I);
            if (ws.rank().is_static()) {
                cout = ws[0];
                cin = ws[1];
            }
        }
        ov::PartialShape out = ov::PartialShape::dynamic(4);
        if (xs.rank().is_static()) {
            NODE_VALIDATION_CHECK(this, xs[3].compatible(cin), "x channels ", xs[3], " != w0 columns ", cin);
            out = ov::PartialShape{xs[0], xs[1], xs[2], cout};
        } else {
            out[3] = cout;
        }
        set_output_type(0, ov::element::f32, out);
    }

    // The weights' shapes against each other and x, when they are known (at model reading:
    // a bad model fails there, loudly; evaluate checks again, but the CPU plugin swallows
    // exceptions from an extension's evaluate).
    void check_constant_shapes(const InputIndex& I) {
        auto shape = [&](int idx) -> const ov::PartialShape& { return get_input_partial_shape(idx); };
        auto rank = [&](int idx, int r, const char* name) {
            NODE_VALIDATION_CHECK(this, shape(idx).rank().compatible(r), name, " must have rank ", r, ", got ",
                                  shape(idx));
        };
        rank(I.fc1, 2, "fc1");
        rank(I.phi_w, 2, "phi_w");
        rank(I.phi_b, 1, "phi_b");
        rank(I.q, 2, "q");
        rank(I.q_b, 1, "q_b");
        rank(I.p, 2, "p");
        rank(I.bias, 1, "bias");
        if (I.gate >= 0) rank(I.gate, 2, "gate");
        if (I.scale_w >= 0) rank(I.scale_w, 2, "scale_w");
        for (int i = 1; i < I.count; ++i)
            if (i != I.residual && !shape(i).is_static()) return;  // checked at evaluate
        const auto& xs = shape(I.x);
        const ov::Shape w0 = shape(I.w0).to_shape(), fc1 = shape(I.fc1).to_shape(), q = shape(I.q).to_shape();
        const size_t cout = w0[0], cin = w0[1], S = fc1[0], L = q[0];
        PackedLayout lay;
        const std::string bad = PackedLayout::make(cout, cin, S, L, m_pool, m_se, m_attention, &lay);
        NODE_VALIDATION_CHECK(this, bad.empty(), bad);
        if (xs.rank().is_static() && xs[3].is_static())
            NODE_VALIDATION_CHECK(this, xs[3].get_length() == (int64_t)cin, "x has ", xs[3], " channels, w0 ", cin,
                                  " columns");
        auto expect = [&](int idx, const ov::Shape& want, const char* name) {
            if (idx < 0) return;
            NODE_VALIDATION_CHECK(this, shape(idx).to_shape() == want, name, " has shape ", shape(idx),
                                  ", expected ", want);
        };
        expect(I.fc1, ov::Shape{S, cin * m_pool * m_pool}, "fc1");
        expect(I.gate, ov::Shape{S, S}, "gate");
        expect(I.scale_w, ov::Shape{cout, S}, "scale_w");
        expect(I.phi_w, ov::Shape{L * L, S}, "phi_w");
        expect(I.phi_b, ov::Shape{L * L}, "phi_b");
        expect(I.q, ov::Shape{L, cin}, "q");
        expect(I.q_b, ov::Shape{L}, "q_b");
        expect(I.p, ov::Shape{cout, L}, "p");
        expect(I.bias, ov::Shape{cout}, "bias");
        if (I.residual >= 0 && xs.rank().is_static()) {
            const auto& rs = shape(I.residual);
            NODE_VALIDATION_CHECK(this, rs.compatible(ov::PartialShape{xs[0], xs[1], xs[2], (int64_t)cout}),
                                  "residual has shape ", rs, ", expected (B, H, W, Cout) = ", xs[0], ", ", xs[1],
                                  ", ", xs[2], ", ", cout);
        }
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        return std::make_shared<DCDPointwise>(args, m_pool, m_se, m_attention, m_residual, m_activation, m_form,
                                              m_packed);
    }

    // This op with the ten weight inputs replaced by one packed Constant, or null when they
    // are not all f32 Constants of known shapes (then the contract's form stays).
    std::shared_ptr<DCDPointwise> packed_copy() const {
        if (packed()) return nullptr;
        const InputIndex I = index();
        const int idx[PK_COUNT] = {I.fc1, I.gate, I.scale_w, I.phi_w, I.phi_b, I.q, I.q_b, I.p, I.w0, I.bias};
        std::shared_ptr<ov::op::v0::Constant> c[PK_COUNT];
        for (int t = 0; t < PK_COUNT; ++t) {
            if (idx[t] < 0) continue;
            c[t] = ov::as_type_ptr<ov::op::v0::Constant>(get_input_node_shared_ptr(idx[t]));
            if (!c[t] || c[t]->get_element_type() != ov::element::f32) return nullptr;
        }
        const ov::Shape& w0 = c[PK_W0]->get_shape();
        const size_t cout = w0[0], cin = w0[1], S = c[PK_FC1]->get_shape()[0], L = c[PK_Q]->get_shape()[0];
        PackedLayout lay;
        if (!PackedLayout::make(cout, cin, S, L, m_pool, m_se, m_attention, &lay).empty()) return nullptr;
        ov::Tensor packed(ov::element::f32, ov::Shape{lay.total});
        float* dst = packed.data<float>();
        std::fill_n(dst, lay.total, 0.f);
        for (int t = 0; t < PK_COUNT; ++t) {
            if (idx[t] < 0) continue;
            OPENVINO_ASSERT(shape_size(c[t]->get_shape()) == lay.size[t], "DCDPointwise: packing a weight of ",
                            c[t]->get_shape(), " into ", lay.size[t], " floats");
            std::memcpy(dst + lay.offset[t], c[t]->get_data_ptr(), lay.size[t] * sizeof(float));
        }
        ov::OutputVector args{input_value(I.x)};
        if (I.residual >= 0) args.push_back(input_value(I.residual));
        args.push_back(std::make_shared<ov::op::v0::Constant>(packed));
        return std::make_shared<DCDPointwise>(args, m_pool, m_se, m_attention, m_residual, m_activation, m_form,
                                              std::vector<int64_t>{(int64_t)cout, (int64_t)cin, (int64_t)S,
                                                                   (int64_t)L});
    }

    bool has_evaluate() const override { return true; }

    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        try {
            return evaluate_checked(outputs, inputs);
        } catch (const std::exception& e) {
            record_failure(outputs, e.what());
        } catch (...) {
            record_failure(outputs, "unknown failure");
        }
        return true;
    }

    bool evaluate_checked(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
        const bool prof = profiling();
        const double t0 = prof ? now_seconds() : 0.0;
        std::string err;
        const KernelTable* k = select_kernels(&err);
        if (!k) {
            // The ISA was valid when the model was read (validate_and_infer_types checks it, so
            // read_model/compile_model fail loudly) and DCD_DEPLOY_ISA changed since.
            record_failure(outputs, err);
            return true;
        }

        // (no ov::Shape temporaries here: every one is a heap allocation, at every call)
        const InputIndex I = index();
        OPENVINO_ASSERT((int)inputs.size() == I.count, "DCDPointwise: expected ", I.count, " inputs, got ",
                        inputs.size());
        for (const auto& t : inputs)
            OPENVINO_ASSERT(t.get_element_type() == ov::element::f32, "DCDPointwise: all inputs must be f32");
        const ov::Shape& xs = inputs[I.x].get_shape();
        OPENVINO_ASSERT(xs.size() == 4, "DCDPointwise: x ", xs, " must be (B, H, W, Cin)");
        const size_t B = xs[0], H = xs[1], W = xs[2], Cin = xs[3];
        size_t Cout, S, L;
        auto is = [&](int idx, std::initializer_list<size_t> want) {
            const ov::Shape& s = inputs[idx].get_shape();
            return s.size() == want.size() && std::equal(s.begin(), s.end(), want.begin());
        };
        Params p{};
        PackedLayout lay;
        if (packed()) {
            // checked again here: this is where the sizes become pointers
            const std::string bad = layout(&lay);
            OPENVINO_ASSERT(bad.empty(), "DCDPointwise: packed: ", bad);
            Cout = (size_t)m_packed[0];
            S = (size_t)m_packed[2];
            L = (size_t)m_packed[3];
            OPENVINO_ASSERT(Cin == (size_t)m_packed[1], "DCDPointwise: x ", xs, " does not fit the packed weights' ",
                            m_packed[1], " input channels");
            OPENVINO_ASSERT(is(I.packed, {lay.total}), "DCDPointwise: packed weights have shape ",
                            inputs[I.packed].get_shape(), ", expected (", lay.total, ")");
            const float* w = inputs[I.packed].data<const float>();
            const float** dst[PK_COUNT] = {&p.fc1, &p.gate, &p.scale_w, &p.phi_w, &p.phi_b,
                                           &p.q,   &p.q_b,  &p.p,       &p.w0,    &p.bias};
            for (int t = 0; t < PK_COUNT; ++t) *dst[t] = lay.size[t] ? w + lay.offset[t] : nullptr;
        } else {
            const ov::Shape& ws = inputs[I.w0].get_shape();
            OPENVINO_ASSERT(ws.size() == 2 && Cin == ws[1], "DCDPointwise: x ", xs, " does not fit w0 ", ws);
            Cout = ws[0];
            const ov::Shape &fs = inputs[I.fc1].get_shape(), &qs = inputs[I.q].get_shape();
            OPENVINO_ASSERT(fs.size() == 2 && fs[1] == Cin * m_pool * m_pool, "DCDPointwise: fc1 ", fs,
                            " must be (S, Cin*pool^2)");
            OPENVINO_ASSERT(qs.size() == 2 && qs[1] == Cin, "DCDPointwise: q ", qs, " must be (L, Cin)");
            S = fs[0];
            L = qs[0];
            const std::string bad = PackedLayout::make(Cout, Cin, S, L, m_pool, m_se, m_attention, &lay);
            OPENVINO_ASSERT(bad.empty(), "DCDPointwise: ", bad);
            auto expect = [&](int idx, std::initializer_list<size_t> want, const char* name) {
                if (idx < 0) return;
                OPENVINO_ASSERT(is(idx, want), "DCDPointwise: ", name, " has shape ", inputs[idx].get_shape(),
                                ", expected ", ov::Shape(want));
            };
            expect(I.gate, {S, S}, "gate");
            expect(I.scale_w, {Cout, S}, "scale_w");
            expect(I.phi_w, {L * L, S}, "phi_w");
            expect(I.phi_b, {L * L}, "phi_b");
            expect(I.q_b, {L}, "q_b");
            expect(I.p, {Cout, L}, "p");
            expect(I.bias, {Cout}, "bias");
            auto f = [&](int idx) -> const float* { return idx < 0 ? nullptr : inputs[idx].data<const float>(); };
            p.fc1 = f(I.fc1); p.gate = f(I.gate); p.scale_w = f(I.scale_w); p.phi_w = f(I.phi_w);
            p.phi_b = f(I.phi_b); p.q = f(I.q); p.q_b = f(I.q_b); p.p = f(I.p); p.w0 = f(I.w0); p.bias = f(I.bias);
        }
        if (I.residual >= 0)
            OPENVINO_ASSERT(is(I.residual, {B, H, W, Cout}), "DCDPointwise: residual has shape ",
                            inputs[I.residual].get_shape(), ", expected (", B, ", ", H, ", ", W, ", ", Cout, ")");
        uint64_t pixels, values;
        OPENVINO_ASSERT(mul_ok(B, H, &pixels) && mul_ok(pixels, W, &pixels) &&
                            mul_ok(pixels, std::max(Cin, Cout), &values),
                        "DCDPointwise: tensor too large");

        // the CPU plugin hands over an output of the inferred shape: set_shape only if not
        if (!(outputs[0].get_shape().size() == 4 && outputs[0].get_shape()[0] == B &&
              outputs[0].get_shape()[1] == H && outputs[0].get_shape()[2] == W && outputs[0].get_shape()[3] == Cout))
            outputs[0].set_shape(ov::Shape{B, H, W, Cout});
        if (pixels == 0) return true;

        p.B = (int)B; p.H = (int)H; p.W = (int)W; p.Cin = (int)Cin; p.Cout = (int)Cout; p.S = (int)S; p.L = (int)L;
        p.pool = (int)m_pool; p.se = (int)m_se; p.attention = (int)m_attention;
        p.act = parse_act(m_activation); p.form = parse_form(m_form);
        p.x = inputs[I.x].data<const float>();
        p.residual = I.residual >= 0 ? inputs[I.residual].data<const float>() : nullptr;
        p.out = outputs[0].data<float>();
        p.profile = prof;
        p.parallel_rows = parallel_get_max_threads() > 1 ? parallel_rows : nullptr;
        std::shared_ptr<const std::vector<float>> prepared = prepare(k, p, I);
        p.prepared = prepared->data();
        k->run(&p);
        if (prof) {
            const double total = now_seconds() - t0;
            std::lock_guard<std::mutex> lock(g_prof_mutex);
            for (int i = 0; i < PH_COUNT; ++i) g_prof[i] += p.phase_seconds[i];
            g_prof[PH_COUNT] += total;
            g_prof_calls += 1;
        }
        return true;
    }

private:
    bool packed() const { return !m_packed.empty(); }
    InputIndex index() const { return InputIndex(m_residual, m_se, m_attention, packed()); }
    // The packed weights' layout from the attribute; "" or why it is out of range.
    std::string layout(PackedLayout* lay) const {
        return PackedLayout::make(m_packed[0], m_packed[1], m_packed[2], m_packed[3], m_pool, m_se, m_attention,
                                  lay);
    }

    // Whether the weights evaluate reads are this op's own Constant input's memory (the CPU
    // plugin hands over the Constant's buffer): immutable while the op holds the Constant.
    bool weights_are_own_constant(const InputIndex& I, const Params& p) const {
        if (I.packed < 0) return false;
        const auto* c = ov::as_type<const ov::op::v0::Constant>(get_input_node_ptr(I.packed));
        return c && c->get_data_ptr() == static_cast<const void*>(p.fc1);
    }

    // The constants rearranged for the kernels (KernelTable::prepare). They are Constants:
    // prepare once per (tensors, ISA) and keep the result. When they are this op's own
    // Constant's memory, the address is the key; else sampled values guard against a
    // different tensor at the same address.
    std::shared_ptr<const std::vector<float>> prepare(const KernelTable* k, const Params& p,
                                                      const InputIndex& I) const {
        const float* src[kCached] = {p.w0, p.q, p.p, p.phi_w, p.scale_w};
        const int shape[4] = {p.Cout, p.Cin, p.L, p.S};
        const bool owned = weights_are_own_constant(I, p);
        if (owned) {
            std::lock_guard<std::mutex> lock(m_cache_mutex);
            if (m_cache && m_cache_owned && m_cache_table == k && !std::memcmp(m_cache_shape, shape, sizeof shape) &&
                !std::memcmp(m_cache_src, src, sizeof src))
                return m_cache;
        }
        const size_t n[kCached] = {(size_t)p.Cout * p.Cin, (size_t)p.L * p.Cin, (size_t)p.Cout * p.L,
                                   (size_t)p.L * p.L * p.S, p.scale_w ? (size_t)p.Cout * p.S : 0};
        float probe[kCached][8] = {};
        for (int t = 0; t < kCached; ++t)
            for (int i = 0; n[t] && i < 8; ++i) probe[t][i] = src[t][(n[t] - 1) * i / 7];
        std::lock_guard<std::mutex> lock(m_cache_mutex);
        if (m_cache && m_cache_table == k && !std::memcmp(m_cache_shape, shape, sizeof shape) &&
            !std::memcmp(m_cache_src, src, sizeof src) && !std::memcmp(probe, m_cache_probe, sizeof probe)) {
            m_cache_owned = owned;
            return m_cache;
        }
        auto v = std::make_shared<std::vector<float>>(k->prepared_size(&p));
        k->prepare(&p, v->data());
        m_cache = v;
        m_cache_table = k;
        m_cache_owned = owned;
        std::memcpy(m_cache_shape, shape, sizeof shape);
        std::memcpy(m_cache_src, src, sizeof src);
        std::memcpy(m_cache_probe, probe, sizeof probe);
        return m_cache;
    }

    int64_t m_pool = 1, m_se = 0, m_attention = 0, m_residual = 0;
    std::string m_activation = "none", m_form = "auto";
    std::vector<int64_t> m_packed;

    mutable std::mutex m_cache_mutex;
    mutable std::shared_ptr<const std::vector<float>> m_cache;
    static constexpr int kCached = 5;
    mutable const float* m_cache_src[kCached] = {};
    mutable const KernelTable* m_cache_table = nullptr;
    mutable bool m_cache_owned = false;
    mutable int m_cache_shape[4] = {};
    mutable float m_cache_probe[kCached][8] = {};
};

namespace {
ov::OutputVector convert_onnx(const ov::frontend::NodeContext& ctx) {
    ov::OutputVector args;
    for (size_t i = 0; i < ctx.get_input_size(); ++i) args.push_back(ctx.get_input((int)i));
    // the contract's form first: it checks every weight's shape, with the messages naming them
    auto node = std::make_shared<DCDPointwise>(
        args, ctx.get_attribute<int64_t>("pool", 1), ctx.get_attribute<int64_t>("se", 0),
        ctx.get_attribute<int64_t>("attention", 0), ctx.get_attribute<int64_t>("residual", 0),
        ctx.get_attribute<std::string>("activation", "none"), ctx.get_attribute<std::string>("form", "auto"));
    if (auto packed = node->packed_copy()) return packed->outputs();
    return node->outputs();
}
}  // namespace

}  // namespace dcd

// ------------------------------------------------------------------------------ C entries
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
DCD_EXPORT unsigned long long dcd_deploy_ov_error_count() {
    std::lock_guard<std::mutex> lock(dcd::g_err_mutex);
    return dcd::g_err_count;
}

// Copies the last failure's message (NUL-terminated, truncated to n - 1 bytes) into out;
// returns the message's full length.
DCD_EXPORT int dcd_deploy_ov_last_error(char* out, int n) {
    std::lock_guard<std::mutex> lock(dcd::g_err_mutex);
    if (out && n > 0) {
        const size_t w = std::min(dcd::g_err.size(), (size_t)n - 1);
        std::memcpy(out, dcd::g_err.data(), w);
        out[w] = '\0';
    }
    return (int)std::min(dcd::g_err.size(), (size_t)INT32_MAX);
}

// quiet != 0: a failing evaluate only records its message (the caller reads it with
// dcd_deploy_ov_last_error) instead of also printing it on stderr.
DCD_EXPORT void dcd_deploy_ov_set_quiet(int quiet) {
    std::lock_guard<std::mutex> lock(dcd::g_err_mutex);
    dcd::g_quiet = quiet != 0;
}

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
DCD_EXPORT int dcd_deploy_ov_profile(double* out, int n) {
    std::lock_guard<std::mutex> lock(dcd::g_prof_mutex);
    double v[dcd::PH_COUNT + 2];
    for (int i = 0; i <= dcd::PH_COUNT; ++i) v[i] = dcd::g_prof[i];
    v[dcd::PH_COUNT + 1] = dcd::g_prof_calls;
    int w = 0;
    for (; w < n && w < dcd::PH_COUNT + 2; ++w) out[w] = v[w];
    return w;
}

DCD_EXPORT void dcd_deploy_ov_profile_reset() {
    std::lock_guard<std::mutex> lock(dcd::g_prof_mutex);
    for (double& d : dcd::g_prof) d = 0;
    dcd::g_prof_calls = 0;
}

OPENVINO_CREATE_EXTENSIONS(std::vector<ov::Extension::Ptr>(
    {std::make_shared<ov::OpExtension<dcd::DCDPointwise>>(),
     std::make_shared<ov::frontend::onnx::ConversionExtension>("DCDPointwise", "dcd_deploy", dcd::convert_onnx),
     dcd::epilogue_op_extension(), dcd::epilogue_onnx_extension()}));
