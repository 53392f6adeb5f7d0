// row_pass_probe.cu — one uncached pass over many medium rows (a logsumexp or a sum per row of 2K-16K floats,
// cross entropy's shape), in several launch structures, beside a copy and a read-only stream of the same
// bytes (llm.c dev/cuda style: each variant checked against a host reference, GB/s printed).
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -I kernelwright/codegen/cuda bench/kernels/cuda/row_pass_probe.cu -o probe
//   ./probe ROWS LEN
// Built against an older kw_reduce.cuh (-I another folder first), it measures that header's block reductions.
//
// Variants (T threads a row or block):
//   block/T     one row per block of T threads, every load of a thread's share issued first (the reduction
//               family's planned launch for such rows: a 4093-long row on 256 threads)
//   persist/T   blocks of T threads, as many as fit, each walking rows; the next row's loads are issued
//               before this row's reduction, so HBM never waits for a barrier or a block's exit
//   warp/U      one row per warp, a runtime loop of U 16-byte loads a lane per step, no block barriers
//   warp-persist  as warp/8, as many warps as fit walking the rows
// Rows must be 16-byte aligned here (LEN % 4 == 0 or pass an aligned LEN); the compiler's kernels take
// their first aligned element (SHIFTED), which this probe does not model.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <algorithm>

#include "kw_common.cuh"
#include "kw_reduce.cuh"

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

struct Lse {
    using Acc = kw::SoftmaxAcc;
    __device__ static float finish(const Acc& a) { return a.m + logf(a.s); }
    static const char* name() { return "logsumexp"; }
};
struct Sum {
    using Acc = kw::SumAcc;
    __device__ static float finish(const Acc& a) { return a.v; }
    static const char* name() { return "sum"; }
};

template <class Acc>
__device__ __forceinline__ void fold(Acc& a, const float4& v) {
    const float x[4] = {v.x, v.y, v.z, v.w};
    a.template update_vec<4>(x);
}

// ---- one row per block, PER 16-byte loads a thread in flight at once
template <class Op, int T, int PER>
__global__ void __launch_bounds__(T, 1024 / T) block_rows(const float* __restrict__ in, float* out, int len) {
    using Acc = typename Op::Acc;
    const int row = blockIdx.x, chunks = len / 4;
    const float4* p = reinterpret_cast<const float4*>(in + static_cast<size_t>(row) * len);
    float4 v[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        const int c = threadIdx.x + k * T;
        if (c < chunks) v[k] = __ldg(p + c);
    }
    Acc a = Acc::init();
#pragma unroll
    for (int k = 0; k < PER; ++k)
        if (threadIdx.x + k * T < chunks) fold(a, v[k]);
    __shared__ Acc scratch[T / 32];
    a = kw::block_reduce<T / 32>(a, scratch);
    if (threadIdx.x == 0) out[row] = Op::finish(a);
}

// ---- persistent blocks: the next row's loads issued before this row's reduction (two register buffers)
template <class Op, int T, int PER>
__global__ void __launch_bounds__(T, 1024 / T) persist_rows(const float* __restrict__ in, float* out, int rows,
                                                             int len) {
    using Acc = typename Op::Acc;
    const int chunks = len / 4;
    float4 cur[PER], nxt[PER];
    int row = blockIdx.x;
    auto load = [&](float4 (&v)[PER], int r) {
        const float4* p = reinterpret_cast<const float4*>(in + static_cast<size_t>(r) * len);
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const int c = threadIdx.x + k * T;
            if (c < chunks) v[k] = __ldg(p + c);
        }
    };
    if (row < rows) load(cur, row);
    __shared__ Acc scratch[2][T / 32];
    for (int parity = 0; row < rows; row += gridDim.x, parity ^= 1) {
        const int next = row + gridDim.x;
        if (next < rows) load(nxt, next);
        Acc a = Acc::init();
#pragma unroll
        for (int k = 0; k < PER; ++k)
            if (threadIdx.x + k * T < chunks) fold(a, cur[k]);
        // one barrier a row: the scratch alternates, so a row's reads end before its slot is written again
        a = kw::warp_reduce<32>(a);
        if ((threadIdx.x & 31) == 0) scratch[parity][threadIdx.x >> 5] = a;
        __syncthreads();
        if (threadIdx.x == 0) {
            Acc r = scratch[parity][0];
#pragma unroll
            for (int w = 1; w < T / 32; ++w) r.combine(scratch[parity][w]);
            out[row] = Op::finish(r);
        }
#pragma unroll
        for (int k = 0; k < PER; ++k) cur[k] = nxt[k];
    }
}

