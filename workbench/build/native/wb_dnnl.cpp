// Convolutions, pooling and GEMMs on oneDNN for the workbench's generated programs.
//
// The generated code includes only wb_dnnl.h (a few C declarations), so a
// program's build never parses dnnl.hpp; this file is compiled once per
// machine into libwb_dnnl.so (workbench/build/onednn.py).
//
// A program instance owns one context (DaCe state field, made in
// __dace_init). Each call site passes a pointer that names it (its static
// descriptor) and the descriptor of this call; the context keeps, per site, a
// primitive per descriptor seen (created on its first call: a program whose
// sizes are symbols calls a site with other sizes) and the weights reordered
// into the primitives' layout, once per layout. The reordered weights are
// reused while the call passes the same weight pointer with the same sampled
// values: weights are constants of the program, as initializers are for
// onnxruntime.
#include "wb_dnnl.h"

#include <dnnl.hpp>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

memory::dims dims_of(const long* v, int n) { return memory::dims(v, v + n); }

// A cheap fingerprint of a weight tensor: 64 values spread over it.
unsigned long long sample(const float* w, long count) {
    unsigned long long h = 1469598103934665603ull;
    long step = count > 64 ? count / 64 : 1;
    for (long i = 0; i < count; i += step) {
        unsigned int bits;
        std::memcpy(&bits, w + i, 4);
        h = (h ^ bits) * 1099511628211ull;
    }
    return h;
}

dnnl::algorithm eltwise_alg(int kind) {
    switch (kind) {
        case WB_POST_RELU: return dnnl::algorithm::eltwise_relu;
        case WB_POST_CLIP: return dnnl::algorithm::eltwise_clip;
        case WB_POST_SWISH: return dnnl::algorithm::eltwise_swish;
        case WB_POST_HARDSWISH: return dnnl::algorithm::eltwise_hardswish;
        case WB_POST_SIGMOID: return dnnl::algorithm::eltwise_logistic;
        default: return dnnl::algorithm::eltwise_linear;
    }
}

// Weights in a primitive's layout, reordered again only when the caller passes
// another pointer or other sampled values.
struct Packed {
    memory::desc user;
    memory weights;
    const float* of = nullptr;
    unsigned long long sampled = 0;
    long count = 0;

    // ``always``: the program writes these weights (a training program's parameters, or a
    // kernel it computes), so a sample of them cannot tell whether they changed.
    const memory& from(const float* w, const dnnl::engine& eng, dnnl::stream& s, bool always) {
        unsigned long long h = sample(w, count);
        if (always || of != w || sampled != h) {
            memory plain(user, eng, const_cast<float*>(w));
            dnnl::reorder(plain, weights).execute(s, plain, weights);
            of = w;
            sampled = h;
        }
        return weights;
    }
};

struct Conv {
    wb_conv_desc desc;        // what it was made for
    dnnl::convolution_forward prim;
    memory::desc user_src, user_dst, user_wei, src_md, dst_md, wei_md, bias_md;
    long wei_count = 1;
    Packed* packed = nullptr; // the site's weights in wei_md
    bool reorder_src = false, reorder_dst = false;
    std::string impl;         // oneDNN's name for the kernel it chose
    int add_index = -1;       // position of the residual Add (a sum) among the post-ops
    memory src_tmp, dst_tmp;
};

struct Pool {
    wb_pool_desc desc;
    dnnl::pooling_forward prim;
    memory::desc user_src, user_dst;
    std::string impl;
};

// oneDNN's names for its reference loops and its im2col GEMMs: the caller's own layout
// is kept only when the library has a faster kernel for it.
bool direct_kernel(const std::string& impl) {
    return impl.find("ref") == std::string::npos && impl.find("gemm") == std::string::npos;
}

struct WGrad {
    wb_wgrad_desc desc;
    dnnl::convolution_backward_weights prim;
    memory::desc user_src, user_ddst, user_dw, src_md, ddst_md, dw_md;
    bool reorder_src = false, reorder_ddst = false, reorder_dw = false;
    memory src_tmp, ddst_tmp, dw_tmp;
    std::string impl;
};

struct Deconv {
    wb_conv_desc desc;
    dnnl::deconvolution_forward prim;
    memory::desc user_src, user_dst, user_wei, src_md, dst_md, wei_md, bias_md;
    long wei_count = 1;
    Packed* packed = nullptr;
    bool reorder_src = false, reorder_dst = false;
    std::string impl;
    memory src_tmp, dst_tmp;
};

