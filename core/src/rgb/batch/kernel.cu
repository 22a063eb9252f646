// Batched RGB conversion of cuframes frames on the GPU: N cameras (any format, mixed sizes)
// converted, resized (bilinear) and normalised into one [N][3][H][W] or [N][H][W][3] batch in
// one launch (core/src/rgb/batch/cuda.rs launches it; the same f32 operations run on the host
// in core/src/rgb/batch/host.rs, and the tests compare both bit for bit).
//
// kernel.ptx next to this file is generated from it by Debian's clang (no CUDA toolkit needed):
//
//     scripts/gen-ptx.sh          # (scripts/test.sh checks that the committed PTX is current)
//
// with -ffp-contract=off, which keeps every multiply and add separately rounded as the host
// computes them. The structs must stay byte-identical to `BatchParams` (cuda.rs) and
// `CameraParams` (camera.rs).

// Without the CUDA headers: the attributes and threadIdx & co. come from clang itself.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#include <__clang_cuda_builtin_vars.h>

// Source layouts (coefficients.rs `SourceKind`).
#define BC_SEMI_PLANAR_8 0   // NV12: Y plane, interleaved UV plane, 4:2:0
#define BC_SEMI_PLANAR_16 1  // P010/P016: as NV12 with 16-bit samples (>> shift)
#define BC_PLANAR_420 2      // YUV420P: Y, U, V planes, 4:2:0
#define BC_PLANAR_444 3      // YUV444P: Y, U, V planes, full resolution
#define BC_RGBA 4            // packed R, G, B, A bytes
#define BC_BGRA 5            // packed B, G, R, A bytes

// Output element types (spec.rs `RgbDtype`).
#define BC_OUT_U8 0
#define BC_OUT_F16 1
#define BC_OUT_F32 2

// One camera, validated on the host (camera.rs `CameraParams`, 104 bytes).
struct BatchCamera {
    unsigned long long plane[3];       // device address of each plane's first row
    unsigned int pitch[3];             // bytes between rows of each plane
    unsigned int kind, shift;          // source layout; right shift of 16-bit samples
    unsigned int width, height;        // source size
    unsigned int box_x, box_y, box_w, box_h;  // content box in the output image
    unsigned int valid;                // 0: pad only
    float y_offset, y_range;           // Y = (y - y_offset) / y_range
    float c_offset, c_range;           // C = (c - c_offset) / c_range
    float r_v, g_u, g_v, b_u;          // R = Y + r_v V; G = Y - g_u U - g_v V; B = Y + b_u U
};

// The launch's only parameter (cuda.rs `BatchParams`, 80 bytes).
struct BatchParams {
    const BatchCamera *cameras;        // `count` records
    unsigned long long dst;            // the output batch
    unsigned int count, width, height;
    unsigned int out_dtype, chw, normalize;
    float pad[3], mean[3], std[3];
    unsigned int reserved;
};

#define bc_inline __device__ __attribute__((always_inline)) inline

bc_inline float bc_clamp01(float v)
{
    return __builtin_fminf(__builtin_fmaxf(v, 0.0f), 1.0f);
}

// float -> IEEE half, round to nearest even (what __float2half_rn does).
bc_inline unsigned short bc_f32_to_f16(float v)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

bc_inline unsigned char bc_load8(const BatchCamera *c, unsigned int p, unsigned int x, unsigned int y)
{
    return ((const unsigned char *)(c->plane[p] + (unsigned long long)y * c->pitch[p]))[x];
}

bc_inline float bc_load16(const BatchCamera *c, unsigned int p, unsigned int x, unsigned int y)
{
    unsigned short s = ((const unsigned short *)(c->plane[p] + (unsigned long long)y * c->pitch[p]))[x];
    return (float)(s >> c->shift);
}

struct bc_rgb {
    float r, g, b;
};

// R, G, B in [0, 1] of source pixel (x, y) (host.rs `source_row`, `yuv_rgb`).
bc_inline bc_rgb bc_source(const BatchCamera *c, unsigned int x, unsigned int y)
{
    bc_rgb o;
    if (c->kind == BC_RGBA || c->kind == BC_BGRA) {
        const unsigned char *px = (const unsigned char *)(c->plane[0] + (unsigned long long)y * c->pitch[0]) + 4 * x;
        o.r = bc_clamp01((float)(c->kind == BC_RGBA ? px[0] : px[2]) / 255.0f);
        o.g = bc_clamp01((float)px[1] / 255.0f);
        o.b = bc_clamp01((float)(c->kind == BC_RGBA ? px[2] : px[0]) / 255.0f);
        return o;
    }
    float yv, u, v;
    if (c->kind == BC_SEMI_PLANAR_16) {
        yv = bc_load16(c, 0, x, y);
        u = bc_load16(c, 1, 2 * (x >> 1), y >> 1);
        v = bc_load16(c, 1, 2 * (x >> 1) + 1, y >> 1);
    } else if (c->kind == BC_SEMI_PLANAR_8) {
        yv = (float)bc_load8(c, 0, x, y);
        u = (float)bc_load8(c, 1, 2 * (x >> 1), y >> 1);
        v = (float)bc_load8(c, 1, 2 * (x >> 1) + 1, y >> 1);
    } else {
        unsigned int cx = c->kind == BC_PLANAR_420 ? x >> 1 : x;
        unsigned int cy = c->kind == BC_PLANAR_420 ? y >> 1 : y;
        yv = (float)bc_load8(c, 0, x, y);
        u = (float)bc_load8(c, 1, cx, cy);
        v = (float)bc_load8(c, 2, cx, cy);
    }
    float Y = (yv - c->y_offset) / c->y_range;
    float U = (u - c->c_offset) / c->c_range;
    float V = (v - c->c_offset) / c->c_range;
    o.r = bc_clamp01(Y + c->r_v * V);
    o.g = bc_clamp01(Y - c->g_u * U - c->g_v * V);
    o.b = bc_clamp01(Y + c->b_u * U);
    return o;
}

