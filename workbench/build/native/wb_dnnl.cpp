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
#include "wb_dnnl_internal.hpp"

namespace wb {

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

std::unique_ptr<Conv> make_conv(Context& ctx, const wb_conv_desc* d) {
    auto c = std::make_unique<Conv>();
    c->desc = *d;
    int nd = d->nsp + 2;
    Window g = window_of(d);
    memory::dims wei_dims;
    if (d->groups > 1) wei_dims = {d->groups, d->m / d->groups, d->c / d->groups};
    else wei_dims = {d->m, d->c};
    wei_dims.insert(wei_dims.end(), g.k.begin(), g.k.end());
    c->user_src = memory::desc(g.src, dt::f32, dims_of(d->src_strides, nd));
    c->user_dst = memory::desc(g.dst, dt::f32, dims_of(d->dst_strides, nd));
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
    memory::desc any_wei(wei_dims, dt::f32, tag::any);
    memory::desc bias = d->has_bias ? memory::desc({d->m}, dt::f32, tag::a) : memory::desc();
    auto make = [&](const memory::desc& src, const memory::desc& dst) {
        return dnnl::convolution_forward::primitive_desc(
            ctx.engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
            src, any_wei, bias, dst, g.stride, g.dil, g.pl, g.pr, attr);
    };
    auto pd = prefer_caller_layouts<dnnl::convolution_forward::primitive_desc>(
        make, c->user_src, c->user_dst);
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

}  // namespace wb

using namespace wb;

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