struct MatMul;

// A call site's primitives, one per descriptor it was called with (the oldest dropped
// past MAX_SIZES), and its weights packed once per layout the primitives ask for.
constexpr size_t MAX_SIZES = 32;

template <class T>
struct Site {
    std::vector<std::unique_ptr<T>> made;
    std::vector<std::unique_ptr<Packed>> packs;
};

struct Context {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    std::unordered_map<const void*, Site<Conv>> convs;
    std::unordered_map<const void*, Site<Pool>> pools;
    std::unordered_map<const void*, Site<MatMul>> matmuls;
    std::unordered_map<const void*, Site<WGrad>> wgrads;
    std::unordered_map<const void*, Site<Deconv>> deconvs;
    std::mutex lock;
    std::string error;
};

std::unique_ptr<Conv> make_conv(Context& ctx, const wb_conv_desc* d) {
    auto c = std::make_unique<Conv>();
    c->desc = *d;
    int nd = d->nsp + 2;
    memory::dims src_dims{d->n, d->c}, dst_dims{d->n, d->m}, wei_dims, k, stride, dil, pl, pr;
    for (int i = 0; i < d->nsp; ++i) {
        src_dims.push_back(d->in[i]);
        dst_dims.push_back(d->out[i]);
        k.push_back(d->k[i]);
        stride.push_back(d->stride[i]);
        dil.push_back(d->dil[i] - 1);  // oneDNN counts the gaps between taps
        pl.push_back(d->pad_l[i]);
        pr.push_back(d->pad_r[i]);
    }
    if (d->groups > 1) wei_dims = {d->groups, d->m / d->groups, d->c / d->groups};
    else wei_dims = {d->m, d->c};
    wei_dims.insert(wei_dims.end(), k.begin(), k.end());
    c->user_src = memory::desc(src_dims, dt::f32, dims_of(d->src_strides, nd));
    c->user_dst = memory::desc(dst_dims, dt::f32, dims_of(d->dst_strides, nd));
    static const tag plain_w[] = {tag::undef, tag::undef, tag::undef, tag::oiw, tag::oihw, tag::oidhw};
    static const tag plain_gw[] = {tag::undef, tag::undef, tag::undef, tag::goiw, tag::goihw, tag::goidhw};
    c->user_wei = memory::desc(wei_dims, dt::f32, d->groups > 1 ? plain_gw[nd] : plain_w[nd]);
    for (auto v : wei_dims) c->wei_count *= v;

    dnnl::post_ops ops;
    for (int i = 0; i < d->n_post; ++i) {
        if (d->post[i] == WB_POST_ADD) {
            // sum, not binary_add: oneDNN's fast kernels take a binary operand only in
            // the destination's own blocked layout (a plain one fell to ref:any, 150x
            // slower); sum accumulates onto what the destination holds
            c->add_index = i;
            ops.append_sum(1.0f);
        } else {
            ops.append_eltwise(eltwise_alg(d->post[i]), d->alpha[i], d->beta[i]);
        }
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    memory::desc any_src(src_dims, dt::f32, tag::any), any_dst(dst_dims, dt::f32, tag::any);
    memory::desc any_wei(wei_dims, dt::f32, tag::any);
    memory::desc bias = d->has_bias ? memory::desc({d->m}, dt::f32, tag::a) : memory::desc();
    auto algo = dnnl::algorithm::convolution_direct;
    auto kind = dnnl::prop_kind::forward_inference;
    // The caller's own layout first (no reorder around the call); the library's
    // choice only when it has no fast kernel for that layout.
    dnnl::convolution_forward::primitive_desc pd;
    bool direct = false;
    try {
        pd = dnnl::convolution_forward::primitive_desc(ctx.engine, kind, algo, c->user_src, any_wei,
                                                      bias, c->user_dst, stride, dil, pl, pr, attr);
        direct = direct_kernel(pd.impl_info_str());
    } catch (const dnnl::error&) {
        direct = false;
    }
    if (!direct) {
        pd = dnnl::convolution_forward::primitive_desc(ctx.engine, kind, algo, any_src, any_wei, bias,
                                                      any_dst, stride, dil, pl, pr, attr);
    }
    c->prim = dnnl::convolution_forward(pd);
    c->impl = pd.impl_info_str();
    c->src_md = pd.src_desc();
    c->dst_md = pd.dst_desc();
    c->wei_md = pd.weights_desc();
    c->bias_md = bias;
    c->reorder_src = c->src_md != c->user_src;
    c->reorder_dst = c->dst_md != c->user_dst;
    if (c->reorder_src) c->src_tmp = memory(c->src_md, ctx.engine);
    if (c->reorder_dst) c->dst_tmp = memory(c->dst_md, ctx.engine);
    return c;
}

// ConvTranspose: oneDNN's weights are (m, c, *k) (grouped: (g, m/g, c/g, *k)); ONNX's
// (c, m/g, *k) is read through strides and packed like a convolution's weights.
std::unique_ptr<Deconv> make_deconv(Context& ctx, const wb_conv_desc* d) {
    auto p = std::make_unique<Deconv>();
    p->desc = *d;
    int nd = d->nsp + 2;
    memory::dims src_dims{d->n, d->c}, dst_dims{d->n, d->m}, wei_dims, wei_strides, k, stride,
        dil, pl, pr;
    long taps = 1;
    for (int i = 0; i < d->nsp; ++i) {
        src_dims.push_back(d->in[i]);
        dst_dims.push_back(d->out[i]);
        k.push_back(d->k[i]);
        taps *= d->k[i];
        stride.push_back(d->stride[i]);
        dil.push_back(d->dil[i] - 1);
        pl.push_back(d->pad_l[i]);
        pr.push_back(d->pad_r[i]);
    }
    long mg = d->m / d->groups, cg = d->c / d->groups;
    if (d->groups > 1) {
        wei_dims = {d->groups, mg, cg};
        wei_strides = {cg * mg * taps, taps, mg * taps};
    } else {
        wei_dims = {d->m, d->c};
        wei_strides = {taps, d->m * taps};
    }
    long step = taps;
    for (int i = 0; i < d->nsp; ++i) {
        step /= d->k[i];
        wei_dims.push_back(d->k[i]);
        wei_strides.push_back(step);
    }
    p->user_src = memory::desc(src_dims, dt::f32, dims_of(d->src_strides, nd));
    p->user_dst = memory::desc(dst_dims, dt::f32, dims_of(d->dst_strides, nd));
    p->user_wei = memory::desc(wei_dims, dt::f32, wei_strides);
    p->wei_count = d->c * mg * taps;
    memory::desc any_src(src_dims, dt::f32, tag::any), any_dst(dst_dims, dt::f32, tag::any);
    memory::desc any_wei(wei_dims, dt::f32, tag::any);
    memory::desc bias = d->has_bias ? memory::desc({d->m}, dt::f32, tag::a) : memory::desc();
    auto make = [&](const memory::desc& src, const memory::desc& dst) {
        return dnnl::deconvolution_forward::primitive_desc(
            ctx.engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
            src, any_wei, bias, dst, stride, dil, pl, pr);
    };
    dnnl::deconvolution_forward::primitive_desc pd;
    bool direct = false;
    try {
        pd = make(p->user_src, p->user_dst);
        direct = direct_kernel(pd.impl_info_str());
    } catch (const dnnl::error&) {
        direct = false;
    }
    if (!direct) pd = make(any_src, any_dst);
    p->prim = dnnl::deconvolution_forward(pd);
    p->impl = pd.impl_info_str();
    p->src_md = pd.src_desc();
    p->dst_md = pd.dst_desc();
    p->wei_md = pd.weights_desc();
    p->bias_md = bias;
    p->reorder_src = p->src_md != p->user_src;
    p->reorder_dst = p->dst_md != p->user_dst;
    if (p->reorder_src) p->src_tmp = memory(p->src_md, ctx.engine);
    if (p->reorder_dst) p->dst_tmp = memory(p->dst_md, ctx.engine);
    return p;
}

// The weight gradient on the backward-weights primitive: the caller's layouts of src and
// diff_dst where the library has a fast kernel for them, else its own (reordered around
// the call); diff_w is small and always goes through the library's layout.
std::unique_ptr<WGrad> make_wgrad(Context& ctx, const wb_wgrad_desc* d) {
    auto g = std::make_unique<WGrad>();
    g->desc = *d;
    int nd = d->nsp + 2;
    memory::dims src_dims{d->n, d->c}, dst_dims{d->n, d->m}, w_dims, k, stride, dil, pl, pr;
    for (int i = 0; i < d->nsp; ++i) {
        src_dims.push_back(d->in[i]);
        dst_dims.push_back(d->out[i]);
        k.push_back(d->k[i]);
        stride.push_back(d->stride[i]);
        dil.push_back(d->dil[i] - 1);
        pl.push_back(d->pad_l[i]);
        pr.push_back(d->pad_r[i]);
    }
    bool grouped = d->groups > 1;
    if (grouped) w_dims = {d->groups, d->m / d->groups, d->c / d->groups};
    else w_dims = {d->m, d->c};
    w_dims.insert(w_dims.end(), k.begin(), k.end());
    g->user_src = memory::desc(src_dims, dt::f32, dims_of(d->src_strides, nd));
    g->user_ddst = memory::desc(dst_dims, dt::f32, dims_of(d->diff_dst_strides, nd));
    g->user_dw = memory::desc(w_dims, dt::f32,
                              dims_of(d->diff_w_strides + (grouped ? 0 : 1), (int)w_dims.size()));
    memory::desc any_src(src_dims, dt::f32, tag::any), any_dst(dst_dims, dt::f32, tag::any);
    memory::desc any_w(w_dims, dt::f32, tag::any);
    auto algo = dnnl::algorithm::convolution_direct;
    auto make = [&](const memory::desc& src, const memory::desc& dst) {
        dnnl::convolution_forward::primitive_desc hint(
            ctx.engine, dnnl::prop_kind::forward_training, algo, src, any_w, dst, stride, dil,
            pl, pr);
        return dnnl::convolution_backward_weights::primitive_desc(
            ctx.engine, algo, src, any_w, dst, stride, dil, pl, pr, hint);
    };
    dnnl::convolution_backward_weights::primitive_desc pd;
    bool direct = false;
    try {
        pd = make(g->user_src, g->user_ddst);
        direct = direct_kernel(pd.impl_info_str());
    } catch (const dnnl::error&) {
        direct = false;
    }
    if (!direct) pd = make(any_src, any_dst);
    g->prim = dnnl::convolution_backward_weights(pd);
    g->impl = pd.impl_info_str();
    g->src_md = pd.src_desc();
    g->ddst_md = pd.diff_dst_desc();
    g->dw_md = pd.diff_weights_desc();
    g->reorder_src = g->src_md != g->user_src;
    g->reorder_ddst = g->ddst_md != g->user_ddst;
    g->reorder_dw = g->dw_md != g->user_dw;
    if (g->reorder_src) g->src_tmp = memory(g->src_md, ctx.engine);
    if (g->reorder_ddst) g->ddst_tmp = memory(g->ddst_md, ctx.engine);
    if (g->reorder_dw) g->dw_tmp = memory(g->dw_md, ctx.engine);
    return g;
}

// A GEMM as a 1x1 convolution over a width of m with k input and n output channels:
// A and Y are then channels-last (nwc) at their row strides, B the weights. On AVX2
// oneDNN 3.2 has brgemm kernels for such convolutions (brgconv_1x1) and only its
// plain jit GEMM for matmul primitives (measured slower than OpenBLAS).
struct MatMul {
    wb_matmul_desc desc;
    dnnl::convolution_forward prim;
    memory::desc user_a, user_y, bias_md, user_wei, wei_md;
    long wei_count = 0;
    Packed* packed = nullptr;
    std::string impl;
};

std::unique_ptr<MatMul> make_matmul(Context& ctx, const wb_matmul_desc* d) {
    auto p = std::make_unique<MatMul>();
    p->desc = *d;
    p->user_a = memory::desc({1, d->k, d->m}, dt::f32, {d->m * d->lda, 1, d->lda});
    p->user_y = memory::desc({1, d->n, d->m}, dt::f32, {d->m * d->ldc, 1, d->ldc});
    p->user_wei = memory::desc({d->n, d->k, 1}, dt::f32,
                               {d->b_strides[1], d->b_strides[0], 1});
    p->wei_count = d->k * d->n;
    p->bias_md = d->has_bias ? memory::desc({d->n}, dt::f32, tag::a) : memory::desc();
    memory::desc any_w({d->n, d->k, 1}, dt::f32, tag::any);
    const memory::dims one{1}, zero{0};
    dnnl::convolution_forward::primitive_desc pd(
        ctx.engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        p->user_a, any_w, p->bias_md, p->user_y, one, zero, zero, zero);
    p->prim = dnnl::convolution_forward(pd);
    p->impl = pd.impl_info_str();
    p->wei_md = pd.weights_desc();
    return p;
}

// Pooling reads and writes the caller's layouts as they are: channels-last data
// (ChannelsLast) gets the library's fast kernels with no reorder.
std::unique_ptr<Pool> make_pool(Context& ctx, const wb_pool_desc* d) {
    auto p = std::make_unique<Pool>();
    p->desc = *d;
    int nd = d->nsp + 2;
    memory::dims src_dims{d->n, d->c}, dst_dims{d->n, d->c}, k, stride, dil, pl, pr;
    for (int i = 0; i < d->nsp; ++i) {
        src_dims.push_back(d->in[i]);
        dst_dims.push_back(d->out[i]);
        k.push_back(d->k[i]);
        stride.push_back(d->stride[i]);
        dil.push_back(d->dil[i] - 1);
        pl.push_back(d->pad_l[i]);
        pr.push_back(d->pad_r[i]);
    }
    p->user_src = memory::desc(src_dims, dt::f32, dims_of(d->src_strides, nd));
    p->user_dst = memory::desc(dst_dims, dt::f32, dims_of(d->dst_strides, nd));
    auto alg = d->algorithm == WB_POOL_MAX ? dnnl::algorithm::pooling_max
             : d->algorithm == WB_POOL_AVG_INCLUDE_PAD ? dnnl::algorithm::pooling_avg_include_padding
             : dnnl::algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_forward::primitive_desc pd(ctx.engine, dnnl::prop_kind::forward_inference, alg,
                                             p->user_src, p->user_dst, stride, k, dil, pl, pr);
    p->prim = dnnl::pooling_forward(pd);
    p->impl = pd.impl_info_str();
    return p;
}

// The site's weights in the layout ``p`` reads them in (packed on the first call).
template <class T>
void attach(Context& ctx, Site<T>& site, T* p) {
    for (auto& k : site.packs)
        if (k->weights.get_desc() == p->wei_md && k->user == p->user_wei) {
            p->packed = k.get();
            return;
        }
    auto k = std::make_unique<Packed>();
    k->user = p->user_wei;
    k->count = p->wei_count;
    k->weights = memory(p->wei_md, ctx.engine);
    p->packed = k.get();
    site.packs.push_back(std::move(k));
}

void attach(Context&, Site<Pool>&, Pool*) {}
void attach(Context&, Site<WGrad>&, WGrad*) {}

// The primitive of call site ``site`` for descriptor ``d`` (made on the first call with
// it), looked up under the context's lock.
template <class T, class D, class Make>
T* slot_for(Context& ctx, std::unordered_map<const void*, Site<T>>& map, const void* site,
            const D* d, Make make) {
    std::lock_guard<std::mutex> guard(ctx.lock);
    auto& here = map[site];
    for (auto& p : here.made)
        if (std::memcmp(&p->desc, d, sizeof *d) == 0) return p.get();
    if (here.made.size() >= MAX_SIZES) here.made.erase(here.made.begin());
    here.made.push_back(make(ctx, d));
    T* p = here.made.back().get();
    attach(ctx, here, p);
    return p;
}

// A *_check answer: 0 and the kernel's name from ``make`` (a primitive made in a
// throwaway context), or 1 and why oneDNN refused.
template <class Make>
int describe(char* info, int size, Make make) {
    std::string text;
    int rc = 0;
    try {
        Context ctx;
        text = make(ctx);
    } catch (const std::exception& e) {
        text = e.what();
        rc = 1;
    }
    std::snprintf(info, size, "%s", text.c_str());
    return rc;
}

}  // namespace

