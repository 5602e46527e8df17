// The backward passes of training programs on oneDNN: a convolution's weight gradient
// (backward-weights) and ConvTranspose, the input gradient of a strided convolution
// (the deconvolution primitive, which is the backward-data pass).
#include "wb_dnnl_internal.hpp"

namespace wb {

// ConvTranspose: oneDNN's weights are (m, c, *k) (grouped: (g, m/g, c/g, *k)); ONNX's
// (c, m/g, *k) is read through strides and packed like a convolution's weights.
std::unique_ptr<Deconv> make_deconv(Context& ctx, const wb_conv_desc* d) {
    auto p = std::make_unique<Deconv>();
    p->desc = *d;
    int nd = d->nsp + 2;
    Window g = window_of(d);
    memory::dims wei_dims, wei_strides;
    long taps = 1;
    for (int i = 0; i < d->nsp; ++i) taps *= d->k[i];
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
    p->user_src = memory::desc(g.src, dt::f32, dims_of(d->src_strides, nd));
    p->user_dst = memory::desc(g.dst, dt::f32, dims_of(d->dst_strides, nd));
    p->user_wei = memory::desc(wei_dims, dt::f32, wei_strides);
    p->wei_count = d->c * mg * taps;
    memory::desc any_wei(wei_dims, dt::f32, tag::any);
    memory::desc bias = d->has_bias ? memory::desc({d->m}, dt::f32, tag::a) : memory::desc();
    auto make = [&](const memory::desc& src, const memory::desc& dst) {
        return dnnl::deconvolution_forward::primitive_desc(
            ctx.engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
            src, any_wei, bias, dst, g.stride, g.dil, g.pl, g.pr);
    };
    auto pd = prefer_caller_layouts<dnnl::deconvolution_forward::primitive_desc>(
        make, p->user_src, p->user_dst);
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
    Window win = window_of(d);
    memory::dims w_dims;
    bool grouped = d->groups > 1;
    if (grouped) w_dims = {d->groups, d->m / d->groups, d->c / d->groups};
    else w_dims = {d->m, d->c};
    w_dims.insert(w_dims.end(), win.k.begin(), win.k.end());
    g->user_src = memory::desc(win.src, dt::f32, dims_of(d->src_strides, nd));
    g->user_ddst = memory::desc(win.dst, dt::f32, dims_of(d->diff_dst_strides, nd));
    g->user_dw = memory::desc(w_dims, dt::f32,
                              dims_of(d->diff_w_strides + (grouped ? 0 : 1), (int)w_dims.size()));
    memory::desc any_w(w_dims, dt::f32, tag::any);
    auto algo = dnnl::algorithm::convolution_direct;
    auto make = [&](const memory::desc& src, const memory::desc& dst) {
        dnnl::convolution_forward::primitive_desc hint(
            ctx.engine, dnnl::prop_kind::forward_training, algo, src, any_w, dst, win.stride,
            win.dil, win.pl, win.pr);
        return dnnl::convolution_backward_weights::primitive_desc(
            ctx.engine, algo, src, any_w, dst, win.stride, win.dil, win.pl, win.pr, hint);
    };
    auto pd = prefer_caller_layouts<dnnl::convolution_backward_weights::primitive_desc>(
        make, g->user_src, g->user_ddst);
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

}  // namespace wb

using namespace wb;

extern "C" {

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
        memory src_mem = user_src, ddst_mem = user_ddst;
        memory dw_mem = g->reorder_dw ? g->dw_tmp : user_dw;
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

}  // extern "C"
