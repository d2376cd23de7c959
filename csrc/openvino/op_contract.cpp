// The fused ops' shared attributes and input positions (op_contract.hpp).
#include "op_contract.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "dcd_kernels.hpp"
#include "op_failures.hpp"

namespace dcd {

void FusedAttrs::visit(ov::AttributeVisitor& v) {
    v.on_attribute("pool", pool);
    v.on_attribute("se", se);
    v.on_attribute("attention", attention);
    v.on_attribute("residual", residual);
    v.on_attribute("activation", activation);
    // (a reader has set activation by now: the attribute above is read first)
    if (activation == "leaky_relu") v.on_attribute("activation_alpha", activation_alpha);
    if (activation == "prelu") {
        // As text, 9 significant digits a slope (a float's exact round trip): OpenVINO writes
        // a float vector attribute with 6, which would change the slopes in a saved IR.
        std::string text = format_floats(activation_slopes);
        v.on_attribute("activation_slopes", text);
        slopes_error = parse_floats(text, &activation_slopes);
    }
}

std::string format_floats(const std::vector<float>& values) {
    std::string out;
    char buf[32];
    for (size_t i = 0; i < values.size(); ++i) {
        std::snprintf(buf, sizeof buf, i ? ", %.9g" : "%.9g", (double)values[i]);
        out += buf;
    }
    return out;
}

std::string parse_floats(const std::string& text, std::vector<float>* out) {
    std::vector<float> values;
    const char* p = text.c_str();
    while (*p) {
        while (*p == ' ' || *p == ',') ++p;
        if (!*p) break;
        char* end = nullptr;
        const float v = std::strtof(p, &end);
        if (end == p) return "activation_slopes must be numbers separated by commas, got '" + clip(text) + "'";
        values.push_back(v);
        p = end;
        if (*p && *p != ',' && *p != ' ')
            return "activation_slopes must be numbers separated by commas, got '" + clip(text) + "'";
    }
    *out = std::move(values);
    return "";
}

void FusedAttrs::to_params(Params* p) const {
    p->act = parse_act(activation);
    p->alpha = p->act == ACT_LEAKY_RELU ? activation_alpha : 0.f;
    p->slope = p->act == ACT_PRELU ? activation_slopes.data() : nullptr;
    // check() refused the rest at validation; the count needs C_out, known here for an
    // op whose weights are not packed (a count only: this runs at every call)
    OPENVINO_ASSERT(p->act != ACT_PRELU || (int64_t)activation_slopes.size() == p->Cout, "activation_slopes has ",
                    activation_slopes.size(), " values, expected one per output channel (", p->Cout, ")");
}

std::string FusedAttrs::check(int64_t cout) const {
    if (pool != 1 && pool != 2) return "pool must be 1 or 2, got " + std::to_string(pool);
    if ((se | 1) != 1 || (attention | 1) != 1 || (residual | 1) != 1)
        return "se, attention and residual must be 0 or 1";
    if (parse_act(activation) < 0)
        return "activation must be none, relu, relu6, silu, hardswish, gelu, leaky_relu, mish or prelu, got '" +
               clip(activation) + "'";
    if (parse_act(activation) == ACT_LEAKY_RELU && !std::isfinite(activation_alpha))
        return "activation leaky_relu needs a finite activation_alpha (its negative slope), got " +
               (std::isnan(activation_alpha) ? std::string("none or nan") : std::to_string(activation_alpha));
    if (parse_act(activation) != ACT_LEAKY_RELU && !std::isnan(activation_alpha))
        return "activation_alpha is leaky_relu's negative slope; activation '" + activation + "' takes none";
    if (!slopes_error.empty()) return slopes_error;
    const bool prelu = parse_act(activation) == ACT_PRELU;
    if (!prelu && !activation_slopes.empty())
        return "activation_slopes are prelu's negative slopes; activation '" + activation + "' takes none";
    if (prelu && activation_slopes.empty())
        return "activation prelu needs activation_slopes (a negative slope per output channel)";
    for (float a : activation_slopes)
        if (!std::isfinite(a)) return "activation_slopes must be finite, got " + std::to_string(a);
    if (prelu && cout >= 0 && (int64_t)activation_slopes.size() != cout)
        return "activation_slopes has " + std::to_string(activation_slopes.size()) +
               " values, expected one per output channel (" + std::to_string(cout) + ")";
    return "";
}

int parse_act(const std::string& a) {
    if (a == "none") return ACT_NONE;
    if (a == "relu") return ACT_RELU;
    if (a == "relu6") return ACT_RELU6;
    if (a == "silu") return ACT_SILU;
    if (a == "hardswish") return ACT_HARDSWISH;
    if (a == "gelu") return ACT_GELU;
    if (a == "leaky_relu") return ACT_LEAKY_RELU;
    if (a == "mish") return ACT_MISH;
    if (a == "prelu") return ACT_PRELU;
    return -1;
}

int parse_form(const std::string& f) {
    if (f == "weight") return FORM_WEIGHT;
    if (f == "latent") return FORM_LATENT;
    if (f == "auto" || f.empty()) return FORM_AUTO;
    return -1;
}

InputLayout::InputLayout(OpKind kind, const FusedAttrs& a, bool is_packed, bool latent_input) {
    for (int& w : weight) w = -1;
    const bool latent = latent_input && kind == OpKind::ConvEpilogue;
    int i = 0;
    if (kind == OpKind::ConvEpilogue) conv = i++;
    x = i++;
    if (a.residual) residual = i++;
    if (latent) z = i++;
    if (is_packed) {
        packed = i++;
        count = i;
        return;
    }
    for (int t = 0; t < PK_COUNT; ++t) {
        if ((t == PK_GATE && !a.se) || (t == PK_SCALE_W && !a.attention)) continue;
        if (t == PK_W0 && kind == OpKind::ConvEpilogue) continue;               // OpenVINO's Conv has W0
        if ((t == PK_Q || t == PK_Q_B) && kind == OpKind::Depthwise) continue;  // R in Q's place
        if ((t == PK_Q || t == PK_Q_B) && latent) continue;                     // the graph computes z
        if (t == PK_R && kind != OpKind::Depthwise) continue;
        weight[t] = i++;
    }
    count = i;
}

std::vector<std::string> InputLayout::names() const {
    std::vector<std::string> out(count);
    const int fixed[5] = {x, conv, residual, z, packed};
    const char* fixed_names[5] = {"x", "conv", "residual", "z", "packed"};
    for (int f = 0; f < 5; ++f)
        if (fixed[f] >= 0) out[fixed[f]] = fixed_names[f];
    for (int t = 0; t < PK_COUNT; ++t)
        if (weight[t] >= 0) out[weight[t]] = kPartNames[t];
    return out;
}

void InputLayout::check_inputs(const ov::Node* node) const {
    NODE_VALIDATION_CHECK(node, (int)node->get_input_size() == count, "expected ", count,
                          " inputs for these attributes, got ", node->get_input_size());
    for (size_t i = 0; i < node->get_input_size(); ++i)
        NODE_VALIDATION_CHECK(node, node->get_input_element_type(i).compatible(ov::element::f32), "input ", i,
                              " must be f32");
}

}  // namespace dcd
