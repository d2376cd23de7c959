// DCDDepthwise (dcd_depthwise.hpp): attribute and shape checks, evaluate.
#include "dcd_depthwise.hpp"

#include "op_failures.hpp"
#include "op_runtime.hpp"

namespace dcd {

namespace {
constexpr const char* kOp = "DCDDepthwise";
constexpr int64_t kMaxGeometry = 64;  // kernel, stride, dilation, each pad
}  // namespace

void DepthwiseGeometry::visit(ov::AttributeVisitor& v) {
    v.on_attribute("kernel", kernel);
    v.on_attribute("stride", stride);
    v.on_attribute("dilation", dilation);
    v.on_attribute("pads", pads);
}

std::string DepthwiseGeometry::check() const {
    const std::string range = "1-" + std::to_string(kMaxGeometry);
    if (kernel < 1 || kernel > kMaxGeometry) return "kernel must be " + range + ", got " + std::to_string(kernel);
    if (stride < 1 || stride > kMaxGeometry) return "stride must be " + range + ", got " + std::to_string(stride);
    if (dilation < 1 || dilation > kMaxGeometry)
        return "dilation must be " + range + ", got " + std::to_string(dilation);
    if (pads.size() != 4) return "pads must be {top, left, bottom, right}, got " + std::to_string(pads.size());
    for (int64_t p : pads)
        if (p < 0 || p > kMaxGeometry) return "pads must be 0-" + std::to_string(kMaxGeometry);
    return "";
}

int64_t DepthwiseGeometry::out_size(int64_t n, int axis) const {
    const int64_t span = n + pads[axis] + pads[axis + 2] - dilation * (kernel - 1);
    return span < 1 ? 0 : (span - 1) / stride + 1;
}

DCDDepthwise::DCDDepthwise(const ov::OutputVector& args, FusedAttrs attrs, DepthwiseGeometry geometry,
                           std::vector<int64_t> packed)
    : Op(args), m_attrs(std::move(attrs)), m_geo(std::move(geometry)), m_packed(std::move(packed)) {
    constructor_validate_and_infer_types();
}

bool DCDDepthwise::visit_attributes(ov::AttributeVisitor& v) {
    m_attrs.visit(v);
    m_geo.visit(v);
    v.on_attribute("packed", m_packed);
    return true;
}

std::shared_ptr<ov::Node> DCDDepthwise::clone_with_new_inputs(const ov::OutputVector& args) const {
    return std::make_shared<DCDDepthwise>(args, m_attrs, m_geo, m_packed);
}

std::string DCDDepthwise::layout(PackedLayout* lay) const {
    if (m_packed.size() != 4) return "packed must be {C, C, S, L}, got " + std::to_string(m_packed.size()) + " values";
    for (int64_t d : m_packed)
        if (d <= 0) return "packed dimensions must be positive";
    if (m_packed[0] != m_packed[1]) return "packed must be {C, C, S, L}: a depthwise layer keeps its channels";
    const std::string bad = m_geo.check();
    if (!bad.empty()) return bad;
    return PackedLayout::make(m_packed[0], m_packed[1], m_packed[2], m_packed[3], m_attrs.pool, m_attrs.se,
                              m_attrs.attention, lay, true, (uint64_t)(m_geo.kernel * m_geo.kernel));
}

void DCDDepthwise::validate_and_infer_types() {
    try {
        validate_attributes();
        const InputLayout I = input_layout();
        const int64_t c = m_packed[0];
        const auto& xs = get_input_partial_shape(I.x);
        NODE_VALIDATION_CHECK(this, xs.rank().compatible(4), "x must be (B, H, W, C), got ", xs);
        ov::PartialShape out{ov::Dimension::dynamic(), ov::Dimension::dynamic(), ov::Dimension::dynamic(), c};
        if (xs.rank().is_static()) {
            NODE_VALIDATION_CHECK(this, xs[3].compatible(c), "x has ", xs[3], " channels, the weights ", c);
            out[0] = xs[0];
            for (int a = 0; a < 2; ++a)
                if (xs[a + 1].is_static()) {
                    const int64_t n = m_geo.out_size(xs[a + 1].get_length(), a);
                    NODE_VALIDATION_CHECK(this, n >= 1, "the ", m_geo.kernel, "x", m_geo.kernel,
                                          " kernel does not fit x ", xs);
                    out[a + 1] = n;
                }
        }
        if (I.residual >= 0) {
            const auto& rs = get_input_partial_shape(I.residual);
            NODE_VALIDATION_CHECK(this, rs.compatible(out), "residual has shape ", rs, ", expected ", out);
        }
        set_output_type(0, ov::element::f32, out);
    } catch (const std::exception& e) {
        record_validation_failure(e.what());  // the CPU plugin may swallow it (see DCDPointwise)
        throw;
    }
}

void DCDDepthwise::validate_attributes() {
    const std::string bad_attrs = m_attrs.check(m_packed.empty() ? -1 : m_packed[0]);  // [0]: Cout
    NODE_VALIDATION_CHECK(this, bad_attrs.empty(), bad_attrs);
    PackedLayout lay;
    const std::string bad = layout(&lay);
    NODE_VALIDATION_CHECK(this, bad.empty(), bad);
    std::string isa_error;
    NODE_VALIDATION_CHECK(this, select_kernels(&isa_error) != nullptr, isa_error);
    const InputLayout I = input_layout();
    I.check_inputs(this);
    NODE_VALIDATION_CHECK(this, get_input_partial_shape(I.packed).compatible(ov::PartialShape{(int64_t)lay.total}),
                          "packed weights have shape ", get_input_partial_shape(I.packed), ", expected (", lay.total,
                          ")");
}

bool DCDDepthwise::evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
    try {
        evaluate_checked(outputs, inputs);
    } catch (const std::exception& e) {
        record_failure(outputs, e.what(), kOp);
    } catch (...) {
        record_failure(outputs, "unknown failure", kOp);
    }
    return true;
}

