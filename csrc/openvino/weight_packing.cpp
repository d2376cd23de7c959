// Weight packing and the kernels' prepared weights (weight_packing.hpp).
#include "weight_packing.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace dcd {

namespace {
// The Constants at I's weight positions, by PackedPart (null: absent); "" or why not.
std::string weight_constants(const ov::OutputVector& inputs, const InputLayout& I,
                             std::shared_ptr<ov::op::v0::Constant> c[PK_COUNT]) {
    for (int t = 0; t < PK_COUNT; ++t) {
        if (I.weight[t] < 0) continue;
        if (I.weight[t] >= (int)inputs.size()) return std::string("missing weight input ") + kPartNames[t];
        c[t] = ov::as_type_ptr<ov::op::v0::Constant>(inputs[I.weight[t]].get_node_shared_ptr());
        if (!c[t] || c[t]->get_element_type() != ov::element::f32)
            return std::string("weight ") + kPartNames[t] + " must be an f32 constant (an initializer)";
    }
    return "";
}

std::string shape_text(const ov::Shape& s) {
    std::ostringstream os;
    os << s;
    return os.str();
}

// S, L, Cin, Cout (and Lz without q: the latent-input layout, Φ' of L x Lz; kk with r:
// the depthwise op's k*k taps, Cin = Cout) from the weights' shapes; "" or why they do not
// give them (each is then checked in full).
std::string weight_dims(const std::shared_ptr<ov::op::v0::Constant> c[PK_COUNT], const InputLayout& I, size_t pool,
                        size_t* S, size_t* L, size_t* cin, size_t* cout, size_t* lz, size_t* kk) {
    const ov::Shape &fs = c[PK_FC1]->get_shape(), &ps = c[PK_P]->get_shape();
    if (fs.size() != 2 || ps.size() != 2) return "fc1 and p must be matrices";
    *S = fs[0], *cout = ps[0], *L = ps[1];
    if (I.weight[PK_R] >= 0) {  // the depthwise op: r (L, k*k) in q's place
        const ov::Shape& rs = c[PK_R]->get_shape();
        if (rs.size() != 2) return "r must be a matrix";
        *L = rs[0], *cin = *cout, *kk = rs[1];
        return "";
    }
    if (I.weight[PK_Q] >= 0) {
        const ov::Shape& qs = c[PK_Q]->get_shape();
        if (qs.size() != 2) return "q must be a matrix";
        *L = qs[0], *cin = qs[1];
        return "";
    }
    // latent input: Cin from fc1 (S, Cin·pool²), Lz from phi_w (L·Lz, S)
    const ov::Shape& phs = c[PK_PHI_W]->get_shape();
    if (phs.size() != 2 || *L == 0 || phs[0] < *L || phs[0] % *L || fs[1] % (pool * pool))
        return "phi_w has shape " + shape_text(phs) + ", expected (L·Lz, S) with L = " + std::to_string(*L) + " from p";
    *cin = fs[1] / (pool * pool), *lz = phs[0] / *L;
    return "";
}
}  // namespace

std::shared_ptr<ov::op::v0::Constant> pack_weights(const ov::OutputVector& inputs, const InputLayout& I,
                                                   const FusedAttrs& a, std::vector<int64_t>* dims, std::string* why) {
    std::shared_ptr<ov::op::v0::Constant> c[PK_COUNT];
    *why = weight_constants(inputs, I, c);
    if (!why->empty()) return nullptr;
    size_t S, L, cin, cout, lz = 0, kk = 0;
    *why = weight_dims(c, I, (size_t)a.pool, &S, &L, &cin, &cout, &lz, &kk);
    if (!why->empty()) return nullptr;
    const size_t pool = (size_t)a.pool, lphi = L * (lz ? lz : L);
    PackedLayout lay;
    *why = PackedLayout::make(cout, cin, S, L, pool, a.se, a.attention, &lay, I.weight[PK_W0] >= 0, kk, lz);
    if (!why->empty()) return nullptr;
    const ov::Shape want[PK_COUNT] = {
        {S, cin * pool * pool}, {S, S}, {cout, S}, {lphi, S}, {lphi}, {L, cin}, {L}, {cout, L},
        {cout, kk ? kk : cin},  {cout}, {L, kk}};
    ov::Tensor packed(ov::element::f32, ov::Shape{lay.total});
    std::fill_n(packed.data<float>(), lay.total, 0.f);
    for (int t = 0; t < PK_COUNT; ++t) {
        if (!c[t]) continue;
        if (c[t]->get_shape() != want[t]) {
            *why = std::string(kPartNames[t]) + " has shape " + shape_text(c[t]->get_shape()) + ", expected " +
                   shape_text(want[t]);
            return nullptr;
        }
        std::memcpy(packed.data<float>() + lay.offset[t], c[t]->get_data_ptr(), lay.size[t] * sizeof(float));
    }
    *dims = {(int64_t)cout, (int64_t)cin, (int64_t)S, (int64_t)L};
    if (lz) dims->push_back((int64_t)lz);
    return std::make_shared<ov::op::v0::Constant>(packed);
}

void bind_packed(const float* w, const PackedLayout& lay, Params* p) {
    const float** dst[PK_COUNT] = {&p->fc1, &p->gate, &p->scale_w, &p->phi_w, &p->phi_b, &p->q,
                                   &p->q_b, &p->p,    &p->w0,      &p->bias,  &p->r};
    for (int t = 0; t < PK_COUNT; ++t) *dst[t] = lay.size[t] ? w + lay.offset[t] : nullptr;
}

bool is_own_constant(const ov::Node& node, int input, const void* data) {
    if (input < 0) return false;
    const auto* c = ov::as_type<const ov::op::v0::Constant>(node.get_input_node_ptr(input));
    return c && c->get_data_ptr() == data;
}

bool PreparedCache::same_tensors(const Key& a, const Key& b) {
    return a.table == b.table && !std::memcmp(a.shape, b.shape, sizeof a.shape) &&
           !std::memcmp(a.src, b.src, sizeof a.src);
}

std::shared_ptr<const std::vector<float>> PreparedCache::get(const KernelTable* k, const Params& p, bool owned) const {
    Key key;
    key.table = k;
    const float* src[kCached] = {p.w0, p.q, p.p, p.phi_w, p.scale_w};
    const int shape[5] = {p.Cout, p.Cin, p.L, p.S, p.Lz};
    std::memcpy(key.src, src, sizeof src);
    std::memcpy(key.shape, shape, sizeof shape);
    if (owned) {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (m_prepared && m_owned && same_tensors(m_key, key)) return m_prepared;
    }
    const size_t n[kCached] = {p.w0 ? (size_t)p.Cout * p.Cin : 0, p.q ? (size_t)p.L * p.Cin : 0, (size_t)p.Cout * p.L,
                               (size_t)p.L * (p.Lz ? p.Lz : p.L) * p.S, p.scale_w ? (size_t)p.Cout * p.S : 0};
    for (int t = 0; t < kCached; ++t)
        for (int i = 0; n[t] && i < 8; ++i) key.probe[t][i] = src[t][(n[t] - 1) * i / 7];
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_prepared && same_tensors(m_key, key) && !std::memcmp(key.probe, m_key.probe, sizeof key.probe)) {
        m_owned = owned;
        return m_prepared;
    }
    auto v = std::make_shared<std::vector<float>>(k->prepared_size(&p));
    k->prepare(&p, v->data());
    m_prepared = v;
    m_key = key;
    m_owned = owned;
    return m_prepared;
}

}  // namespace dcd
