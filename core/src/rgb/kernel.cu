// RGB conversion of cuframes frames on the GPU (core/src/rgb/cuda.rs launches it; the same
// arithmetic runs on the host in core/src/rgb/host.rs, and the tests compare both with a
// NumPy reference).
//
// kernel.ptx next to this file is generated from it by Debian's clang (no CUDA toolkit needed):
//
//     scripts/gen-ptx.sh          # (scripts/test.sh checks that the committed PTX is current)
//
// which runs `clang --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_75 -O3
// -ffp-contract=off -S`. The result is PTX ISA 6.3 for sm_75: any driver since CUDA 10 can
// JIT it for Turing and newer GPUs. -ffp-contract=off keeps every multiply and add separately
// rounded, as the host implementation computes them, so the two agree bit for bit. The
// parameter block must stay byte-identical to `ConvertParams` in cuda.rs.

// Without the CUDA headers: the attributes and threadIdx & co. come from clang itself.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#include <__clang_cuda_builtin_vars.h>

// Source layouts (coefficients.rs `SourceKind`).
#define CF_SEMI_PLANAR_8 0   // NV12: Y plane, interleaved UV plane, 4:2:0
#define CF_SEMI_PLANAR_16 1  // P010/P016: as NV12 with 16-bit samples (>> shift)
#define CF_PLANAR_420 2      // YUV420P: Y, U, V planes, 4:2:0
#define CF_PLANAR_444 3      // YUV444P: Y, U, V planes, full resolution
#define CF_RGBA 4            // packed R, G, B, A bytes
#define CF_BGRA 5            // packed B, G, R, A bytes

// Output element types (spec.rs `RgbDtype`).
#define CF_OUT_U8 0
#define CF_OUT_F16 1
#define CF_OUT_F32 2

struct ConvertParams {
    unsigned long long src[3];    // device address of each plane
    unsigned long long pitch[3];  // bytes between rows of each plane
    unsigned long long dst;       // dense output: [3][h][w] (chw) or [h][w][3] (hwc)
    float y_offset, y_range;      // luma:   Y = (y - y_offset) / y_range, in [0, 1]
    float c_offset, c_range;      // chroma: C = (c - c_offset) / c_range, in [-0.5, 0.5]
    float r_v, g_u, g_v, b_u;     // R = Y + r_v V; G = Y - g_u U - g_v V; B = Y + b_u U
    float out_scale;              // 255 for uint8, 1 for floats
    unsigned int width, height;
    unsigned int kind, shift;     // SourceKind; right shift of 16-bit samples (P010: 6)
    unsigned int out_dtype, chw;
    unsigned int pad;
};

#define cf_inline __device__ __attribute__((always_inline)) inline

cf_inline float cf_clamp01(float v)
{
    return __builtin_fminf(__builtin_fmaxf(v, 0.0f), 1.0f);
}

// float -> IEEE half, round to nearest even (what __float2half_rn does).
cf_inline unsigned short cf_f32_to_f16(float v)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

cf_inline unsigned short cf_load16(unsigned long long base, unsigned long long pitch,
                                                    unsigned int x, unsigned int y)
{
    return ((const unsigned short *)(base + (unsigned long long)y * pitch))[x];
}

cf_inline unsigned char cf_load8(unsigned long long base, unsigned long long pitch,
                                                  unsigned int x, unsigned int y)
{
    return ((const unsigned char *)(base + (unsigned long long)y * pitch))[x];
}

// Stores channel c of pixel (x, y). Scalars rather than a reference to the parameter block,
// so that no address of kernel parameter space is taken.
cf_inline void cf_store(unsigned long long dst, unsigned int out_dtype, unsigned int chw,
                        float out_scale, unsigned int width, unsigned int height,
                        unsigned int c, unsigned int x, unsigned int y, float v)
{
    unsigned long long i = chw
        ? ((unsigned long long)c * height + y) * width + x
        : ((unsigned long long)y * width + x) * 3 + c;
    v = cf_clamp01(v);
    if (out_dtype == CF_OUT_U8) {
        ((unsigned char *)dst)[i] = (unsigned char)__builtin_floorf(v * out_scale + 0.5f);
    } else if (out_dtype == CF_OUT_F16) {
        ((unsigned short *)dst)[i] = cf_f32_to_f16(v);
    } else {
        ((float *)dst)[i] = v;
    }
}

// One thread per output pixel, grid-stride in both dimensions.
extern "C" __global__ void cuframes_to_rgb(ConvertParams p)
{
    for (unsigned int y = blockIdx.y * blockDim.y + threadIdx.y; y < p.height; y += gridDim.y * blockDim.y) {
        for (unsigned int x = blockIdx.x * blockDim.x + threadIdx.x; x < p.width; x += gridDim.x * blockDim.x) {
            float r, g, b;
            if (p.kind == CF_RGBA || p.kind == CF_BGRA) {
                const unsigned char *px = (const unsigned char *)(p.src[0] + (unsigned long long)y * p.pitch[0]) + 4 * x;
                r = (float)(p.kind == CF_RGBA ? px[0] : px[2]) / 255.0f;
                g = (float)px[1] / 255.0f;
                b = (float)(p.kind == CF_RGBA ? px[2] : px[0]) / 255.0f;
            } else {
                float yv, u, v;
                if (p.kind == CF_SEMI_PLANAR_16) {
                    yv = (float)(cf_load16(p.src[0], p.pitch[0], x, y) >> p.shift);
                    u = (float)(cf_load16(p.src[1], p.pitch[1], 2 * (x >> 1), y >> 1) >> p.shift);
                    v = (float)(cf_load16(p.src[1], p.pitch[1], 2 * (x >> 1) + 1, y >> 1) >> p.shift);
                } else if (p.kind == CF_SEMI_PLANAR_8) {
                    yv = (float)cf_load8(p.src[0], p.pitch[0], x, y);
                    u = (float)cf_load8(p.src[1], p.pitch[1], 2 * (x >> 1), y >> 1);
                    v = (float)cf_load8(p.src[1], p.pitch[1], 2 * (x >> 1) + 1, y >> 1);
                } else {
                    unsigned int cx = p.kind == CF_PLANAR_420 ? x >> 1 : x;
                    unsigned int cy = p.kind == CF_PLANAR_420 ? y >> 1 : y;
                    yv = (float)cf_load8(p.src[0], p.pitch[0], x, y);
                    u = (float)cf_load8(p.src[1], p.pitch[1], cx, cy);
                    v = (float)cf_load8(p.src[2], p.pitch[2], cx, cy);
                }
                float Y = (yv - p.y_offset) / p.y_range;
                float U = (u - p.c_offset) / p.c_range;
                float V = (v - p.c_offset) / p.c_range;
                r = Y + p.r_v * V;
                g = Y - p.g_u * U - p.g_v * V;
                b = Y + p.b_u * U;
            }
            cf_store(p.dst, p.out_dtype, p.chw, p.out_scale, p.width, p.height, 0, x, y, r);
            cf_store(p.dst, p.out_dtype, p.chw, p.out_scale, p.width, p.height, 1, x, y, g);
            cf_store(p.dst, p.out_dtype, p.chw, p.out_scale, p.width, p.height, 2, x, y, b);
        }
    }
}