extern "C" {

int wb_dnnl_pool(void* handle, const wb_pool_desc* d, const float* src, float* dst) {
    return wb_dnnl_pool_at(handle, d, d, src, dst);
}

int wb_dnnl_pool_at(void* handle, const void* site, const wb_pool_desc* d, const float* src,
                    float* dst) {
    if (!handle) return 1;
    auto& ctx = *static_cast<Context*>(handle);
    try {
        Pool* p = slot_for(ctx, ctx.pools, site, d, make_pool);
        memory s(p->user_src, ctx.engine, const_cast<float*>(src)), t(p->user_dst, ctx.engine, dst);
        p->prim.execute(ctx.stream, {{DNNL_ARG_SRC, s}, {DNNL_ARG_DST, t}});
        ctx.stream.wait();
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "wb_dnnl: pooling failed: %s\n", e.what());
        return 2;
    }
}

int wb_dnnl_pool_check(const wb_pool_desc* d, char* info, int size) {
    return describe(info, size, [&](Context& ctx) { return make_pool(ctx, d)->impl; });
}

void* wb_dnnl_context_new(void) {
    try {
        return new Context();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "wb_dnnl: no oneDNN CPU engine: %s\n", e.what());
        return nullptr;
    }
}

void wb_dnnl_context_free(void* ctx) { delete static_cast<Context*>(ctx); }

