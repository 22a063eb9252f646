// Test kernels of cuframes' CUDA layer (core/src/testing/kernels.rs wraps them; built only with
// cuframes-core's `testing` feature).
//
// kernels.ptx next to this file is generated from it, on a machine with the CUDA toolkit, by:
//
//     nvcc -ptx -arch=compute_75 -o core/src/testing/kernels.ptx core/src/testing/kernels.cu
//
// run with nvcc 13.0 (V13.0.88, the version is in the PTX header) on the H200 test machine.
// compute_75 rather than compute_70: CUDA 13's nvcc refuses compute_70 ("Unsupported gpu
// architecture"). The PTX is ISA 9.0 and needs a driver of the CUDA 13 generation (>= 580);
// the driver JIT-compiles it for the GPU it runs on (sm_75 and newer).
// Regenerate it whenever this file changes; kernels.rs mirrors cf_pattern() on the host as
// `pattern_byte`, and a unit test pins a few of its values, so keep both in step.

// The byte expected at column x (bytes), row y of plane `plane` of frame `seq`.
__device__ __forceinline__ unsigned char cf_pattern(unsigned long long seq, unsigned int plane,
                                                    unsigned int x, unsigned int y)
{
    unsigned int h = (unsigned int)seq ^ ((unsigned int)(seq >> 32) * 0x85EBCA77u);
    h = h * 0x9E3779B1u + plane * 0xC2B2AE3Du;
    h = (h ^ x) * 0x27D4EB2Fu;
    h = (h ^ y) * 0x165667B1u;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 13;
    return (unsigned char)(h ^ (h >> 8) ^ (h >> 16) ^ (h >> 24));
}

// Fills row_bytes bytes of each of `rows` rows (pitch bytes apart) starting at base.
// Grid-stride in both dimensions: any grid covers any plane.
extern "C" __global__ void cuframes_fill_pattern(unsigned char *base, unsigned long long pitch,
                                                 unsigned long long row_bytes,
                                                 unsigned long long rows, unsigned long long seq,
                                                 unsigned int plane)
{
    for (unsigned long long y = blockIdx.y; y < rows; y += gridDim.y) {
        unsigned char *row = base + y * pitch;
        for (unsigned long long x = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
             x < row_bytes; x += (unsigned long long)gridDim.x * blockDim.x) {
            row[x] = cf_pattern(seq, plane, (unsigned int)x, (unsigned int)y);
        }
    }
}

// Counts the bytes that differ from the pattern into *mismatches (one atomic per thread).
extern "C" __global__ void cuframes_verify_pattern(const unsigned char *base,
                                                   unsigned long long pitch,
                                                   unsigned long long row_bytes,
                                                   unsigned long long rows,
                                                   unsigned long long seq, unsigned int plane,
                                                   unsigned int *mismatches)
{
    unsigned int bad = 0;
    for (unsigned long long y = blockIdx.y; y < rows; y += gridDim.y) {
        const unsigned char *row = base + y * pitch;
        for (unsigned long long x = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
             x < row_bytes; x += (unsigned long long)gridDim.x * blockDim.x) {
            if (row[x] != cf_pattern(seq, plane, (unsigned int)x, (unsigned int)y))
                bad++;
        }
    }
    if (bad != 0)
        atomicAdd(mismatches, bad);
}

// Written by the busy kernel so that its loop cannot be optimised away.
__device__ unsigned int cuframes_busy_sink;

// Keeps one block busy for `iterations` dependent multiply-adds (device load for fence tests).
extern "C" __global__ void cuframes_busy(unsigned long long iterations)
{
    unsigned int v = threadIdx.x + 1u;
    for (unsigned long long i = 0; i < iterations; ++i)
        v = v * 1664525u + 1013904223u;
    if (threadIdx.x == 0)
        cuframes_busy_sink = v;
}
