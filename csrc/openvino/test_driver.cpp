// Stand-alone driver of the fused DCD kernels (dcd_kernels.cpp) without OpenVINO: it
// runs the cases of a file through a kernel table and writes the outputs, so the kernels
// can be tested where no OpenVINO runs (cross-built for aarch64, run under qemu-user).
// The oracle is elsewhere (tests/openvino/test_aarch64.py computes the expected outputs in
// float64 numpy and compares); this file only moves bytes in and out.
//
//   dcd_kernel_driver CASES OUT
//
// CASES (native-endian; little-endian on every target here):
//   int32 magic 0x4B444344 ("DCDK"), int32 version 6, int32 number of cases; per case
//   int32 B, H, W, Cin, Cout, S, L, pool, se, attention, residual, act, form, threads,
//   kind, stride, offset, k, pad_t, pad_l, pad_b, pad_r, dilation (the last six: kind 3),
//   float32 alpha (act 6, leaky_relu: its negative slope; ignored for the others), with
//   act 8 (prelu) float32 slopes (Cout, its negative slope per channel), then
//   kind 0 (DCDPointwise): float32 x, [residual], fc1, [gate], [scale_w], phi_w, phi_b, q,
//     q_b, p, w0, bias (the op contract's order and shapes, docs/design.md "Fused op");
//   kind 1 (DCDConvEpilogue): float32 x, conv, [residual], then the same weights without
//     w0; conv and residual are (B, Ho, Wo, Cout), Ho = (H - 1 - offset) / stride + 1;
//   kind 2 (DCDConvEpilogue with latent_input, joint fusion): int32 Lz, then float32 x, conv,
//     [residual], z (B, Ho, Wo, Lz), then kind 1's weights without q, q_b; phi_w is
//     (L·Lz, S), phi_b (L·Lz); Ho, Wo as for kind 1;
//   kind 3 (DCDDepthwise, Cin = Cout = C): float32 x, [residual], fc1, [gate], [scale_w],
//     phi_w, phi_b, p, w0 (C, k*k), bias, r (L, k*k); residual (B, Ho, Wo, C), Ho =
//     (H + pad_t + pad_b - dilation * (k - 1) - 1) / stride + 1.
//   threads > 1: the GEMMs split their rows over that many std::threads, as the op splits
//   them over OpenVINO's.
// OUT: int32 magic, int32 number of cases, then each case's float32 output (B, H, W, Cout),
// (B, Ho, Wo, Cout) for kinds 1-3.
// It runs the portable kernels (the only ones built for a non-x86 CPU; on x86 the
// OpenVINO tests cover every ISA). stdout: one line "kernels: NAME". Exit status 0, or 1
// with one line on stderr.
// The clock and scratch buffers the kernels ask of their host are the extension's own
// (kernel_host.cpp, linked in).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "dcd_kernels.hpp"

