// C interface of libwb_dnnl.so (wb_dnnl.cpp): what generated programs include.
#ifndef WB_DNNL_H
#define WB_DNNL_H
#ifdef __cplusplus
extern "C" {
#endif

enum { WB_POST_ADD = 1, WB_POST_RELU, WB_POST_CLIP, WB_POST_SWISH, WB_POST_HARDSWISH,
       WB_POST_SIGMOID };
#define WB_MAX_POST 4

typedef struct {
    int nsp;                       // spatial dimensions: 1, 2 or 3
    long n, c, m, groups;          // batch, input and output channels, groups
    long in[3], out[3], k[3], stride[3], dil[3], pad_l[3], pad_r[3];
    long src_strides[5], dst_strides[5];  // in elements: the caller's layouts
    int has_bias;
    int n_post;                    // post-ops in order: dst = post_k(...post_0(conv + bias))
    int post[WB_MAX_POST];
    float alpha[WB_MAX_POST], beta[WB_MAX_POST];
    int weights_vary;              // written by the program: reordered again on every call
} wb_conv_desc;

// A weight gradient: diff_w[g, m, c, k] = sum over n and the output positions of
// diff_dst[n, g*M/G + m, o] * src[n, g*C/G + c, o * stride + k * dil - pad_l], each array
// at its own strides (diff_w's over (G, M/G, C/G, *K)): oneDNN's backward-weights
// primitive, for a convolution whose weights the program computes (training programs
// correlate the input with dY as a convolution whose kernel is dY).
typedef struct {
    int nsp;
    long n, c, m, groups;
    long in[3], out[3], k[3], stride[3], dil[3], pad_l[3], pad_r[3];
    long src_strides[5], diff_dst_strides[5], diff_w_strides[6];
} wb_wgrad_desc;

enum { WB_POOL_MAX = 1, WB_POOL_AVG_INCLUDE_PAD, WB_POOL_AVG_EXCLUDE_PAD };

typedef struct {
    int nsp;                       // spatial dimensions: 1, 2 or 3
    long n, c;
    long in[3], out[3], k[3], stride[3], dil[3], pad_l[3], pad_r[3];
    long src_strides[5], dst_strides[5];
    int algorithm;                 // WB_POOL_*
} wb_pool_desc;

// Y[m, :] = A[m, :] @ B (+ bias): rows of A and Y at their own strides, B a constant
// of the program (reordered once into the kernel's layout, like convolution weights).
typedef struct {
    long m, k, n;
    long lda, ldc;                 // row strides of A and Y (their columns are contiguous)
    long b_strides[2];             // B over (k, n): {n, 1} as stored, {1, k} transposed
    int has_bias;                  // n values added to every row
} wb_matmul_desc;

// Every call names its site (a pointer unique to the call site: its static descriptor)
// and passes this call's descriptor: a site called with other sizes (a program whose
// sizes are symbols) gets a primitive per descriptor. The calls without ``_at`` take
// the descriptor as the site.
void* wb_dnnl_context_new(void);
void wb_dnnl_context_free(void* ctx);
// 0 on success. ``add`` is the residual (same layout as dst) when a post-op is WB_POST_ADD.
int wb_dnnl_conv(void* ctx, const wb_conv_desc* d, const float* src, const float* w,
                 const float* bias, const float* add, float* dst);
// Whether oneDNN has this convolution: 0 and the implementation's name in ``info``, or 1
// and the reason.
int wb_dnnl_conv_at(void* ctx, const void* site, const wb_conv_desc* d, const float* src,
                    const float* w, const float* bias, const float* add, float* dst);
int wb_dnnl_conv_check(const wb_conv_desc* d, char* info, int size);

// ConvTranspose on the deconvolution primitive: the same descriptor as a convolution's, c
// and m the input's and the output's channels; w as ONNX lays it out, (c, m/groups, *k);
// no post-ops.
int wb_dnnl_deconv(void* ctx, const wb_conv_desc* d, const float* src, const float* w,
                   const float* bias, float* dst);
int wb_dnnl_deconv_at(void* ctx, const void* site, const wb_conv_desc* d, const float* src,
                      const float* w, const float* bias, float* dst);
int wb_dnnl_deconv_check(const wb_conv_desc* d, char* info, int size);

int wb_dnnl_wgrad(void* ctx, const wb_wgrad_desc* d, const float* src, const float* diff_dst,
                  float* diff_w);
int wb_dnnl_wgrad_at(void* ctx, const void* site, const wb_wgrad_desc* d, const float* src,
                     const float* diff_dst, float* diff_w);
int wb_dnnl_wgrad_check(const wb_wgrad_desc* d, char* info, int size);

int wb_dnnl_matmul(void* ctx, const wb_matmul_desc* d, const float* a, const float* b,
                   const float* bias, float* y);
int wb_dnnl_matmul_at(void* ctx, const void* site, const wb_matmul_desc* d, const float* a,
                      const float* b, const float* bias, float* y);
int wb_dnnl_matmul_check(const wb_matmul_desc* d, char* info, int size);

int wb_dnnl_pool(void* ctx, const wb_pool_desc* d, const float* src, float* dst);
int wb_dnnl_pool_at(void* ctx, const void* site, const wb_pool_desc* d, const float* src,
                    float* dst);
int wb_dnnl_pool_check(const wb_pool_desc* d, char* info, int size);

#ifdef __cplusplus
}
#endif
#endif
