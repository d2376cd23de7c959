// DCDConvEpilogue (dcd_epilogue.hpp): attribute and shape checks, evaluate.
#include "dcd_epilogue.hpp"

#include <algorithm>

#include "op_failures.hpp"
#include "op_runtime.hpp"

namespace dcd {

namespace {
constexpr const char* kOp = "DCDConvEpilogue";
constexpr int64_t kMaxStride = 64;

// Whether output size n (conv) fits input size h with this stride and offset: every
// centre-tap pixel i * stride + offset, i < n, inside 0..h-1.
bool taps_inside(int64_t n, int64_t h, int64_t stride, int64_t offset) {
    return n >= 1 && (n - 1) * stride + offset < h;
}
}  // namespace

DCDConvEpilogue::DCDConvEpilogue(const ov::OutputVector& args, FusedAttrs attrs, int64_t stride, int64_t offset,
                                 std::vector<int64_t> packed, int64_t latent_input)
    : Op(args),
      m_attrs(std::move(attrs)),
      m_stride(stride),
      m_offset(offset),
      m_latent_input(latent_input),
      m_packed(std::move(packed)) {
    constructor_validate_and_infer_types();
}

bool DCDConvEpilogue::visit_attributes(ov::AttributeVisitor& v) {
    m_attrs.visit(v);
    v.on_attribute("stride", m_stride);
    v.on_attribute("offset", m_offset);
    v.on_attribute("latent_input", m_latent_input);
    v.on_attribute("packed", m_packed);
    return true;
}

std::shared_ptr<ov::Node> DCDConvEpilogue::clone_with_new_inputs(const ov::OutputVector& args) const {
    return std::make_shared<DCDConvEpilogue>(args, m_attrs, m_stride, m_offset, m_packed, m_latent_input);
}

void DCDConvEpilogue::validate_and_infer_types() {
    try {
        validate_attributes();
        validate_shapes();
    } catch (const std::exception& e) {
        record_validation_failure(e.what());  // the CPU plugin may swallow it (see DCDPointwise)
        throw;
    }
}

std::string DCDConvEpilogue::layout(PackedLayout* lay) const {
    if (m_latent_input != 0 && m_latent_input != 1) return "latent_input must be 0 or 1";
    if (m_packed.size() != (m_latent_input ? 5u : 4u))
        return std::string("packed must be {Cout, Cin, S, L") + (m_latent_input ? ", Lz" : "") + "}, got " +
               std::to_string(m_packed.size()) + " values";
    for (int64_t d : m_packed)
        if (d <= 0) return "packed dimensions must be positive";
    return PackedLayout::make(m_packed[0], m_packed[1], m_packed[2], m_packed[3], m_attrs.pool, m_attrs.se,
                              m_attrs.attention, lay, false, 0, m_latent_input ? m_packed[4] : 0);
}

void DCDConvEpilogue::validate_attributes() {
    const std::string bad_attrs = m_attrs.check(m_packed.empty() ? -1 : m_packed[0]);  // [0]: Cout
    NODE_VALIDATION_CHECK(this, bad_attrs.empty(), bad_attrs);
    NODE_VALIDATION_CHECK(this, m_stride >= 1 && m_stride <= kMaxStride, "stride must be 1-", kMaxStride, ", got ",
                          m_stride);
    NODE_VALIDATION_CHECK(this, m_offset >= 0 && m_offset <= kMaxStride, "offset must be 0-", kMaxStride, ", got ",
                          m_offset);
    PackedLayout lay;
    const std::string bad = layout(&lay);
    NODE_VALIDATION_CHECK(this, bad.empty(), "packed: ", bad);
    std::string isa_error;
    NODE_VALIDATION_CHECK(this, select_kernels(&isa_error) != nullptr, isa_error);
    const InputLayout I = input_layout();
    I.check_inputs(this);
    NODE_VALIDATION_CHECK(this, get_input_partial_shape(I.packed).compatible(ov::PartialShape{(int64_t)lay.total}),
                          "packed weights have shape ", get_input_partial_shape(I.packed), ", expected (", lay.total,
                          ")");
}

// conv (B, Ho, Wo, Cout) and x (B, H, W, Cin) against each other and the weights; the
// output has conv's shape.
void DCDConvEpilogue::validate_shapes() {
    const InputLayout I = input_layout();
    const int64_t cout = m_packed[0], cin = m_packed[1];
    const auto& cs = get_input_partial_shape(I.conv);
    const auto& xs = get_input_partial_shape(I.x);
    NODE_VALIDATION_CHECK(this, cs.rank().compatible(4), "conv must be (B, Ho, Wo, Cout), got ", cs);
    NODE_VALIDATION_CHECK(this, xs.rank().compatible(4), "x must be (B, H, W, Cin), got ", xs);
    ov::PartialShape out{ov::Dimension::dynamic(), ov::Dimension::dynamic(), ov::Dimension::dynamic(), cout};
    if (cs.rank().is_static()) {
        NODE_VALIDATION_CHECK(this, cs[3].compatible(cout), "conv has ", cs[3], " channels, the weights ", cout);
        out = ov::PartialShape{cs[0], cs[1], cs[2], cout};
    }
    if (xs.rank().is_static()) {
        NODE_VALIDATION_CHECK(this, xs[3].compatible(cin), "x has ", xs[3], " channels, the weights ", cin);
        if (cs.rank().is_static()) {
            NODE_VALIDATION_CHECK(this, xs[0].compatible(cs[0]), "x batch ", xs[0], " != conv batch ", cs[0]);
            for (int a = 1; a <= 2 && !m_latent_input; ++a)
                if (xs[a].is_static() && cs[a].is_static())
                    NODE_VALIDATION_CHECK(this, taps_inside(cs[a].get_length(), xs[a].get_length(), m_stride, m_offset),
                                          "conv ", cs, " does not fit x ", xs, " with stride ", m_stride,
                                          " and offset ", m_offset);
        }
    }
    if (I.residual >= 0) {
        const auto& rs = get_input_partial_shape(I.residual);
        NODE_VALIDATION_CHECK(this, rs.compatible(out), "residual has shape ", rs, ", expected ", out);
    }
    if (m_latent_input) validate_latent(out);
    set_output_type(0, ov::element::f32, out);
}

// z (B, Ho, Wo, Lz) against the output's (B, Ho, Wo) and the weights' Lz
void DCDConvEpilogue::validate_latent(const ov::PartialShape& out) {
    const auto& zs = get_input_partial_shape(input_layout().z);
    ov::PartialShape want{out[0], out[1], out[2], m_packed[4]};
    NODE_VALIDATION_CHECK(this, zs.compatible(want), "z has shape ", zs, ", expected ", want);
}

bool DCDConvEpilogue::evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
    try {
        evaluate_checked(outputs, inputs);
    } catch (const std::exception& e) {
        record_failure(outputs, e.what(), kOp);
    } catch (...) {
        record_failure(outputs, "unknown failure", kOp);
    }
    return true;
}

