// What a gathered 64-row KV block costs a Hopper SM when its rows arrive as TMA boxes of one row's
// 128-byte line, against the 16-byte cp.async copies of the ping-pong tile's producer (8 threads a row).
// A measurement, not product code: Gluon refuses [1, 64] boxes into a 128-byte-swizzled tile
// (docs/performance.md, "Where the ping-pong pair's time goes"), so this asks in CUDA C++ whether the
// hardware would pay, before anyone asks the compiler for it.
//
// Layout of a block, as the tile's MMAs read it: 9 tiles of 64 columns (576 bf16 = 512 + the rope 64),
// each [64 rows][128 B] with the 128-byte swizzle: row r's 16-byte chunk c at r * 128 + ((c ^ (r & 7)) * 16).
//
// Three parts, one table each:
//   1. layout: one block gathered by each form lands byte for byte where the swizzle puts it.
//   2. gather alone: one warpgroup a CTA, one CTA an SM, blocks back to back, two stages; cycles a block.
//   3. beside the MMAs: two consumer warpgroups run a pair's wgmma mix (S: 36 m64n64k16 a warpgroup; O += P V:
//      16 m64n128k16) as fast as they can, never waiting for data, while the producer gathers each pair's two
//      blocks one pair ahead of them (the tile's rate); the consumers' time a pair against no gathers is what
//      the gathers cost the tensor cores. Reads of a stage being written race by design: only time is measured.
//
// Build and run (nvcc 13.0, sm_90a; no libcuda link): bash scripts/gpu_tma_rows_probe.sh OUT
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int kCols = 576;                        // bf16 columns of a KV row
constexpr int kRowBytes = kCols * 2;              // 1152
constexpr int kTiles = 9;                         // 64-column tiles of a row
constexpr int kRows = 64;                         // rows of a block
constexpr int kTileBytes = kRows * 128;           // 8192
constexpr int kBlockBytes = kTiles * kTileBytes;  // 73 728
constexpr int kSmemBytes = 3 * kBlockBytes + 1024 + 64;  // Q, two stages, alignment slack, barriers

enum Form : int { kNone = 0, kCpAsync = 1, kTmaOne = 2, kTmaWarp = 3, kTmaTile = 4, kCpAsyncZero = 5 };
const char* form_name(int f) {
  static const char* names[] = {"none", "cp.async 16 B, 8 threads a row", "TMA row boxes, one thread",
                                "TMA row boxes, 32 lanes", "TMA [64, 64] boxes, rows contiguous",
                                "cp.async zero-filled (no global read)"};
  return names[f];
}

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// The producer: block `index` (64 row numbers at rows + index * 64) into the stage at `stage`, by `form`.
// `tid` counts the producer warpgroup's threads (0..127); TMA forms arrive on `bar` with the block's bytes.
__device__ __forceinline__ void gather_block(int form, int tid, const int* rows, long index, const uint8_t* pool,
                                             const CUtensorMap* row_map, const CUtensorMap* tile_map, uint32_t stage,
                                             uint32_t bar) {
  const int* block_rows = rows + index * kRows;
  if (form == kCpAsync || form == kCpAsyncZero) {
    const uint32_t src_bytes = form == kCpAsync ? 16 : 0;  // 0: the same instruction, zeros written, nothing read
    const int chunk = tid & 7;
#pragma unroll
    for (int pass = 0; pass < kRows / 16; ++pass) {
      const int r = pass * 16 + (tid >> 3);
      const uint8_t* src = pool + static_cast<long>(block_rows[r]) * kRowBytes + chunk * 16;
      const uint32_t dst = stage + r * 128 + ((chunk ^ (r & 7)) << 4);
#pragma unroll
      for (int t = 0; t < kTiles; ++t) cp_async16(dst + t * kTileBytes, src + t * 128, src_bytes);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  } else if (form == kTmaWarp) {
    if (tid < 32) {
      const int r0 = tid, r1 = tid + 32;
      const int row0 = block_rows[r0], row1 = block_rows[r1];
      mbar_expect(bar, 2 * kTiles * 128);
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        tma_2d(stage + t * kTileBytes + r0 * 128, row_map, t * 64, row0, bar);
        tma_2d(stage + t * kTileBytes + r1 * 128, row_map, t * 64, row1, bar);
      }
    }
  } else if (form == kTmaOne) {
    if (tid < 32) {
      const int row0 = block_rows[tid], row1 = block_rows[tid + 32];
      if (tid == 0) mbar_expect(bar, kBlockBytes);
      for (int r = 0; r < kRows; ++r) {
        const int row = __shfl_sync(0xffffffffu, r < 32 ? row0 : row1, r & 31);
        if (tid == 0) {
#pragma unroll
          for (int t = 0; t < kTiles; ++t) tma_2d(stage + t * kTileBytes + r * 128, row_map, t * 64, row, bar);
        }
      }
    }
  } else if (form == kTmaTile) {
    if (tid == 0) {
      const int first = block_rows[0] & ~63;  // 64 contiguous rows: the best a TMA copy of a block does
      mbar_expect(bar, kBlockBytes);
#pragma unroll
      for (int t = 0; t < kTiles; ++t) tma_2d(stage + t * kTileBytes, tile_map, t * 64, first, bar);
    }
  }
}