int wb_dnnl_conv_check(const wb_conv_desc* d, char* info, int size) {
    return describe(info, size, [&](Context& ctx) {
        auto c = make_conv(ctx, d);
        return c->impl + (c->reorder_src ? " +reorder src" : "") +
               (c->reorder_dst ? " +reorder dst" : "");
    });
}

int wb_dnnl_conv(void* handle, const wb_conv_desc* d, const float* src, const float* w,
                 const float* bias, const float* add, float* dst) {
    return wb_dnnl_conv_at(handle, d, d, src, w, bias, add, dst);
}

int wb_dnnl_conv_at(void* handle, const void* site, const wb_conv_desc* d, const float* src,
                    const float* w, const float* bias, const float* add, float* dst) {
    if (!handle) return 1;
    auto& ctx = *static_cast<Context*>(handle);
    try {
        Conv* c = slot_for(ctx, ctx.convs, site, d, make_conv);
        auto& eng = ctx.engine;
        auto& s = ctx.stream;
        const memory& weights = c->packed->from(w, eng, s, d->weights_vary != 0);
        memory user_src(c->user_src, eng, const_cast<float*>(src));
        memory user_dst(c->user_dst, eng, dst);
        memory src_mem = user_src, dst_mem = c->reorder_dst ? c->dst_tmp : user_dst;
        if (c->add_index >= 0) {  // the residual into the destination, for the sum post-op
            memory user_add(c->user_dst, eng, const_cast<float*>(add));
            if (c->reorder_dst || add != dst)
                dnnl::reorder(user_add, dst_mem).execute(s, user_add, dst_mem);
        }
        if (c->reorder_src) {
            dnnl::reorder(user_src, c->src_tmp).execute(s, user_src, c->src_tmp);
            src_mem = c->src_tmp;
        }
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, weights},
                                             {DNNL_ARG_DST, dst_mem}};
        if (d->has_bias) args[DNNL_ARG_BIAS] = memory(c->bias_md, eng, const_cast<float*>(bias));
        c->prim.execute(s, args);
        if (c->reorder_dst) dnnl::reorder(c->dst_tmp, user_dst).execute(s, c->dst_tmp, user_dst);
        s.wait();
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "wb_dnnl: convolution failed: %s\n", e.what());
        return 2;
    }
}