// The tensors evaluate reads, checked against each other and the attributes.
DCDDepthwise::Sizes DCDDepthwise::check_tensors(const ov::TensorVector& inputs, const InputLayout& I,
                                                size_t total) const {
    OPENVINO_ASSERT((int)inputs.size() == I.count, kOp, ": expected ", I.count, " inputs, got ", inputs.size());
    for (const auto& t : inputs)
        OPENVINO_ASSERT(t.get_element_type() == ov::element::f32, kOp, ": all inputs must be f32");
    const ov::Shape& xs = inputs[I.x].get_shape();
    OPENVINO_ASSERT(xs.size() == 4 && xs[3] == (size_t)m_packed[0], kOp, ": x ", xs, " must be (B, H, W, ", m_packed[0],
                    ")");
    uint64_t n;
    OPENVINO_ASSERT(mul_ok(xs[0], xs[1], &n) && mul_ok(n, xs[2], &n) && mul_ok(n, xs[3], &n) && xs[1] <= kMaxDim &&
                        xs[2] <= kMaxDim,
                    kOp, ": tensor too large");
    Sizes s{xs[0], xs[1], xs[2], xs[3], 0, 0};
    const int64_t ho = m_geo.out_size((int64_t)s.H, 0), wo = m_geo.out_size((int64_t)s.W, 1);
    OPENVINO_ASSERT(ho >= 1 && wo >= 1, kOp, ": the ", m_geo.kernel, "x", m_geo.kernel, " kernel does not fit x ", xs);
    s.Ho = (size_t)ho;
    s.Wo = (size_t)wo;
    OPENVINO_ASSERT(inputs[I.packed].get_shape() == ov::Shape{total}, kOp, ": packed weights have shape ",
                    inputs[I.packed].get_shape(), ", expected (", total, ")");
    const ov::Shape os{s.B, s.Ho, s.Wo, s.C};
    if (I.residual >= 0)
        OPENVINO_ASSERT(inputs[I.residual].get_shape() == os, kOp, ": residual has shape ",
                        inputs[I.residual].get_shape(), ", expected ", os);
    return s;
}

void DCDDepthwise::evaluate_checked(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
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
    const ov::Shape os{s.B, s.Ho, s.Wo, s.C};
    if (!(outputs[0].get_shape() == os)) outputs[0].set_shape(os);
    if (s.B * s.Ho * s.Wo == 0) return;
    Params p{};
    p.x = inputs[I.x].data<const float>();
    p.residual = I.residual >= 0 ? inputs[I.residual].data<const float>() : nullptr;
    p.out = outputs[0].data<float>();
    OPENVINO_ASSERT(p.out != p.x, kOp, ": the output must not alias an input");
    p.profile = prof;
    bind_packed(inputs[I.packed].data<const float>(), lay, &p);
    run(k, s, I, &p);
    if (prof) add_profile(p, now_seconds() - t0);
}

void DCDDepthwise::run(const KernelTable* k, const Sizes& s, const InputLayout& I, Params* p) const {
    p->B = (int)s.B;
    p->H = (int)s.H;
    p->W = (int)s.W;
    p->Cin = p->Cout = (int)s.C;
    p->S = (int)m_packed[2];
    p->L = (int)m_packed[3];
    p->Ho = (int)s.Ho;
    p->Wo = (int)s.Wo;
    p->k = (int)m_geo.kernel;
    p->stride = (int)m_geo.stride;
    p->dilation = (int)m_geo.dilation;
    p->pad_t = (int)m_geo.pads[0];
    p->pad_l = (int)m_geo.pads[1];
    p->pool = (int)m_attrs.pool;
    p->se = (int)m_attrs.se;
    p->attention = (int)m_attrs.attention;
    m_attrs.to_params(p);
    p->parallel_rows = parallel_rows_or_null();
    p->region_per_stage = region_per_stage();
    // prepare() makes the branch's parts only: W0 here is (C, k*k), read as it is
    Params branch_only = *p;
    branch_only.w0 = nullptr;
    const bool owned = is_own_constant(*this, I.packed, p->fc1);
    std::shared_ptr<const std::vector<float>> prepared = m_prepared.get(k, branch_only, owned);
    p->prepared = prepared->data();
    k->run_depthwise(p);
}

}  // namespace dcd