// Waits until block `index` (gathered into its stage `index % 2` by `form`) has landed.
__device__ __forceinline__ void wait_block(int form, int tid, long index, uint32_t bars) {
  if (form == kCpAsync || form == kCpAsyncZero) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
  } else if (form != kNone) {
    mbar_wait(bars + 8 * (index & 1), (index >> 1) & 1);
  }
}

// Part 1 and 2: one producer warpgroup a CTA gathers `per_cta` blocks back to back, two stages deep.
// cycles[blockIdx.x] gets its clock; with `dump`, the CTA 0's last block is copied out as it lies in shared memory.
__global__ void __launch_bounds__(128, 1)
    gather_alone(int form, const int* rows, long per_cta, const uint8_t* pool, const __grid_constant__ CUtensorMap row_map,
                 const __grid_constant__ CUtensorMap tile_map, long long* cycles, uint8_t* dump) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t stages = smem_addr(smem + kBlockBytes);
  const uint32_t bars = smem_addr(smem + 3 * kBlockBytes);
  const int tid = threadIdx.x;
  if (tid == 0) {
    mbar_init(bars, form == kTmaWarp ? 32 : 1);
    mbar_init(bars + 8, form == kTmaWarp ? 32 : 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const long first = blockIdx.x * per_cta;
  const long long start = clock64();
  for (long i = 0; i < per_cta; ++i) {
    // before reusing a stage, the block it held two blocks ago has landed
    if (i >= 2) {
      if (form == kCpAsync || form == kCpAsyncZero) {
        asm volatile("cp.async.wait_group 1;" ::: "memory");
      } else {
        wait_block(form, tid, i - 2, bars);
      }
    }
    gather_block(form, tid, rows, first + i, pool, &row_map, &tile_map, stages + (i & 1) * kBlockBytes,
                 bars + 8 * (i & 1));
  }
  for (long i = per_cta >= 2 ? per_cta - 2 : 0; i < per_cta; ++i) wait_block(form, tid, i, bars);
  __syncthreads();
  const long long stop = clock64();
  if (tid == 0) cycles[blockIdx.x] = stop - start;
  if (dump != nullptr && blockIdx.x == 0) {
    const uint8_t* last = smem + kBlockBytes + ((per_cta - 1) & 1) * kBlockBytes;
    for (int b = tid * 16; b < kBlockBytes; b += 128 * 16)
      *reinterpret_cast<uint4*>(dump + b) = *reinterpret_cast<const uint4*>(last + b);
  }
}

// wgmma shared-memory descriptor, 128-byte swizzle: address >> 4, leading and stride byte offsets >> 4.
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lead, uint32_t stride) {
  return (uint64_t(addr >> 4) & 0x3fff) | (uint64_t((lead >> 4) & 0x3fff) << 16) |
         (uint64_t((stride >> 4) & 0x3fff) << 32) | (uint64_t(1) << 62);
}

#define ACC8(i) "+f"(a[i]), "+f"(a[i + 1]), "+f"(a[i + 2]), "+f"(a[i + 3]), "+f"(a[i + 4]), "+f"(a[i + 5]), \
                "+f"(a[i + 6]), "+f"(a[i + 7])