namespace {

constexpr int32_t kMagic = 0x4B444344;
int g_threads = 1;
// the members one after another on this thread (a case's threads < -1): what TBB may do
bool g_sequential = false;

[[noreturn]] void fail(const std::string& msg) {
    std::fprintf(stderr, "dcd_kernel_driver: %s\n", msg.c_str());
    std::exit(1);
}

// The op's row split (op_runtime.cpp parallel_rows), on g_threads std::threads (or, with
// g_sequential, all on this thread one after another).
void parallel_rows(int m, int grain, void (*body)(void*, int, int), void* ctx) {
    const int tiles = (m + grain - 1) / grain;
    const int chunks = tiles < g_threads ? tiles : g_threads;
    if (chunks <= 1) {
        body(ctx, 0, m);
        return;
    }
    auto range = [&](int i, int* r0, int* r1) {
        const int t0 = (int)((long)tiles * i / chunks), t1 = (int)((long)tiles * (i + 1) / chunks);
        *r0 = t0 * grain;
        *r1 = t1 * grain < m ? t1 * grain : m;
    };
    int r0, r1;
    if (g_sequential) {
        for (int i = 0; i < chunks; ++i) {
            range(i, &r0, &r1);
            body(ctx, r0, r1);
        }
        return;
    }
    std::vector<std::thread> workers;
    for (int i = 1; i < chunks; ++i) {
        range(i, &r0, &r1);
        workers.emplace_back([=] { body(ctx, r0, r1); });
    }
    range(0, &r0, &r1);
    body(ctx, r0, r1);
    for (auto& w : workers) w.join();
}

struct Reader {
    std::FILE* f;
    int32_t i32() {
        int32_t v;
        if (std::fread(&v, sizeof v, 1, f) != 1) fail("truncated case file");
        return v;
    }
    float f32() {
        float v;
        if (std::fread(&v, sizeof v, 1, f) != 1) fail("truncated case file");
        return v;
    }
    std::vector<float> floats(size_t n) {
        std::vector<float> v(n);
        if (n && std::fread(v.data(), sizeof(float), n, f) != n) fail("truncated case file");
        return v;
    }
};

// One case's sizes and options (the case file's int32 header).
struct Case {
    int B, H, W, Cin, Cout, S, L, pool, se, att, res, act, form, threads, kind, stride, offset, k, pt, pl, pb, pr, dil,
        Ho, Wo, Lz;
    float alpha;
    std::vector<float> slopes;  // act 8 (prelu): Cout
};

// A depthwise case's geometry checked, its output size set.
Case depthwise_case(Case k, int c) {
    const bool ok =
        k.Cin == k.Cout && k.k >= 1 && k.stride >= 1 && k.dil >= 1 && k.pt >= 0 && k.pl >= 0 && k.pb >= 0 && k.pr >= 0;
    if (!ok) fail("case " + std::to_string(c) + ": bad depthwise geometry");
    k.Ho = (k.H + k.pt + k.pb - k.dil * (k.k - 1) - 1) / k.stride + 1;
    k.Wo = (k.W + k.pl + k.pr - k.dil * (k.k - 1) - 1) / k.stride + 1;
    if (k.Ho < 1 || k.Wo < 1) fail("case " + std::to_string(c) + ": the kernel does not fit");
    return k;
}

Case read_case(Reader& r, int c) {
    int32_t h[23];
    for (int32_t& v : h) v = r.i32();
    Case k{h[0],  h[1],  h[2],  h[3],  h[4],  h[5],  h[6],  h[7],  h[8],  h[9], h[10], h[11], h[12],  h[13],
           h[14], h[15], h[16], h[17], h[18], h[19], h[20], h[21], h[22], 0,    0,     0,     r.f32()};
    for (int i = 0; i < 7; ++i)
        if (h[i] < 1) fail("case " + std::to_string(c) + ": sizes must be positive");
    if (k.act == dcd::ACT_PRELU) k.slopes = r.floats((size_t)k.Cout);
    if (k.pool != 1 && k.pool != 2) fail("case " + std::to_string(c) + ": pool must be 1 or 2");
    if (k.kind < 0 || k.kind > 3) fail("case " + std::to_string(c) + ": kind must be 0-3");
    if (k.kind == 3) return depthwise_case(k, c);
    if (k.kind == 2 && (k.Lz = r.i32()) < 1) fail("case " + std::to_string(c) + ": Lz must be positive");
    if (k.kind == 0) k.stride = 1, k.offset = 0;
    if (k.stride < 1 || k.offset < 0 || k.offset >= k.H || k.offset >= k.W)
        fail("case " + std::to_string(c) + ": bad stride or offset");
    k.Ho = (k.H - 1 - k.offset) / k.stride + 1;
    k.Wo = (k.W - 1 - k.offset) / k.stride + 1;
    return k;
}

// Reads one case's tensors, runs it through the kernel table k, returns the output.
// A depthwise case (kind 3): its tensors in the contract's order, the op's geometry.
std::vector<float> run_depthwise_case(const dcd::KernelTable* k, Reader& r, const Case& c) {
    const size_t C = c.Cout, S = c.S, L = c.L, kk = (size_t)c.k * c.k, No = (size_t)c.B * c.Ho * c.Wo;
    std::vector<float> x = r.floats((size_t)c.B * c.H * c.W * C), residual = r.floats(c.res ? No * C : 0);
    std::vector<float> fc1 = r.floats(S * C * c.pool * c.pool), gate = r.floats(c.se ? S * S : 0);
    std::vector<float> scale_w = r.floats(c.att ? C * S : 0), phi_w = r.floats(L * L * S), phi_b = r.floats(L * L);
    std::vector<float> p = r.floats(C * L), w0 = r.floats(C * kk), bias = r.floats(C), rk = r.floats(L * kk);
    std::vector<float> out(No * C);
    dcd::Params P{};
    const int sizes[] = {c.B, c.H, c.W, c.Cin, c.Cout, c.S, c.L, c.pool, c.se, c.att, c.act, c.Ho, c.Wo, c.stride};
    int* dst[] = {&P.B,    &P.H,  &P.W,         &P.Cin, &P.Cout, &P.S,  &P.L,
                  &P.pool, &P.se, &P.attention, &P.act, &P.Ho,   &P.Wo, &P.stride};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) *dst[i] = sizes[i];
    P.alpha = c.alpha;
    P.slope = c.slopes.data();
    P.k = c.k;
    P.pad_t = c.pt;
    P.pad_l = c.pl;
    P.dilation = c.dil;
    P.x = x.data();
    P.residual = c.res ? residual.data() : nullptr;
    P.fc1 = fc1.data();
    P.gate = c.se ? gate.data() : nullptr;
    P.scale_w = c.att ? scale_w.data() : nullptr;
    P.phi_w = phi_w.data();
    P.phi_b = phi_b.data();
    P.p = p.data();
    P.bias = bias.data();
    P.r = rk.data();
    P.out = out.data();
    g_threads = c.threads > 1 ? c.threads : (c.threads < -1 ? -c.threads : 1);
    g_sequential = c.threads < -1;
    P.parallel_rows = g_threads > 1 ? parallel_rows : nullptr;
    std::vector<float> prepared(k->prepared_size(&P));  // the branch's parts: w0 and q null, as the op has it
    k->prepare(&P, prepared.data());
    P.prepared = prepared.data();
    P.w0 = w0.data();
    k->run_depthwise(&P);
    return out;
}

