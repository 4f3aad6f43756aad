// A coarse GPU-time profiler for eager runs (Tuning::profile, i.e.
// FERRITE_PROFILE=1, best with FERRITE_CUDA_GRAPHS=0): events recorded at labelled marks on the stream;
// the time between a mark and the next is charged to the first mark's
// label. The table (label, total ms, count, share) goes to stderr at exit.
#pragma once

#include <cuda_runtime.h>

namespace ferrite::cuda {

// Process-wide (the table is printed once, at exit): set by
// make_cuda_exec_context from CudaExecOptions::profile.
void set_profiling(bool on);
bool profiling_enabled();
// Records a mark (no-op when disabled or while a graph is being captured).
void profile_mark(cudaStream_t stream, const char* label, bool capturing);

}  // namespace ferrite::cuda
