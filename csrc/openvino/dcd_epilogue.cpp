// OpenVINO extension: "DCDConvEpilogue" (domain/opset "dcd_deploy"), the k x k and strided
// DCD layers with channel fusion fused around OpenVINO's own convolution (docs/design.md,
// "Fused op"). The graph computes conv = Conv(x, W0) (constant W0, no bias) with the CPU
// plugin's convolution; this op adds the rest in one pass over the output:
//
//   out = act(Λ ⊙ conv + P Φ' (Q x_s + q_b) + bias + residual)
//
// x_s is x at rows/columns i * stride + offset (the centre tap the paper's 1x1 dynamic
// residual reads), and the branch (Λ, Φ') pools the whole x, with the same kernels as
// DCDPointwise (KernelTable::run_epilogue). NHWC throughout.
//
// The ONNX node carries the contract's weights (DCDPointwise's order without w0); the
// conversion checks their shapes and packs them into one Constant (the op is always packed:
// one input instead of nine saves the CPU plugin's per-call tensor wrapping).
#include <openvino/core/extension.hpp>
#include <openvino/core/op_extension.hpp>
#include <openvino/core/parallel.hpp>
#include <openvino/frontend/onnx/extension/conversion.hpp>
#include <openvino/op/constant.hpp>
#include <openvino/op/op.hpp>
#include <openvino/runtime/tensor.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dcd_kernels.hpp"
#include "dcd_op_common.hpp"

namespace dcd {

namespace {
constexpr const char* kOp = "DCDConvEpilogue";
constexpr int64_t kMaxStride = 64;

// Input positions of the op: conv, x, [residual], packed weights.
struct EpiIndex {
    int conv = 0, x = 1, residual = -1, packed, count;
    explicit EpiIndex(bool res) {
        int i = 2;
        if (res) residual = i++;
        packed = i++;
        count = i;
    }
};

// Whether output size n (conv) fits input size h with this stride and offset: every
// centre-tap pixel i * stride + offset, i < n, inside 0..h-1.
bool taps_inside(int64_t n, int64_t h, int64_t stride, int64_t offset) {
    return n >= 1 && (n - 1) * stride + offset < h;
}
}  // namespace

class DCDConvEpilogue : public ov::op::Op {
public:
    OPENVINO_OP("DCDConvEpilogue", "dcd_deploy");

    DCDConvEpilogue() = default;
    // packed = {Cout, Cin, S, L} of the packed weights (the op's last input)
    DCDConvEpilogue(const ov::OutputVector& args, int64_t pool, int64_t se, int64_t attention, int64_t residual,
                    std::string activation, int64_t stride, int64_t offset, std::vector<int64_t> packed)
        : Op(args),
          m_pool(pool),
          m_se(se),
          m_attention(attention),
          m_residual(residual),
          m_activation(std::move(activation)),
          m_stride(stride),
          m_offset(offset),
          m_packed(std::move(packed)) {
        constructor_validate_and_infer_types();
    }

    bool visit_attributes(ov::AttributeVisitor& v) override {
        v.on_attribute("pool", m_pool);
        v.on_attribute("se", m_se);
        v.on_attribute("attention", m_attention);
        v.on_attribute("residual", m_residual);
        v.on_attribute("activation", m_activation);
        v.on_attribute("stride", m_stride);
        v.on_attribute("offset", m_offset);
        v.on_attribute("packed", m_packed);
        return true;
    }

    void validate_and_infer_types() override {
        try {
            validate_attributes();
            validate_shapes();
        } catch (const std::exception& e) {
            record_validation_failure(e.what());  // the CPU plugin may swallow it (see DCDPointwise)
            throw;
        }
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        return std::make_shared<DCDConvEpilogue>(args, m_pool, m_se, m_attention, m_residual, m_activation,
                                                 m_stride, m_offset, m_packed);
    }