int wb_dnnl_deconv_check(const wb_conv_desc* d, char* info, int size) {
    return describe(info, size, [&](Context& ctx) {
        auto p = make_deconv(ctx, d);
        return p->impl + (p->reorder_src ? " +reorder src" : "") +
               (p->reorder_dst ? " +reorder dst" : "");
    });
}

int wb_dnnl_deconv(void* handle, const wb_conv_desc* d, const float* src, const float* w,
                   const float* bias, float* dst) {
    return wb_dnnl_deconv_at(handle, d, d, src, w, bias, dst);
}

int wb_dnnl_deconv_at(void* handle, const void* site, const wb_conv_desc* d, const float* src,
                      const float* w, const float* bias, float* dst) {
    if (!handle) return 1;
    auto& ctx = *static_cast<Context*>(handle);
    try {
        Deconv* p = slot_for(ctx, ctx.deconvs, site, d, make_deconv);
        auto& eng = ctx.engine;
        auto& s = ctx.stream;
        memory user_src(p->user_src, eng, const_cast<float*>(src));
        memory user_dst(p->user_dst, eng, dst);
        memory src_mem = user_src, dst_mem = p->reorder_dst ? p->dst_tmp : user_dst;
        if (p->reorder_src) {
            dnnl::reorder(user_src, p->src_tmp).execute(s, user_src, p->src_tmp);
            src_mem = p->src_tmp;
        }
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, src_mem},
            {DNNL_ARG_WEIGHTS, p->packed->from(w, eng, s, d->weights_vary != 0)},
            {DNNL_ARG_DST, dst_mem}};
        if (d->has_bias) args[DNNL_ARG_BIAS] = memory(p->bias_md, eng, const_cast<float*>(bias));
        p->prim.execute(s, args);
        if (p->reorder_dst) dnnl::reorder(p->dst_tmp, user_dst).execute(s, p->dst_tmp, user_dst);
        s.wait();
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "wb_dnnl: deconvolution failed: %s\n", e.what());
        return 2;
    }
}

