// gated_delta_recurrent_attention: causal conv + SiLU, the gated delta rule.
// Host-side launchers (defined in the .cu beside this header). Element types
// are passed as DType and dispatched inside; every launcher records on
// `stream` and returns the launch error. C++17 (the .cu files include it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// gated_delta_recurrent_attention. Sequences of the step are packed in
// order (sequence s: rows seq_last_row[s-1]+1 .. seq_last_row[s]); a state
// slot < 0 (graph padding) reads zero state and writes none.
struct GatedDeltaShape {
  int32_t hk = 0, hv = 0, dk = 0, dv = 0;
  int32_t tiled = 0;  // value head h uses key head h % hk (else h / (hv / hk))
  float eps = 1e-6f;  // the gated norm's
};
// x [tokens, conv_dim] f32 in place: causal depthwise conv over each
// sequence's conv state rows and its tokens, then SiLU; the state keeps the
// last kernel-1 inputs. conv_state [slots, kernel-1, conv_dim] f32.
// pdl_trigger: its blocks call griddepcontrol.launch_dependents first (the
// gated delta rule after it launched with pdl, below).
Status launch_causal_conv_silu(cudaStream_t s, const StepMeta& meta, int64_t sequences, float* x,
                               int64_t conv_dim, const void* w, DType w_dt, int64_t kernel,
                               float* conv_state, bool pdl_trigger);
// The gated delta rule in f32, then the gated RMSNorm times silu(z). One
// block per (sequence, value head, 32-column slice of the dk x dv state):
// the recurrent form for spans shorter than 16 tokens (decode), the chunked
// (WY) form over chunks of 64 tokens for longer spans when max_span (the
// step's longest span) is >= 16 and dk % 4 == 0 (else recurrent for all).
// x: conv output [tokens, conv_dim], its V section is overwritten with the
// rule's output o (f32); z [tokens, Hv dv]; b, a [tokens, Hv] (f32);
// y [tokens, Hv dv] of act. Never synchronises. pdl_trigger (Tuning::
// cuda_pdl_trigger_small): the gated norm's blocks call
// griddepcontrol.launch_dependents first, so the output projection (a
// programmatic dependent) copies its weights meanwhile. fused_norm
// (Tuning::cuda_gated_delta_fused_norm): with every span shorter than 16
// tokens and dv <= 256, the recurrent form and the gated norm are one
// launch (a head's column slices as a cluster); the same bits. pdl
// (Tuning::cuda_gated_delta_pdl): the recurrent form is launched as a
// programmatic dependent of the previous launch (the conv), reading its
// state before griddepcontrol.wait; the same bits.
// Spans of at least this many tokens take the chunked form.
constexpr int kGatedDeltaChunkedMinTokens = 16;
int64_t gated_delta_smem_bytes(const GatedDeltaShape& g);          // recurrent kernel
int64_t gated_delta_chunked_smem_bytes(const GatedDeltaShape& g);  // -1: no chunked form
Status launch_gated_delta_rule(cudaStream_t s, const StepMeta& meta, int64_t sequences,
                               int64_t tokens, int64_t max_span, const GatedDeltaShape& g,
                               float* x, const float* z, const float* b, const float* a,
                               const void* a_log, DType a_log_dt, const void* dt_bias,
                               DType dt_bias_dt, const void* norm, DType norm_dt,
                               float* delta_state, void* y, DType act, bool pdl_trigger,
                               bool fused_norm, bool pdl);

}  // namespace ferrite::cuda