    bool has_evaluate() const override { return true; }

    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        try {
            evaluate_checked(outputs, inputs);
        } catch (const std::exception& e) {
            record_failure(outputs, e.what(), kOp);
        } catch (...) {
            record_failure(outputs, "unknown failure", kOp);
        }
        return true;
    }

private:
    // The packed weights' layout from the attribute; "" or why it is out of range.
    std::string layout(PackedLayout* lay) const {
        if (m_packed.size() != 4) return "packed must be {Cout, Cin, S, L}, got " + std::to_string(m_packed.size()) +
                                         " values";
        for (int64_t d : m_packed)
            if (d <= 0) return "packed dimensions must be positive";
        return PackedLayout::make(m_packed[0], m_packed[1], m_packed[2], m_packed[3], m_pool, m_se, m_attention, lay,
                                  false);
    }

    void validate_attributes() {
        NODE_VALIDATION_CHECK(this, m_pool == 1 || m_pool == 2, "pool must be 1 or 2, got ", m_pool);
        NODE_VALIDATION_CHECK(this, (m_se | 1) == 1 && (m_attention | 1) == 1 && (m_residual | 1) == 1,
                              "se, attention and residual must be 0 or 1");
        NODE_VALIDATION_CHECK(this, parse_act(m_activation) >= 0, "activation must be none, relu or relu6, got '",
                              clip(m_activation), "'");
        NODE_VALIDATION_CHECK(this, m_stride >= 1 && m_stride <= kMaxStride, "stride must be 1-", kMaxStride,
                              ", got ", m_stride);
        NODE_VALIDATION_CHECK(this, m_offset >= 0 && m_offset <= kMaxStride, "offset must be 0-", kMaxStride,
                              ", got ", m_offset);
        PackedLayout lay;
        const std::string bad = layout(&lay);
        NODE_VALIDATION_CHECK(this, bad.empty(), "packed: ", bad);
        std::string isa_error;
        NODE_VALIDATION_CHECK(this, select_kernels(&isa_error) != nullptr, isa_error);
        const EpiIndex I(m_residual);
        NODE_VALIDATION_CHECK(this, (int)get_input_size() == I.count, "expected ", I.count,
                              " inputs for these attributes, got ", get_input_size());
        for (size_t i = 0; i < get_input_size(); ++i)
            NODE_VALIDATION_CHECK(this, get_input_element_type(i).compatible(ov::element::f32), "input ", i,
                                  " must be f32");
        NODE_VALIDATION_CHECK(this, get_input_partial_shape(I.packed).compatible(ov::PartialShape{(int64_t)lay.total}),
                              "packed weights have shape ", get_input_partial_shape(I.packed), ", expected (",
                              lay.total, ")");
    }

    // conv (B, Ho, Wo, Cout) and x (B, H, W, Cin) against each other and the weights; the
    // output has conv's shape.
    void validate_shapes() {
        const EpiIndex I(m_residual);
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
                for (int a = 1; a <= 2; ++a)
                    if (xs[a].is_static() && cs[a].is_static())
                        NODE_VALIDATION_CHECK(this, taps_inside(cs[a].get_length(), xs[a].get_length(), m_stride,
                                                                m_offset),
                                              "conv ", cs, " does not fit x ", xs, " with stride ", m_stride,
                                              " and offset ", m_offset);
            }
        }
        if (I.residual >= 0) {
            const auto& rs = get_input_partial_shape(I.residual);
            NODE_VALIDATION_CHECK(this, rs.compatible(out), "residual has shape ", rs, ", expected ", out);
        }
        set_output_type(0, ov::element::f32, out);
    }

    void evaluate_checked(ov::TensorVector& outputs, const ov::TensorVector& inputs) const;
    std::shared_ptr<const std::vector<float>> prepare(const KernelTable* k, const Params& p, size_t total) const;

    int64_t m_pool = 1, m_se = 0, m_attention = 0, m_residual = 0;
    std::string m_activation = "none";
    int64_t m_stride = 1, m_offset = 0;
    std::vector<int64_t> m_packed;

    mutable std::mutex m_cache_mutex;
    mutable std::shared_ptr<const std::vector<float>> m_cache;
    mutable const KernelTable* m_cache_table = nullptr;
    mutable const float* m_cache_src = nullptr;
    mutable float m_cache_probe[16] = {};
};

