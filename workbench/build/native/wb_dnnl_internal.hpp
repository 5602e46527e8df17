// What the shim's source files share (wb_dnnl.cpp: forward convolutions, pooling,
// GEMMs and the context; wb_dnnl_backward.cpp: the backward passes of training
// programs): the primitives' records, the per-site cache and the context.
#ifndef WB_DNNL_INTERNAL_HPP
#define WB_DNNL_INTERNAL_HPP
#include "wb_dnnl.h"

#include <dnnl.hpp>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace wb {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

inline memory::dims dims_of(const long* v, int n) { return memory::dims(v, v + n); }

// A cheap fingerprint of a weight tensor: 64 values spread over it.
inline unsigned long long sample(const float* w, long count) {
    unsigned long long h = 1469598103934665603ull;
    long step = count > 64 ? count / 64 : 1;
    for (long i = 0; i < count; i += step) {
        unsigned int bits;
        std::memcpy(&bits, w + i, 4);
        h = (h ^ bits) * 1099511628211ull;
    }
    return h;
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
inline bool direct_kernel(const std::string& impl) {
    return impl.find("ref") == std::string::npos && impl.find("gemm") == std::string::npos;
}

// A convolution's geometry as oneDNN takes it, from the convolution or weight-gradient
// descriptor (they name their fields alike).
struct Window {
    memory::dims src, dst, k, stride, dil, pl, pr;
};

template <class D>
inline Window window_of(const D* d) {
    Window w;
    w.src = {d->n, d->c};
    w.dst = {d->n, d->m};
    for (int i = 0; i < d->nsp; ++i) {
        w.src.push_back(d->in[i]);
        w.dst.push_back(d->out[i]);
        w.k.push_back(d->k[i]);
        w.stride.push_back(d->stride[i]);
        w.dil.push_back(d->dil[i] - 1);  // oneDNN counts the gaps between taps
        w.pl.push_back(d->pad_l[i]);
        w.pr.push_back(d->pad_r[i]);
    }
    return w;
}

// The primitive ``make(src, dst)`` describes, on the caller's layouts where the library
// has a fast kernel for them (no reorder around the call), else on its own choice.
template <class PD, class Make>
PD prefer_caller_layouts(Make make, const memory::desc& user_src, const memory::desc& user_dst) {
    try {
        PD pd = make(user_src, user_dst);
        if (direct_kernel(pd.impl_info_str())) return pd;
    } catch (const dnnl::error&) {
    }
    return make(memory::desc(user_src.get_dims(), dt::f32, tag::any),
                memory::desc(user_dst.get_dims(), dt::f32, tag::any));
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

// The site's weights in the layout ``p`` reads them in (packed on the first call).
template <class T>
inline void attach(Context& ctx, Site<T>& site, T* p) {
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

inline void attach(Context&, Site<Pool>&, Pool*) {}
inline void attach(Context&, Site<WGrad>&, WGrad*) {}

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

}  // namespace wb
#endif