// ---- one row per warp: runtime loop, U loads a lane a step
template <class Op, bool PERSIST, int U>
__global__ void __launch_bounds__(256, 4) warp_rows(const float* __restrict__ in, float* out, int rows, int len) {
    using Acc = typename Op::Acc;
    const int chunks = len / 4, lane = threadIdx.x & 31;
    const int warps = PERSIST ? gridDim.x * 8 : rows;
    for (int row = blockIdx.x * 8 + (threadIdx.x >> 5); row < rows; row += warps) {
        const float4* p = reinterpret_cast<const float4*>(in + static_cast<size_t>(row) * len);
        Acc a = Acc::init();
        for (int c0 = 0; c0 < chunks; c0 += 32 * U) {
            float4 v[U];
#pragma unroll
            for (int k = 0; k < U; ++k) {
                const int c = c0 + lane + 32 * k;
                if (c < chunks) v[k] = __ldg(p + c);
            }
#pragma unroll
            for (int k = 0; k < U; ++k)
                if (c0 + lane + 32 * k < chunks) fold(a, v[k]);
        }
        a = kw::warp_reduce<32>(a);
        if (lane == 0) out[row] = Op::finish(a);
        if (!PERSIST) break;
    }
}

__global__ void copy_kernel(const float4* __restrict__ a, float4* __restrict__ b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        b[i] = a[i];
}

__global__ void read_kernel(const float4* __restrict__ a, size_t n, float* sink) {
    float s = 0.f;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (; i + 3 * step < n; i += 4 * step) {
        const float4 x = __ldg(a + i), y = __ldg(a + i + step), z = __ldg(a + i + 2 * step),
                     w = __ldg(a + i + 3 * step);
        s += x.x + y.y + z.z + w.w;
    }
    for (; i < n; i += step) s += __ldg(a + i).x;
    if (s == 12345.f) *sink = s;
}

template <class F>
static float time_ms(F launch, int reps = 20) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    launch();
    CHECK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
        CHECK(cudaEventRecord(a));
        launch();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CHECK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static int sms() {
    int dev, n;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
}

template <class K>
static int resident(K kernel, int threads) {
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0));
    return blocks * sms();
}