namespace {
// The tensors evaluate reads, checked against each other: sizes in range (no narrowing
// past this point), shapes consistent.
struct EpiShapes {
    size_t B, H, W, Cin, Ho, Wo, Cout;
};
EpiShapes check_tensors(const ov::TensorVector& inputs, const EpiIndex& I, const std::vector<int64_t>& packed,
                        size_t total, int64_t stride, int64_t offset) {
    OPENVINO_ASSERT((int)inputs.size() == I.count, kOp, ": expected ", I.count, " inputs, got ", inputs.size());
    for (const auto& t : inputs)
        OPENVINO_ASSERT(t.get_element_type() == ov::element::f32, kOp, ": all inputs must be f32");
    const ov::Shape &xs = inputs[I.x].get_shape(), &cs = inputs[I.conv].get_shape();
    OPENVINO_ASSERT(xs.size() == 4 && cs.size() == 4, kOp, ": x ", xs, " and conv ", cs, " must have rank 4");
    EpiShapes s{xs[0], xs[1], xs[2], xs[3], cs[1], cs[2], cs[3]};
    OPENVINO_ASSERT(s.Cin == (size_t)packed[1] && s.Cout == (size_t)packed[0] && cs[0] == s.B, kOp, ": x ", xs,
                    " and conv ", cs, " do not fit the weights (Cout ", packed[0], ", Cin ", packed[1], ")");
    OPENVINO_ASSERT(inputs[I.packed].get_shape() == ov::Shape{total}, kOp, ": packed weights have shape ",
                    inputs[I.packed].get_shape(), ", expected (", total, ")");
    if (I.residual >= 0)
        OPENVINO_ASSERT(inputs[I.residual].get_shape() == cs, kOp, ": residual has shape ",
                        inputs[I.residual].get_shape(), ", expected ", cs);
    uint64_t n;
    OPENVINO_ASSERT(mul_ok(s.B, s.H, &n) && mul_ok(n, s.W, &n) && mul_ok(n, s.Cin, &n) && mul_ok(s.B, s.Ho, &n) &&
                        mul_ok(n, s.Wo, &n) && mul_ok(n, std::max(s.Cout, s.Cin), &n),
                    kOp, ": tensor too large");
    if (s.B * s.Ho * s.Wo == 0) return s;
    OPENVINO_ASSERT(taps_inside(s.Ho, s.H, stride, offset) && taps_inside(s.Wo, s.W, stride, offset), kOp,
                    ": conv ", cs, " does not fit x ", xs, " with stride ", stride, " and offset ", offset);
    return s;
}
}  // namespace