// The tensors evaluate reads, checked against each other: sizes in range (no narrowing
// past this point), shapes consistent.
DCDConvEpilogue::Sizes DCDConvEpilogue::check_tensors(const ov::TensorVector& inputs, const InputLayout& I,
                                                      size_t total) const {
    OPENVINO_ASSERT((int)inputs.size() == I.count, kOp, ": expected ", I.count, " inputs, got ", inputs.size());
    for (const auto& t : inputs)
        OPENVINO_ASSERT(t.get_element_type() == ov::element::f32, kOp, ": all inputs must be f32");
    const ov::Shape &xs = inputs[I.x].get_shape(), &cs = inputs[I.conv].get_shape();
    OPENVINO_ASSERT(xs.size() == 4 && cs.size() == 4, kOp, ": x ", xs, " and conv ", cs, " must have rank 4");
    Sizes s{xs[0], xs[1], xs[2], xs[3], cs[1], cs[2], cs[3]};
    OPENVINO_ASSERT(s.Cin == (size_t)m_packed[1] && s.Cout == (size_t)m_packed[0] && cs[0] == s.B, kOp, ": x ", xs,
                    " and conv ", cs, " do not fit the weights (Cout ", m_packed[0], ", Cin ", m_packed[1], ")");
    OPENVINO_ASSERT(inputs[I.packed].get_shape() == ov::Shape{total}, kOp, ": packed weights have shape ",
                    inputs[I.packed].get_shape(), ", expected (", total, ")");
    if (I.residual >= 0)
        OPENVINO_ASSERT(inputs[I.residual].get_shape() == cs, kOp, ": residual has shape ",
                        inputs[I.residual].get_shape(), ", expected ", cs);
    if (I.z >= 0) {
        const ov::Shape want{cs[0], cs[1], cs[2], (size_t)m_packed[4]};
        OPENVINO_ASSERT(inputs[I.z].get_shape() == want, kOp, ": z has shape ", inputs[I.z].get_shape(), ", expected ",
                        want);
    }
    uint64_t n;
    OPENVINO_ASSERT(mul_ok(s.B, s.H, &n) && mul_ok(n, s.W, &n) && mul_ok(n, s.Cin, &n) && mul_ok(s.B, s.Ho, &n) &&
                        mul_ok(n, s.Wo, &n) && mul_ok(n, std::max(s.Cout, s.Cin), &n),
                    kOp, ": tensor too large");
    if (s.B * s.Ho * s.Wo == 0 || I.z >= 0) return s;  // z, not x, is read per output pixel
    OPENVINO_ASSERT(taps_inside(s.Ho, s.H, m_stride, m_offset) && taps_inside(s.Wo, s.W, m_stride, m_offset), kOp,
                    ": conv ", cs, " does not fit x ", xs, " with stride ", m_stride, " and offset ", m_offset);
    return s;
}