std::vector<float> run_case(const dcd::KernelTable* k, Reader& r, const Case& c) {
    if (c.kind == 3) return run_depthwise_case(k, r, c);
    const size_t N = (size_t)c.B * c.H * c.W, No = (size_t)c.B * c.Ho * c.Wo;
    const int Cin = c.Cin, Cout = c.Cout, S = c.S, L = c.L, Lphi = c.kind == 2 ? c.Lz : c.L;
    const bool q_in = c.kind != 2;  // kind 2 reads z in place of q x_s + q_b
    std::vector<float> x = r.floats(N * Cin);
    std::vector<float> conv = r.floats(c.kind != 0 ? No * Cout : 0);
    std::vector<float> residual = r.floats(c.res ? No * Cout : 0);
    std::vector<float> z = r.floats(c.kind == 2 ? No * c.Lz : 0);
    std::vector<float> fc1 = r.floats((size_t)S * Cin * c.pool * c.pool);
    std::vector<float> gate = r.floats(c.se ? (size_t)S * S : 0);
    std::vector<float> scale_w = r.floats(c.att ? (size_t)Cout * S : 0);
    std::vector<float> phi_w = r.floats((size_t)L * Lphi * S), phi_b = r.floats((size_t)L * Lphi);
    std::vector<float> q = r.floats(q_in ? (size_t)L * Cin : 0), q_b = r.floats(q_in ? L : 0);
    std::vector<float> p = r.floats((size_t)Cout * L), w0 = r.floats(c.kind == 0 ? (size_t)Cout * Cin : 0);
    std::vector<float> bias = r.floats(Cout);
    std::vector<float> out(No * Cout);

    dcd::Params P{};
    P.B = c.B;
    P.H = c.H;
    P.W = c.W;
    P.Cin = Cin;
    P.Cout = Cout;
    P.S = S;
    P.L = L;
    P.pool = c.pool;
    P.se = c.se;
    P.attention = c.att;
    P.act = c.act;
    P.alpha = c.alpha;
    P.slope = c.slopes.data();
    P.form = c.form;
    P.Ho = c.Ho;
    P.Wo = c.Wo;
    P.stride = c.stride;
    P.offset = c.offset;
    P.Lz = c.Lz;
    P.z = c.kind == 2 ? z.data() : nullptr;
    P.x = x.data();
    P.conv = c.kind != 0 ? conv.data() : nullptr;
    P.residual = c.res ? residual.data() : nullptr;
    P.fc1 = fc1.data();
    P.gate = c.se ? gate.data() : nullptr;
    P.scale_w = c.att ? scale_w.data() : nullptr;
    P.phi_w = phi_w.data();
    P.phi_b = phi_b.data();
    P.q = q_in ? q.data() : nullptr;
    P.q_b = q_in ? q_b.data() : nullptr;
    P.p = p.data();
    P.w0 = c.kind == 0 ? w0.data() : nullptr;
    P.bias = bias.data();
    P.out = out.data();
    g_threads = c.threads > 1 ? c.threads : (c.threads < -1 ? -c.threads : 1);
    g_sequential = c.threads < -1;
    P.parallel_rows = g_threads > 1 ? parallel_rows : nullptr;
    std::vector<float> prepared(k->prepared_size(&P));
    k->prepare(&P, prepared.data());
    P.prepared = prepared.data();
    if (c.kind != 0) k->run_epilogue(&P);
    else k->run(&P);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) fail("usage: dcd_kernel_driver CASES OUT");
    const int arg = 1;
    const dcd::KernelTable* k = dcd::kernels_portable();

    std::FILE* in = std::fopen(argv[arg], "rb");
    if (!in) fail(std::string("cannot read ") + argv[arg]);
    Reader r{in};
    if (r.i32() != kMagic || r.i32() != 6) fail("not a version-6 case file");
    const int32_t ncases = r.i32();
    std::vector<std::vector<float>> outputs;
    try {
        for (int32_t c = 0; c < ncases; ++c) outputs.push_back(run_case(k, r, read_case(r, c)));
    } catch (const std::bad_alloc&) {
        fail("out of memory");
    }
    std::fclose(in);

    std::FILE* o = std::fopen(argv[arg + 1], "wb");
    if (!o) fail(std::string("cannot write ") + argv[arg + 1]);
    const int32_t head[2] = {kMagic, ncases};
    bool ok = std::fwrite(head, sizeof head, 1, o) == 1;
    for (const auto& v : outputs) ok = ok && std::fwrite(v.data(), sizeof(float), v.size(), o) == v.size();
    if (std::fclose(o) != 0 || !ok) fail(std::string("cannot write ") + argv[arg + 1]);
    std::printf("kernels: %s\n", k->name);
    return 0;
}