void DCDConvEpilogue::evaluate_checked(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
    const bool prof = profiling();
    const double t0 = prof ? now_seconds() : 0.0;
    std::string err;
    const KernelTable* k = select_kernels(&err);
    OPENVINO_ASSERT(k, err);  // DCD_DEPLOY_ISA changed since the model was read
    PackedLayout lay;
    const std::string bad = layout(&lay);
    OPENVINO_ASSERT(bad.empty(), kOp, ": packed: ", bad);
    const EpiIndex I(m_residual);
    const EpiShapes s = check_tensors(inputs, I, m_packed, lay.total, m_stride, m_offset);
    const ov::Shape& os = outputs[0].get_shape();
    if (!(os == inputs[I.conv].get_shape())) outputs[0].set_shape(inputs[I.conv].get_shape());
    if (s.B * s.Ho * s.Wo == 0) return;

    Params p{};
    p.B = (int)s.B; p.H = (int)s.H; p.W = (int)s.W; p.Cin = (int)s.Cin; p.Cout = (int)s.Cout;
    p.S = (int)m_packed[2]; p.L = (int)m_packed[3];
    p.Ho = (int)s.Ho; p.Wo = (int)s.Wo; p.stride = (int)m_stride; p.offset = (int)m_offset;
    p.pool = (int)m_pool; p.se = (int)m_se; p.attention = (int)m_attention; p.act = parse_act(m_activation);
    const float* w = inputs[I.packed].data<const float>();
    const float** dst[PK_COUNT] = {&p.fc1, &p.gate, &p.scale_w, &p.phi_w, &p.phi_b,
                                   &p.q,   &p.q_b,  &p.p,       &p.w0,    &p.bias};
    for (int t = 0; t < PK_COUNT; ++t) *dst[t] = lay.size[t] ? w + lay.offset[t] : nullptr;
    p.x = inputs[I.x].data<const float>();
    p.conv = inputs[I.conv].data<const float>();
    p.residual = I.residual >= 0 ? inputs[I.residual].data<const float>() : nullptr;
    p.out = outputs[0].data<float>();
    OPENVINO_ASSERT(p.out != p.conv && p.out != p.x, kOp, ": the output must not alias an input");
    p.profile = prof;
    p.parallel_rows = parallel_get_max_threads() > 1 ? parallel_rows : nullptr;
    std::shared_ptr<const std::vector<float>> prepared = prepare(k, p, lay.total);
    p.prepared = prepared->data();
    k->run_epilogue(&p);
    if (prof) {
        std::lock_guard<std::mutex> lock(g_prof_mutex);
        for (int i = 0; i < PH_COUNT; ++i) g_prof[i] += p.phase_seconds[i];
        g_prof[PH_COUNT] += now_seconds() - t0;
        g_prof_calls += 1;
    }
}

// The weights rearranged for the kernels, made once per (weights, ISA): the weights are a
// Constant, so their address and 16 sampled values identify them.
std::shared_ptr<const std::vector<float>> DCDConvEpilogue::prepare(const KernelTable* k, const Params& p,
                                                                   size_t total) const {
    float probe[16];
    for (int i = 0; i < 16; ++i) probe[i] = p.fc1[(total - 1) * i / 15];
    std::lock_guard<std::mutex> lock(m_cache_mutex);
    if (m_cache && m_cache_table == k && m_cache_src == p.fc1 && !std::memcmp(probe, m_cache_probe, sizeof probe))
        return m_cache;
    auto v = std::make_shared<std::vector<float>>(k->prepared_size(&p));
    k->prepare(&p, v->data());
    m_cache = v;
    m_cache_table = k;
    m_cache_src = p.fc1;
    std::memcpy(m_cache_probe, probe, sizeof probe);
    return m_cache;
}