// S's step: m64n64k16, A and B K-major (rows of 128 bytes), accumulate.
__device__ __forceinline__ void mma_s(float* a, uint64_t da, uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}"
      : ACC8(0), ACC8(8), ACC8(16), ACC8(24)
      : "l"(da), "l"(db), "r"(1));
}
// O += P V's step: m64n128k16, B MN-major (V's columns along the 128-byte lines), accumulate.
__device__ __forceinline__ void mma_pv(float* a, uint64_t da, uint64_t db) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 1;\n}"
      : ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56)
      : "l"(da), "l"(db), "r"(1));
}

// Part 3: warpgroup 0 gathers each pair's two blocks one pair ahead of the consumers (warpgroups 1 and 2),
// which run `pairs` pairs of the tile's MMA mix without waiting for data. cycles[3 * cta + w]: warpgroup w's clock.
__global__ void __launch_bounds__(384, 1)
    beside_mmas(int form, const int* rows, long pairs, const uint8_t* pool, const __grid_constant__ CUtensorMap row_map,
                const __grid_constant__ CUtensorMap tile_map, long long* cycles, float* sink) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t q = smem_addr(smem);
  const uint32_t stages = q + kBlockBytes;
  const uint32_t bars = smem_addr(smem + 3 * kBlockBytes);
  volatile int* progress = reinterpret_cast<volatile int*>(smem + 3 * kBlockBytes + 16);
  const int warpgroup = threadIdx.x / 128, tid = threadIdx.x % 128;
  for (int b = threadIdx.x * 16; b < kBlockBytes; b += 384 * 16)  // Q: small finite values
    *reinterpret_cast<uint4*>(smem + b) = make_uint4(0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u);
  if (threadIdx.x == 0) {
    mbar_init(bars, form == kTmaWarp ? 32 : 1);
    mbar_init(bars + 8, form == kTmaWarp ? 32 : 1);
    progress[0] = 0;
    progress[1] = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const long long start = clock64();
  if (warpgroup == 0) {
    const long first = blockIdx.x * 2 * pairs;
    for (long p = 0; p < pairs; ++p) {
      // one pair ahead: pair p's blocks go out once both consumers have finished pair p - 2
      while (min(progress[0], progress[1]) < p - 1) __nanosleep(32);
      for (int s = 0; s < 2; ++s) {
        const long i = 2 * p + s;
        if (p >= 1) {
          if (form == kCpAsync || form == kCpAsyncZero) {
            asm volatile("cp.async.wait_group 1;" ::: "memory");
          } else {
            wait_block(form, tid, i - 2, bars);
          }
        }
        gather_block(form, tid, rows, first + i, pool, &row_map, &tile_map, stages + s * kBlockBytes, bars + 8 * s);
      }
    }
    for (long i = 2 * pairs - 2; i < 2 * pairs; ++i) wait_block(form, tid, i, bars);
  } else {
    const int w = warpgroup - 1;
    float s_acc[32], o_acc[64];
    for (int j = 0; j < 32; ++j) s_acc[j] = 0.f;
    for (int j = 0; j < 64; ++j) o_acc[j] = 0.f;
    const uint32_t own = stages + w * kBlockBytes;
    for (long p = 0; p < pairs; ++p) {
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
      // S = Q K^T over the own block: 9 tiles x 4 k-steps of 16 columns (32 bytes along the swizzled line)
#pragma unroll
      for (int t = 0; t < kTiles; ++t)
#pragma unroll
        for (int k = 0; k < 4; ++k)
          mma_s(s_acc, desc(q + t * kTileBytes + k * 32, 16, 1024), desc(own + t * kTileBytes + k * 32, 16, 1024));
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      // O += P V over both blocks, this warpgroup's 256 columns: 2 blocks x 2 halves of 128 x 4 k-steps of 16 rows
#pragma unroll
      for (int blk = 0; blk < 2; ++blk)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int k = 0; k < 4; ++k)
            mma_pv(o_acc, desc(q + k * 32, 16, 1024),
                   desc(stages + blk * kBlockBytes + (4 * w + 2 * h) * kTileBytes + k * 2048, kTileBytes, 1024));
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      asm volatile("bar.sync %0, 128;" ::"r"(w + 1));
      if (tid == 0) progress[w] = static_cast<int>(p + 1);
    }
    float total = 0.f;
    for (int j = 0; j < 32; ++j) total += s_acc[j];
    for (int j = 0; j < 64; ++j) total += o_acc[j];
    sink[blockIdx.x * 384 + threadIdx.x] = total;
  }
  const long long stop = clock64();
  if (tid == 0) cycles[3 * blockIdx.x + warpgroup] = stop - start;
}

