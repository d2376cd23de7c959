// DCDPointwise (dcd_pointwise.hpp): attribute and shape checks, evaluate.
//
// * evaluate picks an ISA-specific kernel table at every call (env DCD_DEPLOY_ISA) and runs
//   it on the whole batch; the two big GEMMs split their rows over the threads of
//   OpenVINO's TBB arena (INFERENCE_NUM_THREADS), the rest runs on the calling thread;
// * every size read from a file is checked (PackedLayout::make) before it is used, and
//   failures the CPU plugin would swallow are recorded (op_failures.hpp).
#include "dcd_pointwise.hpp"

#include <algorithm>
#include <cstring>

#include "op_failures.hpp"
#include "op_runtime.hpp"

namespace dcd {

namespace {
constexpr const char* kOp = "DCDPointwise";
}  // namespace

DCDPointwise::DCDPointwise(const ov::OutputVector& args, FusedAttrs attrs, std::string form,
                           std::vector<int64_t> packed)
    : Op(args), m_attrs(std::move(attrs)), m_form(std::move(form)), m_packed(std::move(packed)) {
    constructor_validate_and_infer_types();
}

bool DCDPointwise::visit_attributes(ov::AttributeVisitor& v) {
    m_attrs.visit(v);
    v.on_attribute("form", m_form);
    v.on_attribute("packed", m_packed);
    return true;
}

std::shared_ptr<ov::Node> DCDPointwise::clone_with_new_inputs(const ov::OutputVector& args) const {
    return std::make_shared<DCDPointwise>(args, m_attrs, m_form, m_packed);
}

std::string DCDPointwise::layout(PackedLayout* lay) const {
    return PackedLayout::make(m_packed[0], m_packed[1], m_packed[2], m_packed[3], m_attrs.pool, m_attrs.se,
                              m_attrs.attention, lay);
}

void DCDPointwise::validate_and_infer_types() {
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

void DCDPointwise::validate_checked() {
    const std::string bad_attrs = m_attrs.check(m_packed.empty() ? -1 : m_packed[0]);  // [0]: Cout
    NODE_VALIDATION_CHECK(this, bad_attrs.empty(), bad_attrs);
    NODE_VALIDATION_CHECK(this, parse_form(m_form) >= 0, "form must be weight or latent, got '", clip(m_form), "'");
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
    const InputLayout I = input_layout();
    I.check_inputs(this);
    const auto& xs = get_input_partial_shape(I.x);
    NODE_VALIDATION_CHECK(this, xs.rank().compatible(4), "x must be (B, H, W, Cin)");
    ov::Dimension cin, cout;
    if (packed()) {
        check_packed_shapes(I, lay);
        cout = m_packed[0];
        cin = m_packed[1];
    } else {
        const auto& ws = get_input_partial_shape(I.weight[PK_W0]);
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

// The packed weights' and the residual's shapes against the packed attribute.
void DCDPointwise::check_packed_shapes(const InputLayout& I, const PackedLayout& lay) {
    const auto& xs = get_input_partial_shape(I.x);
    const auto& ps = get_input_partial_shape(I.packed);
    NODE_VALIDATION_CHECK(this, ps.compatible(ov::PartialShape{(int64_t)lay.total}), "packed weights have shape ", ps,
                          ", expected (", lay.total, ")");
    if (I.residual >= 0 && xs.rank().is_static()) {
        const auto& rs = get_input_partial_shape(I.residual);
        NODE_VALIDATION_CHECK(this, rs.compatible(ov::PartialShape{xs[0], xs[1], xs[2], m_packed[0]}),
                              "residual has shape ", rs, ", expected (B, H, W, Cout) = ", xs[0], ", ", xs[1], ", ",
                              xs[2], ", ", m_packed[0]);
    }
}

// The weights' shapes against each other and x, when they are known (at model reading: a
// bad model fails there, loudly; evaluate checks again, but the CPU plugin swallows
// exceptions from an extension's evaluate).
void DCDPointwise::check_constant_shapes(const InputLayout& I) {
    const int ranks[PK_COUNT] = {2, 2, 2, 2, 1, 2, 1, 2, 2, 1};
    for (int t = 0; t < PK_COUNT; ++t) {
        if (I.weight[t] < 0 || t == PK_W0) continue;  // w0's rank: checked by the caller
        const auto& s = get_input_partial_shape(I.weight[t]);
        NODE_VALIDATION_CHECK(this, s.rank().compatible(ranks[t]), kPartNames[t], " must have rank ", ranks[t],
                              ", got ", s);
    }
    for (int i = 1; i < I.count; ++i)
        if (i != I.residual && !get_input_partial_shape(i).is_static()) return;  // checked at evaluate
    check_constant_sizes(I);
}

void DCDPointwise::check_constant_sizes(const InputLayout& I) {
    auto shape = [&](int part) { return get_input_partial_shape(I.weight[part]).to_shape(); };
    const ov::Shape w0 = shape(PK_W0), fc1 = shape(PK_FC1), q = shape(PK_Q);
    const size_t cout = w0[0], cin = w0[1], S = fc1[0], L = q[0], pool = (size_t)m_attrs.pool;
    PackedLayout lay;
    const std::string bad = PackedLayout::make(cout, cin, S, L, pool, m_attrs.se, m_attrs.attention, &lay);
    NODE_VALIDATION_CHECK(this, bad.empty(), bad);
    const auto& xs = get_input_partial_shape(I.x);
    if (xs.rank().is_static() && xs[3].is_static())
        NODE_VALIDATION_CHECK(this, xs[3].get_length() == (int64_t)cin, "x has ", xs[3], " channels, w0 ", cin,
                              " columns");
    const ov::Shape want[PK_COUNT] = {
        {S, cin * pool * pool}, {S, S}, {cout, S}, {L * L, S}, {L * L}, {L, cin}, {L}, {cout, L}, {cout, cin}, {cout}};
    for (int t = 0; t < PK_COUNT; ++t)
        if (I.weight[t] >= 0 && t != PK_W0)
            NODE_VALIDATION_CHECK(this, shape(t) == want[t], kPartNames[t], " has shape ",
                                  get_input_partial_shape(I.weight[t]), ", expected ", want[t]);
    if (I.residual >= 0 && xs.rank().is_static()) {
        const auto& rs = get_input_partial_shape(I.residual);
        NODE_VALIDATION_CHECK(this, rs.compatible(ov::PartialShape{xs[0], xs[1], xs[2], (int64_t)cout}),
                              "residual has shape ", rs, ", expected (B, H, W, Cout) = ", xs[0], ", ", xs[1], ", ",
                              xs[2], ", ", cout);
    }
}

std::shared_ptr<DCDPointwise> DCDPointwise::packed_copy() const {
    if (packed()) return nullptr;
    const InputLayout I = input_layout();
    std::vector<int64_t> dims;
    std::string why;
    auto weights = pack_weights(input_values(), I, m_attrs, &dims, &why);
    if (!weights) return nullptr;
    ov::OutputVector args{input_value(I.x)};
    if (I.residual >= 0) args.push_back(input_value(I.residual));
    args.push_back(weights);
    return std::make_shared<DCDPointwise>(args, m_attrs, m_form, dims);
}

bool DCDPointwise::evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
    try {
        evaluate_checked(outputs, inputs);
    } catch (const std::exception& e) {
        record_failure(outputs, e.what(), kOp);
    } catch (...) {
        record_failure(outputs, "unknown failure", kOp);
    }
    return true;
}

void DCDPointwise::evaluate_checked(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
    const bool prof = profiling();
    const double t0 = prof ? now_seconds() : 0.0;
    std::string err;
    const KernelTable* k = select_kernels(&err);
    if (!k) {
        // The ISA was valid when the model was read (validate_and_infer_types checks it, so
        // read_model/compile_model fail loudly) and DCD_DEPLOY_ISA changed since.
        record_failure(outputs, err, kOp);
        return;
    }
    // (no ov::Shape temporaries here: every one is a heap allocation, at every call)
    const InputLayout I = input_layout();
    OPENVINO_ASSERT((int)inputs.size() == I.count, kOp, ": expected ", I.count, " inputs, got ", inputs.size());
    for (const auto& t : inputs)
        OPENVINO_ASSERT(t.get_element_type() == ov::element::f32, kOp, ": all inputs must be f32");
    OPENVINO_ASSERT(inputs[I.x].get_shape().size() == 4, kOp, ": x ", inputs[I.x].get_shape(),
                    " must be (B, H, W, Cin)");
    Params p{};
    const Sizes s = packed() ? bind_packed_weights(inputs, I, &p) : bind_contract_weights(inputs, I, &p);
    if (I.residual >= 0) {
        const ov::Shape& rs = inputs[I.residual].get_shape();
        OPENVINO_ASSERT(rs.size() == 4 && rs[0] == s.B && rs[1] == s.H && rs[2] == s.W && rs[3] == s.Cout, kOp,
                        ": residual has shape ", rs, ", expected (", s.B, ", ", s.H, ", ", s.W, ", ", s.Cout, ")");
    }
    uint64_t pixels, values;
    OPENVINO_ASSERT(
        mul_ok(s.B, s.H, &pixels) && mul_ok(pixels, s.W, &pixels) && mul_ok(pixels, std::max(s.Cin, s.Cout), &values),
        kOp, ": tensor too large");
    // the CPU plugin hands over an output of the inferred shape: set_shape only if not
    const ov::Shape& os = outputs[0].get_shape();
    if (!(os.size() == 4 && os[0] == s.B && os[1] == s.H && os[2] == s.W && os[3] == s.Cout))
        outputs[0].set_shape(ov::Shape{s.B, s.H, s.W, s.Cout});
    if (pixels == 0) return;
    p.x = inputs[I.x].data<const float>();
    p.residual = I.residual >= 0 ? inputs[I.residual].data<const float>() : nullptr;
    p.out = outputs[0].data<float>();
    p.profile = prof;
    run(k, s, I, &p);
    if (prof) add_profile(p, now_seconds() - t0);
}

DCDPointwise::Sizes DCDPointwise::bind_packed_weights(const ov::TensorVector& inputs, const InputLayout& I,
                                                      Params* p) const {
    const ov::Shape& xs = inputs[I.x].get_shape();
    PackedLayout lay;
    // checked again here: this is where the sizes become pointers
    const std::string bad = layout(&lay);
    OPENVINO_ASSERT(bad.empty(), kOp, ": packed: ", bad);
    const Sizes s{xs[0], xs[1], xs[2], xs[3], (size_t)m_packed[0], (size_t)m_packed[2], (size_t)m_packed[3]};
    OPENVINO_ASSERT(s.Cin == (size_t)m_packed[1], kOp, ": x ", xs, " does not fit the packed weights' ", m_packed[1],
                    " input channels");
    const ov::Shape& ps = inputs[I.packed].get_shape();
    OPENVINO_ASSERT(ps.size() == 1 && ps[0] == lay.total, kOp, ": packed weights have shape ", ps, ", expected (",
                    lay.total, ")");
    bind_packed(inputs[I.packed].data<const float>(), lay, p);
    return s;
}

DCDPointwise::Sizes DCDPointwise::bind_contract_weights(const ov::TensorVector& inputs, const InputLayout& I,
                                                        Params* p) const {
    const ov::Shape& xs = inputs[I.x].get_shape();
    auto shape = [&](int part) -> const ov::Shape& { return inputs[I.weight[part]].get_shape(); };
    const ov::Shape &ws = shape(PK_W0), &fs = shape(PK_FC1), &qs = shape(PK_Q);
    OPENVINO_ASSERT(ws.size() == 2 && xs[3] == ws[1], kOp, ": x ", xs, " does not fit w0 ", ws);
    const size_t pool = (size_t)m_attrs.pool, Cin = xs[3], Cout = ws[0];
    OPENVINO_ASSERT(fs.size() == 2 && fs[1] == Cin * pool * pool, kOp, ": fc1 ", fs, " must be (S, Cin*pool^2)");
    OPENVINO_ASSERT(qs.size() == 2 && qs[1] == Cin, kOp, ": q ", qs, " must be (L, Cin)");
    const size_t S = fs[0], L = qs[0];
    PackedLayout lay;
    const std::string bad = PackedLayout::make(Cout, Cin, S, L, pool, m_attrs.se, m_attrs.attention, &lay);
    OPENVINO_ASSERT(bad.empty(), kOp, ": ", bad);
    const int rank[PK_COUNT] = {2, 2, 2, 2, 1, 2, 1, 2, 2, 1};
    const size_t want[PK_COUNT][2] = {{S, Cin * pool * pool},
                                      {S, S},
                                      {Cout, S},
                                      {L * L, S},
                                      {L * L, 0},
                                      {L, Cin},
                                      {L, 0},
                                      {Cout, L},
                                      {Cout, Cin},
                                      {Cout, 0}};
    const float** dst[PK_COUNT] = {&p->fc1, &p->gate, &p->scale_w, &p->phi_w, &p->phi_b, &p->q,
                                   &p->q_b, &p->p,    &p->w0,      &p->bias,  &p->r};
    for (int t = 0; t < PK_COUNT; ++t) {
        *dst[t] = nullptr;
        if (I.weight[t] < 0) continue;
        const ov::Shape& s = shape(t);
        OPENVINO_ASSERT((int)s.size() == rank[t] && s[0] == want[t][0] && (rank[t] == 1 || s[1] == want[t][1]), kOp,
                        ": ", kPartNames[t], " has shape ", s, ", expected ", ov::Shape(want[t], want[t] + rank[t]));
        *dst[t] = inputs[I.weight[t]].data<const float>();
    }
    return Sizes{xs[0], xs[1], xs[2], Cin, Cout, S, L};
}

void DCDPointwise::run(const KernelTable* k, const Sizes& s, const InputLayout& I, Params* p) const {
    p->B = (int)s.B;
    p->H = (int)s.H;
    p->W = (int)s.W;
    p->Cin = (int)s.Cin;
    p->Cout = (int)s.Cout;
    p->S = (int)s.S;
    p->L = (int)s.L;
    p->pool = (int)m_attrs.pool;
    p->se = (int)m_attrs.se;
    p->attention = (int)m_attrs.attention;
    m_attrs.to_params(p);
    p->form = parse_form(m_form);
    p->parallel_rows = parallel_rows_or_null();
    p->region_per_stage = region_per_stage();
    const bool owned = is_own_constant(*this, I.packed, p->fc1);
    std::shared_ptr<const std::vector<float>> prepared = m_prepared.get(k, *p, owned);
    p->prepared = prepared->data();
    k->run(p);
}

}  // namespace dcd