void DCDConvEpilogue::evaluate_checked(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
    const bool prof = profiling();
    const double t0 = prof ? now_seconds() : 0.0;
    std::string err;
    const KernelTable* k = select_kernels(&err);
    OPENVINO_ASSERT(k, err);  // DCD_DEPLOY_ISA changed since the model was read
    PackedLayout lay;
    const std::string bad = layout(&lay);
    OPENVINO_ASSERT(bad.empty(), kOp, ": packed: ", bad);
    const InputLayout I = input_layout();
    const Sizes s = check_tensors(inputs, I, lay.total);
    const ov::Shape& os = outputs[0].get_shape();
    if (!(os == inputs[I.conv].get_shape())) outputs[0].set_shape(inputs[I.conv].get_shape());
    if (s.B * s.Ho * s.Wo == 0) return;
    Params p{};
    p.x = inputs[I.x].data<const float>();
    p.conv = inputs[I.conv].data<const float>();
    p.residual = I.residual >= 0 ? inputs[I.residual].data<const float>() : nullptr;
    p.z = I.z >= 0 ? inputs[I.z].data<const float>() : nullptr;
    p.out = outputs[0].data<float>();
    OPENVINO_ASSERT(p.out != p.conv && p.out != p.x && p.out != p.z, kOp, ": the output must not alias an input");
    p.profile = prof;
    bind_packed(inputs[I.packed].data<const float>(), lay, &p);
    run(k, s, I, &p);
    if (prof) add_profile(p, now_seconds() - t0);
}

void DCDConvEpilogue::run(const KernelTable* k, const Sizes& s, const InputLayout& I, Params* p) const {
    p->B = (int)s.B;
    p->H = (int)s.H;
    p->W = (int)s.W;
    p->Cin = (int)s.Cin;
    p->Cout = (int)s.Cout;
    p->S = (int)m_packed[2];
    p->L = (int)m_packed[3];
    p->Lz = m_latent_input ? (int)m_packed[4] : 0;
    p->Ho = (int)s.Ho;
    p->Wo = (int)s.Wo;
    p->stride = (int)m_stride;
    p->offset = (int)m_offset;
    p->pool = (int)m_attrs.pool;
    p->se = (int)m_attrs.se;
    p->attention = (int)m_attrs.attention;
    m_attrs.to_params(p);
    p->parallel_rows = parallel_rows_or_null();
    p->region_per_stage = region_per_stage();
    const bool owned = is_own_constant(*this, I.packed, p->fc1);
    std::shared_ptr<const std::vector<float>> prepared = m_prepared.get(k, *p, owned);
    p->prepared = prepared->data();
    k->run_epilogue(p);
}

}  // namespace dcd