// cuTensorMapEncodeTiled through the runtime's driver entry point: no link against libcuda.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

CUtensorMap make_map(void* pool, long num_rows, int box_rows) {
  static EncodeTiled encode = nullptr;
  if (encode == nullptr) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
      std::fprintf(stderr, "cuTensorMapEncodeTiled not found in the driver\n");
      std::exit(1);
    }
    encode = reinterpret_cast<EncodeTiled>(fn);
  }
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kCols), static_cast<cuuint64_t>(num_rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kRowBytes)};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, pool, dims, strides, box, elem,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled(box rows %d) failed: %d\n", box_rows, static_cast<int>(r));
    std::exit(1);
  }
  return map;
}

double mean(const std::vector<long long>& v, int start, int step, int count) {
  double s = 0;
  for (int i = 0; i < count; ++i) s += static_cast<double>(v[start + i * step]);
  return s / count;
}

}  // namespace

// probe PART [FORM] [KV_ROWS] [PAIRS]: PART layout (FORM 1..3), alone (PAIRS: the CTAs, default one an SM), or
// beside. Each part is its own process, so a
// form the hardware faults on ends only its own part.
int main(int argc, char** argv) {
  const char* part = argc > 1 ? argv[1] : "alone";
  const int layout_form = argc > 2 ? std::atoi(argv[2]) : kCpAsync;
  const long num_rows = argc > 3 ? std::atol(argv[3]) : 8192;  // the KV pool's rows (8192: L2-resident, 9.4 MB)
  const long pairs = argc > 4 ? std::atol(argv[4]) : 2000;     // pairs a CTA in part 3
  int sms = 0, device = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, device));

  const long per_cta = 512;
  const long num_blocks = std::max<long>(sms * per_cta, 2L * sms * pairs);
  std::vector<uint16_t> host_pool(num_rows * kCols);
  uint32_t seed = 12345u;
  auto next = [&seed]() { seed = seed * 1664525u + 1013904223u; return seed; };
  for (auto& x : host_pool) x = static_cast<uint16_t>(0x3c00u | (next() >> 22));  // finite, small bf16
  std::vector<int> host_rows(num_blocks * kRows);
  for (auto& r : host_rows) r = static_cast<int>(next() % static_cast<uint32_t>(num_rows));
  uint8_t* pool;
  int* rows;
  long long* cycles;
  uint8_t* dump;
  float* sink;
  CHECK(cudaMalloc(&pool, host_pool.size() * 2));
  CHECK(cudaMalloc(&rows, host_rows.size() * 4));
  CHECK(cudaMalloc(&cycles, 3 * sms * sizeof(long long)));
  CHECK(cudaMalloc(&dump, kBlockBytes));
  CHECK(cudaMalloc(&sink, sms * 384 * sizeof(float)));
  CHECK(cudaMemcpy(pool, host_pool.data(), host_pool.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(rows, host_rows.data(), host_rows.size() * 4, cudaMemcpyHostToDevice));
  const CUtensorMap row_map = make_map(pool, num_rows, 1);
  const CUtensorMap tile_map = make_map(pool, num_rows, 64);
  CHECK(cudaFuncSetAttribute(gather_alone, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  CHECK(cudaFuncSetAttribute(beside_mmas, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<long long> host_cycles(3 * sms);
  auto fastest_ms = [&](auto launch) {  // the fastest of 5 launches, ms by CUDA events
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      CHECK(cudaEventRecord(e0));
      launch();
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      CHECK(cudaGetLastError());
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best = std::min(best, ms);
    }
    return best;
  };

  if (std::strcmp(part, "layout") == 0) {
    // 1. one block gathered by the form lands byte for byte where the swizzle puts it
    CHECK(cudaMemset(dump, 0xff, kBlockBytes));
    gather_alone<<<1, 128, kSmemBytes>>>(layout_form, rows, 1, pool, row_map, tile_map, cycles, dump);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> got(kBlockBytes);
    CHECK(cudaMemcpy(got.data(), dump, kBlockBytes, cudaMemcpyDeviceToHost));
    long wrong = 0, unswizzled = 0;
    for (int t = 0; t < kTiles; ++t)
      for (int r = 0; r < kRows; ++r)
        for (int c = 0; c < 8; ++c) {
          const uint8_t* want = reinterpret_cast<const uint8_t*>(host_pool.data()) +
                                static_cast<long>(host_rows[r]) * kRowBytes + t * 128 + c * 16;
          wrong += std::memcmp(got.data() + t * kTileBytes + r * 128 + ((c ^ (r & 7)) * 16), want, 16) != 0;
          unswizzled += std::memcmp(got.data() + t * kTileBytes + r * 128 + c * 16, want, 16) != 0;
        }
    std::printf("layout %-36s %s: %ld of %d chunks away from the swizzle's place (%ld from the unswizzled one)\n",
                form_name(layout_form), wrong ? "FAIL" : "ok", wrong, kTiles * kRows * 8, unswizzled);
    return wrong ? 1 : 0;
  }
  if (std::strcmp(part, "alone") == 0) {
    // 2. gather alone, on `ctas` SMs (fewer than all: the SM's own rate, the L2 unloaded)
    const int ctas = argc > 4 ? std::min(std::atoi(argv[4]), sms) : sms;
    std::printf("%s, %d SMs; KV pool %ld rows of %d B; a block %d rows x %d tiles (%d B)\n", prop.name, sms,
                num_rows, kRowBytes, kRows, kTiles, kBlockBytes);
    std::printf("gather alone: %d CTAs (one an SM, one warpgroup), %ld blocks each, two stages; fastest of 5\n",
                ctas, per_cta);
    std::printf("  %-36s %9s %11s %12s\n", "form", "ms", "GB/s rows", "cycles/block");
    for (int form : {kCpAsync, kCpAsyncZero, kTmaOne, kTmaWarp, kTmaTile, kCpAsync}) {
      const float best = fastest_ms([&] {
        gather_alone<<<ctas, 128, kSmemBytes>>>(form, rows, per_cta, pool, row_map, tile_map, cycles, nullptr);
      });
      CHECK(cudaMemcpy(host_cycles.data(), cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost));
      std::printf("  %-36s %9.3f %11.0f %12.0f\n", form_name(form), best,
                  static_cast<double>(ctas) * per_cta * kBlockBytes / (best * 1e6),
                  mean(host_cycles, 0, 1, ctas) / per_cta);
    }
    return 0;
  }
  // 3. beside the MMAs
  std::printf("%s, %d SMs; KV pool %ld rows\n", prop.name, sms, num_rows);
  std::printf("beside the MMAs: %d CTAs, %ld pairs each; a pair: 2 blocks gathered, per consumer warpgroup "
              "36 m64n64k16 + 16 m64n128k16; fastest of 5, forms in turn twice\n", sms, pairs);
  std::printf("  %-36s %9s %17s %17s %8s\n", "form", "ms", "consumer cyc/pair", "producer cyc/pair", "/ none");
  double none_ms = 0;
  for (int form : {kNone, kCpAsync, kCpAsyncZero, kTmaWarp, kNone, kCpAsync, kCpAsyncZero, kTmaWarp}) {
    const float best = fastest_ms([&] {
      beside_mmas<<<sms, 384, kSmemBytes>>>(form, rows, pairs, pool, row_map, tile_map, cycles, sink);
    });
    CHECK(cudaMemcpy(host_cycles.data(), cycles, 3 * sms * sizeof(long long), cudaMemcpyDeviceToHost));
    const double consumer = (mean(host_cycles, 1, 3, sms) + mean(host_cycles, 2, 3, sms)) / 2 / pairs;
    const double producer = mean(host_cycles, 0, 3, sms) / pairs;
    if (form == kNone) none_ms = best;
    std::printf("  %-36s %9.3f %17.0f %17.0f %8.3f\n", form_name(form), best, consumer, producer, best / none_ms);
  }
  return 0;
}