namespace {
// The ONNX node's weights (the contract's order: fc1, [gate], [scale_w], phi_w, phi_b, q,
// q_b, p, bias), each checked against the shapes the others imply, packed back to back.
std::shared_ptr<ov::op::v0::Constant> pack_weights(const ov::OutputVector& w, bool se, bool att, int64_t pool,
                                                   std::vector<int64_t>* dims) {
    const PackedPart parts[PK_COUNT - 1] = {PK_FC1, PK_GATE, PK_SCALE_W, PK_PHI_W, PK_PHI_B, PK_Q, PK_Q_B, PK_P, PK_BIAS};
    const char* names[PK_COUNT - 1] = {"fc1", "gate", "scale_w", "phi_w", "phi_b", "q", "q_b", "p", "bias"};
    std::vector<std::shared_ptr<ov::op::v0::Constant>> c(PK_COUNT, nullptr);
    std::vector<const char*> cname(PK_COUNT, "");
    size_t i = 0;
    for (int t = 0; t < PK_COUNT - 1; ++t) {
        if ((parts[t] == PK_GATE && !se) || (parts[t] == PK_SCALE_W && !att)) continue;
        OPENVINO_ASSERT(i < w.size(), kOp, ": missing weight input ", names[t]);
        c[parts[t]] = ov::as_type_ptr<ov::op::v0::Constant>(w[i++].get_node_shared_ptr());
        cname[parts[t]] = names[t];
        OPENVINO_ASSERT(c[parts[t]] && c[parts[t]]->get_element_type() == ov::element::f32, kOp, ": weight ",
                        names[t], " must be an f32 constant (an initializer)");
    }
    OPENVINO_ASSERT(i == w.size(), kOp, ": ", w.size() + 2, " or more inputs given, expected ", i + 2,
                    " for these attributes (plus residual)");
    const ov::Shape &fs = c[PK_FC1]->get_shape(), &qs = c[PK_Q]->get_shape(), &ps = c[PK_P]->get_shape();
    OPENVINO_ASSERT(fs.size() == 2 && qs.size() == 2 && ps.size() == 2, kOp, ": fc1, q and p must be matrices");
    const size_t S = fs[0], L = qs[0], cin = qs[1], cout = ps[0];
    PackedLayout lay;
    const std::string bad = PackedLayout::make(cout, cin, S, L, pool, se, att, &lay, false);
    OPENVINO_ASSERT(bad.empty(), kOp, ": ", bad);
    const ov::Shape want[PK_COUNT] = {{S, cin * pool * pool}, {S, S}, {cout, S}, {L * L, S}, {L * L}, {L, cin},
                                      {L}, {cout, L}, {}, {cout}};
    ov::Tensor packed(ov::element::f32, ov::Shape{lay.total});
    std::fill_n(packed.data<float>(), lay.total, 0.f);
    for (int t = 0; t < PK_COUNT; ++t) {
        if (!c[t]) continue;
        OPENVINO_ASSERT(c[t]->get_shape() == want[t], kOp, ": ", cname[t], " has shape ", c[t]->get_shape(),
                        ", expected ", want[t]);
        std::memcpy(packed.data<float>() + lay.offset[t], c[t]->get_data_ptr(), lay.size[t] * sizeof(float));
    }
    *dims = {(int64_t)cout, (int64_t)cin, (int64_t)S, (int64_t)L};
    return std::make_shared<ov::op::v0::Constant>(packed);
}
}  // namespace

ov::OutputVector convert_epilogue_onnx(const ov::frontend::NodeContext& ctx) {
    const int64_t pool = ctx.get_attribute<int64_t>("pool", 1), se = ctx.get_attribute<int64_t>("se", 0),
                  att = ctx.get_attribute<int64_t>("attention", 0), res = ctx.get_attribute<int64_t>("residual", 0);
    OPENVINO_ASSERT((pool == 1 || pool == 2) && (se | 1) == 1 && (att | 1) == 1 && (res | 1) == 1, kOp,
                    ": pool must be 1 or 2, se, attention and residual 0 or 1");
    const size_t n = ctx.get_input_size(), first_weight = res ? 3 : 2;
    OPENVINO_ASSERT(n > first_weight, kOp, ": too few inputs (", n, ")");
    ov::OutputVector args, weights;
    for (size_t i = 0; i < n; ++i) (i < first_weight ? args : weights).push_back(ctx.get_input((int)i));
    std::vector<int64_t> dims;
    args.push_back(pack_weights(weights, se, att, pool, &dims));
    auto node = std::make_shared<DCDConvEpilogue>(args, pool, se, att, res,
                                                  ctx.get_attribute<std::string>("activation", "none"),
                                                  ctx.get_attribute<int64_t>("stride", 1),
                                                  ctx.get_attribute<int64_t>("offset", 0), dims);
    return node->outputs();
}

ov::Extension::Ptr epilogue_op_extension() { return std::make_shared<ov::OpExtension<DCDConvEpilogue>>(); }
ov::Extension::Ptr epilogue_onnx_extension() {
    return std::make_shared<ov::frontend::onnx::ConversionExtension>(kOp, "dcd_deploy", convert_epilogue_onnx);
}

}  // namespace dcd