struct bc_tap {
    unsigned int i0, i1;
    float l0, l1;
};

// The two source samples of output position d of a content box of box_len pixels over n
// source pixels (host.rs `tap`): s = ((2d + 1)·n - box_len) / (2·box_len), in integers, so that
// i0 = floor(s) exactly and the weight is one rounded division.
bc_inline bc_tap bc_tap_of(unsigned int d, unsigned int box_len, unsigned int n)
{
    bc_tap t;
    unsigned int num = (2 * d + 1) * n;
    t.i0 = 0;
    t.l1 = 0.0f;
    if (num > box_len) {
        unsigned int den = 2 * box_len;
        num -= box_len;
        unsigned int q = num / den;
        if (q >= n - 1) {
            t.i0 = n - 1;
        } else {
            t.i0 = q;
            t.l1 = (float)(num % den) / (float)den;
        }
    }
    t.i1 = t.i0 + 1 < n - 1 ? t.i0 + 1 : n - 1;
    t.l0 = 1.0f - t.l1;
    return t;
}

// Normalises (or clamps) and stores element i of the batch (host.rs `Finish::put`).
// Scalars rather than a reference to the parameter block, so that no address of kernel
// parameter space is taken.
bc_inline void bc_put(unsigned long long dst, unsigned int out_dtype, unsigned int normalize,
                      float mean, float std, unsigned long long i, float v)
{
    v = normalize ? (v - mean) / std : bc_clamp01(v);
    if (out_dtype == BC_OUT_U8) {
        ((unsigned char *)dst)[i] = (unsigned char)__builtin_floorf(bc_clamp01(v) * 255.0f + 0.5f);
    } else if (out_dtype == BC_OUT_F16) {
        ((unsigned short *)dst)[i] = bc_f32_to_f16(v);
    } else {
        ((float *)dst)[i] = v;
    }
}

// One thread per output pixel of one camera (blockIdx.z), grid-stride in x and y.
extern "C" __global__ void cuframes_batch(BatchParams p)
{
    unsigned int n = blockIdx.z;
    if (n >= p.count)
        return;
    const BatchCamera *c = p.cameras + n;
    unsigned long long plane = (unsigned long long)p.width * p.height;
    unsigned long long base = (unsigned long long)n * 3 * plane;
    for (unsigned int y = blockIdx.y * blockDim.y + threadIdx.y; y < p.height; y += gridDim.y * blockDim.y) {
        for (unsigned int x = blockIdx.x * blockDim.x + threadIdx.x; x < p.width; x += gridDim.x * blockDim.x) {
            float r = p.pad[0], g = p.pad[1], b = p.pad[2];
            if (c->valid && x >= c->box_x && x - c->box_x < c->box_w && y >= c->box_y && y - c->box_y < c->box_h) {
                bc_tap tx = bc_tap_of(x - c->box_x, c->box_w, c->width);
                bc_tap ty = bc_tap_of(y - c->box_y, c->box_h, c->height);
                bc_rgb p00 = bc_source(c, tx.i0, ty.i0);
                bc_rgb p01 = bc_source(c, tx.i1, ty.i0);
                bc_rgb p10 = bc_source(c, tx.i0, ty.i1);
                bc_rgb p11 = bc_source(c, tx.i1, ty.i1);
                r = ty.l0 * (tx.l0 * p00.r + tx.l1 * p01.r) + ty.l1 * (tx.l0 * p10.r + tx.l1 * p11.r);
                g = ty.l0 * (tx.l0 * p00.g + tx.l1 * p01.g) + ty.l1 * (tx.l0 * p10.g + tx.l1 * p11.g);
                b = ty.l0 * (tx.l0 * p00.b + tx.l1 * p01.b) + ty.l1 * (tx.l0 * p10.b + tx.l1 * p11.b);
            }
            unsigned long long pixel = (unsigned long long)y * p.width + x;
            unsigned long long i0 = p.chw ? base + pixel : base + pixel * 3;
            unsigned long long step = p.chw ? plane : 1;
            bc_put(p.dst, p.out_dtype, p.normalize, p.mean[0], p.std[0], i0, r);
            bc_put(p.dst, p.out_dtype, p.normalize, p.mean[1], p.std[1], i0 + step, g);
            bc_put(p.dst, p.out_dtype, p.normalize, p.mean[2], p.std[2], i0 + 2 * step, b);
        }
    }
}
