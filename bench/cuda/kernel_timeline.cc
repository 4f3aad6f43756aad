// A kernel timeline of any CUDA program, for the GPU machine, which has no Nsight Systems:
// a CUPTI injection library that records every kernel's start and end (CUPTI's concurrent-
// kernel activity: the hardware timestamps, kernels inside CUDA graphs included, without
// serialising them) and writes them as CSV when the program exits.
//
//   CUDA_INJECTION64_PATH=build-gpu/bench/cuda/libkernel_timeline.so
//     FERRITE_TIMELINE_OUT=timeline.csv build-gpu/ferrite bench ...  (one command line)
//   python3 scripts/timeline_summary.py timeline.csv
//
// The CUDA driver loads the library named by CUDA_INJECTION64_PATH at its initialisation and
// calls its InitializeInjection(). Columns: start_ns, end_ns (GPU clock), correlation (the
// launching API call's id: every kernel of one graph launch shares it), graph_id, stream,
// grid, block, dynamic shared memory, registers, name (mangled). FERRITE_TIMELINE_MAX (default
// 2,000,000) caps the records kept.
#include <cupti.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRecord {
  uint64_t start, end;
  uint32_t correlation, graph_id, stream;
  int32_t grid, block, dyn_smem;
  uint16_t regs;
  std::string name;
};

std::mutex g_mu;
std::vector<KernelRecord> g_records;
size_t g_max_records = 2000000;
uint64_t g_dropped = 0;

constexpr size_t kBufferBytes = 8 << 20;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_timeline: %s failed: %s\n", what, msg ? msg : "?");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    if (g_records.size() >= g_max_records) {
      ++g_dropped;
      continue;
    }
    // The record version this CUPTI writes (cupti_activity.h's CUpti_ActivityKernel typedef).
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    g_records.push_back({k->start, k->end, k->correlationId, k->graphId, k->streamId,
                         k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
                         k->dynamicSharedMemory, k->registersPerThread,
                         k->name ? k->name : "?"});
  }
  std::free(buffer);
}

void write_out() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("FERRITE_TIMELINE_OUT");
  std::string p = path && *path ? path : "kernel_timeline.csv";
  std::lock_guard<std::mutex> lock(g_mu);
  FILE* f = std::fopen(p.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "kernel_timeline: cannot write %s\n", p.c_str());
    return;
  }
  std::fprintf(f, "start_ns,end_ns,correlation,graph_id,stream,grid,block,dyn_smem,regs,name\n");
  for (const KernelRecord& r : g_records)
    std::fprintf(f, "%llu,%llu,%u,%u,%u,%d,%d,%d,%u,%s\n",
                 static_cast<unsigned long long>(r.start), static_cast<unsigned long long>(r.end),
                 r.correlation, r.graph_id, r.stream, r.grid, r.block, r.dyn_smem, r.regs,
                 r.name.c_str());
  std::fclose(f);
  std::fprintf(stderr, "kernel_timeline: %zu kernels (%llu dropped) -> %s\n", g_records.size(),
               static_cast<unsigned long long>(g_dropped), p.c_str());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  if (const char* m = std::getenv("FERRITE_TIMELINE_MAX")) g_max_records = std::strtoull(m, nullptr, 10);
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
        "cuptiActivityRegisterCallbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable concurrent kernels");
  std::atexit(write_out);
  return 1;
}