template <class Op>
static void run(const float* d_in, float* d_out, int rows, int len, const std::vector<float>& host_in,
                double copy_gbs) {
    std::vector<double> ref(rows);
    for (int r = 0; r < rows; ++r) {
        const float* x = host_in.data() + static_cast<size_t>(r) * len;
        if (Op::name()[0] == 'l') {
            double m = -INFINITY, s = 0;
            for (int i = 0; i < len; ++i) m = std::max(m, (double)x[i]);
            for (int i = 0; i < len; ++i) s += std::exp(x[i] - m);
            ref[r] = m + std::log(s);
        } else {
            double s = 0;
            for (int i = 0; i < len; ++i) s += x[i];
            ref[r] = s;
        }
    }
    const double bytes = 4.0 * rows * (len + 1.0);
    auto report = [&](const char* variant, float ms) {
        std::vector<float> got(rows);
        CHECK(cudaMemcpy(got.data(), d_out, rows * 4, cudaMemcpyDeviceToHost));
        double err = 0;
        for (int r = 0; r < rows; ++r) err = std::max(err, std::fabs(got[r] - ref[r]) / (1 + std::fabs(ref[r])));
        const double gbs = bytes / ms / 1e6;
        printf("%-10s %-16s %8.4f ms %7.0f GB/s %5.1f%% of copy  max rel err %.2e\n", Op::name(), variant, ms,
               gbs, 100 * gbs / copy_gbs, err);
    };
    CHECK(cudaMemset(d_out, 0, rows * 4));
#define BLOCK(T, PER) do { if ((len / 4 + T - 1) / T <= PER) { \
        report("block/" #T, time_ms([&] { block_rows<Op, T, PER><<<rows, T>>>(d_in, d_out, len); })); } } while (0)
    BLOCK(128, 16); BLOCK(256, 8); BLOCK(256, 4); BLOCK(512, 2); BLOCK(512, 4); BLOCK(1024, 1); BLOCK(1024, 2);
#undef BLOCK
#define PERSIST(T, PER) do { if ((len / 4 + T - 1) / T <= PER) { \
        const int grid = std::min(rows, resident(persist_rows<Op, T, PER>, T)); \
        report("persist/" #T, time_ms([&] { persist_rows<Op, T, PER><<<grid, T>>>(d_in, d_out, rows, len); })); \
    } } while (0)
    PERSIST(128, 8); PERSIST(256, 4); PERSIST(256, 8); PERSIST(512, 2); PERSIST(512, 4); PERSIST(1024, 1);
#undef PERSIST
    report("warp/u4", time_ms([&] { warp_rows<Op, false, 4><<<(rows + 7) / 8, 256>>>(d_in, d_out, rows, len); }));
    report("warp/u8", time_ms([&] { warp_rows<Op, false, 8><<<(rows + 7) / 8, 256>>>(d_in, d_out, rows, len); }));
    const int grid = std::min((rows + 7) / 8, resident(warp_rows<Op, true, 8>, 256));
    report("warp-persist", time_ms([&] { warp_rows<Op, true, 8><<<grid, 256>>>(d_in, d_out, rows, len); }));
}

int main(int argc, char** argv) {
    const int rows = argc > 1 ? atoi(argv[1]) : 32768, len = argc > 2 ? atoi(argv[2]) : 4096;
    if (len % 4) { printf("LEN must be a multiple of 4\n"); return 2; }
    const size_t n = static_cast<size_t>(rows) * len;
    float *d_in, *d_out, *sink;
    CHECK(cudaMalloc(&d_in, n * 4));
    CHECK(cudaMalloc(&d_out, rows * 4));
    CHECK(cudaMalloc(&sink, 4));
    std::vector<float> h(n);
    unsigned s = 12345;
    for (size_t i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        h[i] = 3.f * ((s >> 8) * (1.f / 16777216.f) - 0.5f) * 3.4f;
    }
    CHECK(cudaMemcpy(d_in, h.data(), n * 4, cudaMemcpyHostToDevice));
    const size_t cn = size_t(1) << 27;        // 2 GiB copied (1 GiB each way)
    float4 *ca, *cb;
    CHECK(cudaMalloc(&ca, cn * 16 / 2));
    CHECK(cudaMalloc(&cb, cn * 16 / 2));
    const float copy_ms = time_ms([&] { copy_kernel<<<sms() * 8, 256>>>(ca, cb, cn / 2); });
    const double copy_gbs = 2.0 * cn / 2 * 16 / copy_ms / 1e6;
    const float read_ms = time_ms([&] { read_kernel<<<sms() * 8, 256>>>(reinterpret_cast<const float4*>(d_in), n / 4,
                                                                       sink); });
    printf("%d x %d rows, %.0f MB; copy %.0f GB/s; read-only stream of the rows %.4f ms = %.0f GB/s (%.1f%%)\n",
           rows, len, n * 4 / 1e6, copy_gbs, read_ms, n * 4 / read_ms / 1e6, 100 * n * 4 / read_ms / 1e6 / copy_gbs);
    run<Lse>(d_in, d_out, rows, len, h, copy_gbs);
    run<Sum>(d_in, d_out, rows, len, h, copy_gbs);
    return 0;
}