int wb_dnnl_wgrad_check(const wb_wgrad_desc* d, char* info, int size) {
    return describe(info, size, [&](Context& ctx) {
        auto g = make_wgrad(ctx, d);
        return g->impl + (g->reorder_src ? " +reorder src" : "") +
               (g->reorder_ddst ? " +reorder dst" : "");
    });
}

int wb_dnnl_wgrad(void* handle, const wb_wgrad_desc* d, const float* src, const float* diff_dst,
                  float* diff_w) {
    return wb_dnnl_wgrad_at(handle, d, d, src, diff_dst, diff_w);
}

int wb_dnnl_wgrad_at(void* handle, const void* site, const wb_wgrad_desc* d, const float* src,
                     const float* diff_dst, float* diff_w) {
    if (!handle) return 1;
    auto& ctx = *static_cast<Context*>(handle);
    try {
        WGrad* g = slot_for(ctx, ctx.wgrads, site, d, make_wgrad);
        auto& eng = ctx.engine;
        auto& s = ctx.stream;
        memory user_src(g->user_src, eng, const_cast<float*>(src));
        memory user_ddst(g->user_ddst, eng, const_cast<float*>(diff_dst));
        memory user_dw(g->user_dw, eng, diff_w);
        memory src_mem = user_src, ddst_mem = user_ddst, dw_mem = g->reorder_dw ? g->dw_tmp : user_dw;
        if (g->reorder_src) {
            dnnl::reorder(user_src, g->src_tmp).execute(s, user_src, g->src_tmp);
            src_mem = g->src_tmp;
        }
        if (g->reorder_ddst) {
            dnnl::reorder(user_ddst, g->ddst_tmp).execute(s, user_ddst, g->ddst_tmp);
            ddst_mem = g->ddst_tmp;
        }
        g->prim.execute(s, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_DIFF_DST, ddst_mem},
                            {DNNL_ARG_DIFF_WEIGHTS, dw_mem}});
        if (g->reorder_dw) dnnl::reorder(g->dw_tmp, user_dw).execute(s, g->dw_tmp, user_dw);
        s.wait();
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "wb_dnnl: weight gradient failed: %s\n", e.what());
        return 2;
    }
}

int wb_dnnl_matmul_check(const wb_matmul_desc* d, char* info, int size) {
    return describe(info, size, [&](Context& ctx) { return make_matmul(ctx, d)->impl; });
}

int wb_dnnl_matmul(void* handle, const wb_matmul_desc* d, const float* a, const float* b,
                   const float* bias, float* y) {
    return wb_dnnl_matmul_at(handle, d, d, a, b, bias, y);
}

int wb_dnnl_matmul_at(void* handle, const void* site, const wb_matmul_desc* d, const float* a,
                      const float* b, const float* bias, float* y) {
    if (!handle) return 1;
    auto& ctx = *static_cast<Context*>(handle);
    try {
        MatMul* p = slot_for(ctx, ctx.matmuls, site, d, make_matmul);
        auto& eng = ctx.engine;
        auto& s = ctx.stream;
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, memory(p->user_a, eng, const_cast<float*>(a))},
            {DNNL_ARG_WEIGHTS, p->packed->from(b, eng, s, false)},
            {DNNL_ARG_DST, memory(p->user_y, eng, y)}};
        if (d->has_bias) args[DNNL_ARG_BIAS] = memory(p->bias_md, eng, const_cast<float*>(bias));
        p->prim.execute(s, args);
        s.wait();
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "wb_dnnl: matmul failed: %s\n", e.what());
        return 2;
    }
}

}  // extern "C"
