// Tuning: every knob of the engine that is not a model or request setting,
// in one typed struct (RunnerOptions::tuning). It is parsed once (the CLI
// reads the environment into it, flags override), printed by `ferrite
// info`, and part of the plan fingerprint. No other code reads the
// environment for tuning.
//
// The table below is the only list: docs/tuning.md holds the table that
// tuning_docs_table() generates (tests/runtime checks they match).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace ferrite {

// X(type, field, environment variable, default, what it does)
#define FERRITE_TUNING_KNOBS(X)                                                                   \
  X(int64_t, threads, "FERRITE_THREADS", 0,                                                       \
    "CPU worker threads of the process-wide pool, 0..1024 (0: one per hardware thread); "         \
    "`--threads` sets it too")                                                                    \
  X(bool, cpu_quant_dot, "FERRITE_CPU_QUANT_DOT", true,                                         \
    "CPU: matmuls on GGUF block weights and 4-bit GPTQ / AWQ ones (u4_g128) quantize the "      \
    "activations to 8-bit blocks and use integer dot products (0: dequantized panels and "      \
    "exact f32 dots, the reference numerics)")                                                   \
  X(int64_t, cpu_quant_isa, "FERRITE_CPU_QUANT_ISA", 0,                                           \
    "CPU: instruction set of the integer block dot products: 0 the best this CPU runs, 1 "       \
    "scalar, 2 AVX2, 3 AVX-512 VNNI, 4 AVX-512 VNNI + AMX-INT8 tiles for 16+ tokens (capped at "  \
    "what the CPU and OS run; results are bitwise equal)")                                        \
  X(bool, cuda_graphs, "FERRITE_CUDA_GRAPHS", true,                                               \
    "CUDA: replay decode steps as graphs per batch-size bucket (0: the same padded kernels run "  \
    "eagerly; results are bitwise equal)")                                                        \
  X(bool, cuda_quant_dot, "FERRITE_CUDA_QUANT_DOT", true,                                       \
    "CUDA: decode products (<= 8 tokens) on GGUF block weights quantize the activations to "      \
    "8-bit blocks of 32 and use integer dot products (0: f32 activations on the dequantized "     \
    "blocks, the reference numerics)")                                                            \
  X(bool, cuda_quant_fused, "FERRITE_CUDA_QUANT_FUSED", true,                                   \
    "CUDA: with cuda_quant_dot, each decode product on block weights is one kernel that "         \
    "normalises and quantizes x itself and runs up to four products sharing it (Q/K/V, gate/up) " \
    "(0: a norm, a quantization and a GEMV launch per product; results are equal up to the "      \
    "norm's summation order)")                                                                    \
  X(bool, cuda_quant_fused_fp8, "FERRITE_CUDA_QUANT_FUSED_FP8", true,                            \
    "CUDA: with cuda_quant_fused, FP8 (e4m3, 128-blocks) weights take the fused decode kernel "    \
    "too, on activations staged in their own type (0: the f32 GEMV; Qwen3-8B b1 on the H200 "     \
    "225 against 133 tokens/s)")                                                                  \
  X(int64_t, cuda_quant_stream_tokens, "FERRITE_CUDA_QUANT_STREAM_TOKENS", 8,                    \
    "CUDA: with cuda_quant_fused, decode products of up to this many tokens (8 at most) copy "   \
    "their block-weight rows into shared memory with the copy engine (bulk copies into a ring "  \
    "of slots a warp) instead of streaming them through registers, where the rows are 16-byte "  \
    "multiples (0: off; results are bitwise equal; Qwen3-8B Q4_K_M b1 on the H200 350.9 against " \
    "335.5 tokens/s, b8 947 against 768)")                                                         \
  X(int64_t, cuda_quant_stream_blocks, "FERRITE_CUDA_QUANT_STREAM_BLOCKS", 1,                    \
    "CUDA: blocks an SM of the bulk-copy decode GEMV (cuda_quant_stream_tokens), 1 or 2: with 2 " \
    "each has half the warps and half the shared memory, so a block of the next product can "    \
    "start its copies as soon as one block of this one exits (results are bitwise equal; 2 "     \
    "measured slower: Qwen3-8B Q4_K_M b8 804 against 948 tokens/s)")                              \
  X(int64_t, cuda_quant_stream_item_steps, "FERRITE_CUDA_QUANT_STREAM_ITEM_STEPS", 4,           \
    "CUDA: one-token products of the bulk-copy decode GEMV (cuda_quant_stream_tokens) copy "      \
    "items of this many warp iterations' blocks (1, 2 or 4; each about 576 bytes a row): larger " \
    "items spread a warp's per-item work (barrier wait, refill, bookkeeping) over more weights, " \
    "in fewer ring slots; a product whose ring would get fewer than 2 slots takes the largest "   \
    "that fits (results are bitwise equal; Qwen3-8B b1 on the H200, 1 against 4: GPTQ-Int4 "      \
    "362.5 against 389.0 tokens/s, Q4_K_M 375.6 against 389.3, Q8_0 291.6 against 332.3)")        \
  X(bool, cuda_quant_stream_mixed, "FERRITE_CUDA_QUANT_STREAM_MIXED", true,                     \
    "CUDA: at one token, a projection whose weights come in two formats, q4_k or q5_k then q6_k " \
    "(Q4_K_M / Q5_K_M files' Q and K beside a q6_k V), takes one bulk-copy launch with the q6_k " \
    "rows as its tail instead of one launch a format (results are bitwise equal; H100 b1, on "    \
    "against off: Qwen3-8B Q4_K_M 394.4 against 387.5 tokens/s, Qwen3-30B-A3B Q4_K_M 343.3 "      \
    "against 330.9)")                                                                             \
  X(int64_t, cuda_quant_mma_fp8, "FERRITE_CUDA_QUANT_MMA_FP8", 1,                                \
    "CUDA: with cuda_quant_fused, decode products of at least this many tokens (up to 8) on FP8 " \
    "(e4m3, 128-blocks) weights run on the tensor cores (f16 mma of the exact codes, activations " \
    "in f16 under a per-token power-of-two scale, f32 sums) instead of f32 multiply-adds (0: "    \
    "off)")                                                                                       \
  X(int64_t, cuda_quant_mma_u4, "FERRITE_CUDA_QUANT_MMA_U4", 5,                                  \
    "CUDA: with cuda_quant_fused, decode products of at least this many tokens (up to 8) on "     \
    "4-bit (u4_g128: GPTQ / AWQ / W4A16) weights run on the tensor cores (f16 mma of the exact "  \
    "q - z) instead of dp4a on 8-bit activations (0: off)")                                       \
  X(bool, cuda_quant_mma_fp8_act, "FERRITE_CUDA_QUANT_MMA_FP8_ACT", false,                      \
    "CUDA: the tensor-core decode GEMV on FP8 weights quantizes the activations to e4m3 per "     \
    "token and 128-element group (scale = amax / 448, the FP8 checkpoints' dynamic activation "  \
    "scheme) and multiplies on the e4m3 mma, without converting the weights (0: f16 "           \
    "activations, the reference's numerics to f32 rounding; 1 is W8A8 numerics). Measured on "  \
    "the H200, it loses: Qwen3-8B FP8 b1 / b8 282.3 / 1,272 against 300.2 / 1,514 tokens/s")    \
  X(int64_t, cuda_quant_mma_smem_kib, "FERRITE_CUDA_QUANT_MMA_SMEM_KIB", 0,                      \
    "CUDA: shared memory (KiB) a block of the tensor-core decode GEMV takes for its staged x and " \
    "weight rings when its plan fits (0: all an SM has); about 108 leaves room for a block of "   \
    "the next product beside it, which then starts its weight copies during this one's tail "    \
    "(programmatic dependent launch) at the cost of fewer items in flight a warp")               \
  X(int64_t, cuda_moe_dequant, "FERRITE_CUDA_MOE_DEQUANT", 512,                                  \
    "CUDA: eager steps of at least this many tokens of MoE layers whose experts are in block "    \
    "formats dequantize the experts to the activation type and take the grouped tensor-core "     \
    "path of bf16 experts (0: never; Qwen3-30B-A3B Q4_K_M 4,096-token prefill on the H200 "      \
    "23,751 against 3,013 tokens/s)")                                                             \
  X(bool, cuda_moe_mma_fp8, "FERRITE_CUDA_MOE_MMA_FP8", true,                                     \
    "CUDA: MoE layers with FP8 (e4m3, 128-blocks) experts run the grouped tensor-core expert "   \
    "GEMMs on the blocks, converting each stage to the activation type in shared memory "        \
    "(bitwise the dequantized experts' path), at every step that takes 16-row tiles (0: the "    \
    "per-expert f32 products; Qwen3-30B-A3B FP8 on the H200, b1 / b32 / b128 decode 231.9 / "  \
    "1,517 / 4,797 against 189.3 / 473.7 / 525.8 tokens/s)")                                    \
  X(int64_t, cuda_moe_mma_u4, "FERRITE_CUDA_MOE_MMA_U4", 9,                                        \
    "CUDA: MoE steps of at least this many tokens with 4-bit (u4_g128) experts run the grouped "  \
    "tensor-core expert GEMMs on the blocks, converted to the activation type in shared memory "  \
    "(bitwise the dequantized experts' path; 0: off; fewer tokens: the fused dp4a decode "       \
    "launches). Qwen3-30B-A3B GPTQ-Int4 on the H200, b32 / b128 decode 1,624 / 5,122 against "  \
    "1,543 / 2,578 tokens/s")                                                                    \
  X(int64_t, cuda_moe_fused_tokens, "FERRITE_CUDA_MOE_FUSED_TOKENS", 8,                          \
    "CUDA: MoE steps of up to this many tokens (32 at most) take the fused decode launches: "     \
    "norm + router, routing + sort, and with cuda_quant_dot for block-format experts gate/up + "  \
    "SiLU product + 8-bit h, then down + combine (0: one launch per stage; results are bitwise " \
    "equal)")                                                                                     \
  X(int64_t, cuda_moe_gate_up_warp_outputs, "FERRITE_CUDA_MOE_GATE_UP_WARP_OUTPUTS", 4,         \
    "CUDA: outputs a warp of the fused decode MoE gate/up kernel (cuda_moe_fused_tokens), 1, 2 "  \
    "or 4: blocks of 1,024 / this many threads, each warp streaming the gate and up rows of its " \
    "outputs at once (at 1 a block fills an SM, so Qwen3-30B-A3B's 192 blocks at batch 1 run in " \
    "two waves; at 4 two or more blocks an SM fit). Results are bitwise equal. On the H200, "     \
    "Qwen3-30B-A3B b1 / b8 (1 / 2 / 4): GPTQ-Int4 326.8 / 339.9 / 337.7 and 987 / 1,102 / "    \
    "1,088 tokens/s; Q4_K_M (1 / 4) 302.6 / 314.8 and 783 / 836")                                 \
  X(bool, cuda_moe_route_in_router, "FERRITE_CUDA_MOE_ROUTE_IN_ROUTER", false,                  \
    "CUDA: with cuda_moe_fused_tokens, steps of up to 32 (token, expert) pairs route and sort "   \
    "in the norm + router launch's last block (an arrival counter) instead of a launch of their " \
    "own, and that launch is a programmatic dependent (its weights loaded before it waits); "    \
    "results are bitwise equal. Loses on the H200: Qwen3-30B-A3B Q4_K_M b1 355.3 tok/s off, "  \
    "341.5 on (b8 897.6 / 897.9; not profiled)")                                                \
  X(bool, cuda_moe_route_block, "FERRITE_CUDA_MOE_ROUTE_BLOCK", true,                           \
    "CUDA: a one-token MoE step (up to 512 experts) routes and sorts by a block of 512 threads, "  \
    "the experts' ranks counted in parallel (the first top_k of each group of 32 experts, then "  \
    "those candidates against each other: +15 % Qwen3.5-35B-A3B GPTQ-Int4 b1 on an H100 over "    \
    "counting every expert against every expert, session 44), instead of one warp's serial "      \
    "selections (~5 us a layer of Qwen3-30B-A3B at batch 1); the same bits. H100, "                \
    "Qwen3-30B-A3B Q4_K_M b1 tokens/s "                                                            \
    "(0 / 1, random weights): 357.0, 357.0 / 364.6, 364.1 (b8 unchanged: one token only)")         \
  X(bool, cuda_moe_route_in_experts, "FERRITE_CUDA_MOE_ROUTE_IN_EXPERTS", true,                 \
    "CUDA: with cuda_moe_fused_tokens and block-format experts, a one-token step (up to 512 "     \
    "experts) routes inside the fused gate / up launch, every block by its threads as "          \
    "cuda_moe_route_block's launch does, instead of in that launch between the router and the "  \
    "experts; the same bits. H100, Qwen3-30B-A3B Q4_K_M b1 tokens/s (0 / 1, down form 2, "      \
    "random weights): 361.4, 361.6 / 366.6, 366.4 (b8 938.8, 937.4 / 938.4, 938.7)")             \
  X(bool, cuda_moe_shared_in_experts, "FERRITE_CUDA_MOE_SHARED_IN_EXPERTS", true,               \
    "CUDA: with cuda_moe_route_in_experts, a one-token step of a model with a shared expert "    \
    "(Qwen3.5-MoE, Qwen3-Next) computes that expert in the fused launches too: its gate / up in " \
    "the gate / up grid's row after the top_k selections (which only routed and left), its down " \
    "product in down + combine beside the routed ones, instead of two weight-streaming GEMVs "    \
    "between the router and the experts; the shared expert then reads the 8-bit token and its "  \
    "8-bit h as the routed experts do (not bitwise the two GEMVs). Needs the shared expert's "    \
    "intermediate size and formats equal to the routed experts'")                               \
  X(bool, cuda_moe_down_pdl_trigger, "FERRITE_CUDA_MOE_DOWN_PDL_TRIGGER", true,                \
    "CUDA: the fused decode MoE down + combine launch lets the next kernel be scheduled as soon " \
    "as its own blocks have started (griddepcontrol.launch_dependents), as the weight-streaming " \
    "GEMVs do: the next layer's Q/K/V projection (a programmatic dependent) then takes each SM "  \
    "as its down blocks leave and copies its weights before it waits, instead of starting after " \
    "the whole grid; the same values. H100, Qwen3-30B-A3B b1 tokens/s (0 / 1, random weights): " \
    "Q4_K_M 355.0, 358.3 / 382.4, 383.0; GPTQ-Int4 363.1 / 382.9 (b8 even); the same GGUF file " \
    "as llama.cpp (287.3 tg128): 354.9 / 373.1")                                                 \
  X(bool, cuda_pdl_trigger_small, "FERRITE_CUDA_PDL_TRIGGER_SMALL", false,                    \
    "CUDA: the small launches that come before a weight-streaming GEMV at decode, the gated "     \
    "delta's gated norm (before its output projection) and the MoE norm + router (before the "   \
    "shared expert's gate / up), trigger their dependents first as cuda_moe_down_pdl_trigger "   \
    "does, so that GEMV copies its weights during them; the same values. Neutral, so off: H100 " \
    "b1 tokens/s (0 / 1, random weights, session 42): Qwen3.5-35B-A3B GPTQ-Int4 291.3, 288.9 / " \
    "295.2, 288.7; Qwen3-Next-80B-A3B GPTQ-Int4 172.3 / 175.2; Qwen3-30B-A3B Q4_K_M 382.0 / 382.6")                       \
  X(bool, cuda_gated_delta_fused_norm, "FERRITE_CUDA_GATED_DELTA_FUSED_NORM", true,           \
    "CUDA: a decode step of the gated delta layers (Qwen3.5, Qwen3-Next; every span shorter "   \
    "than 16 tokens) runs the recurrent rule and the gated RMSNorm times silu(z) in one launch: " \
    "a value head's 32-column slices are one cluster that exchanges its sums of squares in "     \
    "shared memory, instead of a second launch re-reading o; the same bits. H100, "              \
    "Qwen3.5-35B-A3B GPTQ-Int4 b1 tokens/s (random weights, session 44): defaults 304.7, "      \
    "302.5, this alone 307.9; with the routing's ranking by candidates 345.2-351.4 without, "  \
    "347.8 with it, 355.3 with it and cuda_gated_delta_conv_in_projection")                     \
  X(bool, cuda_gated_delta_pdl, "FERRITE_CUDA_GATED_DELTA_PDL", false,                        \
    "CUDA: a decode step of the gated delta layers launches the recurrent rule as a "             \
    "programmatic dependent of the causal conv (which triggers it first): the rule's blocks "      \
    "load their state slice (written only by this layer's rule of an earlier step) and the "       \
    "head's constants while the conv runs, then wait for the conv's output; the same bits. "        \
    "Off: neutral alone on the H100 (Qwen3.5-35B-A3B GPTQ-Int4 b1 305.0 tok/s against 304.7 / "   \
    "302.5, session 44), and all of that session's gated delta forms on together with it and "     \
    "the float projections first (since removed) gave 338.9 / 339.4 against 355.3 without them; " \
    "session 45, one noisy run each beside a busy host: 346.6 +- 17.0 off, 360.5 +- 1.6 on")       \
  X(bool, cuda_gated_delta_conv_in_projection, "FERRITE_CUDA_GATED_DELTA_CONV_IN_PROJECTION",     \
    true,                                                                                         \
    "CUDA: a batch-1 decode step of the gated delta layers runs the causal conv + SiLU in the "    \
    "epilogue of the Q/K/V projection's fused block-format launch (each warp passes the outputs "  \
    "it stored through their channels' conv states) instead of a launch of its own; the same "     \
    "bits. Not with a second format in that launch (a Q4_K_M q6_k tail), nor on the tensor-core "  \
    "GEMV, nor on bf16 weights (the conv launch runs there). H100, Qwen3.5-35B-A3B GPTQ-Int4 "     \
    "b1 tokens/s (random weights, session 44): defaults 304.7, 302.5, this alone 309.2; with "     \
    "the routing's ranking by candidates 350.9 (345.2-351.4 without)")                          \
  X(int64_t, cuda_moe_down_form, "FERRITE_CUDA_MOE_DOWN_FORM", 2,                             \
    "CUDA: the fused decode MoE down + combine launch (the same bits in every form): 0 a "        \
    "token's experts 4 at a time, as many registers as that takes (148 a thread on q4_k: one "   \
    "block of 8 warps an SM, so Qwen3-30B-A3B's 2,048 output warps at batch 1 run in two "       \
    "waves); 1 where a row of down takes one warp iteration (I up to 1,024 for K-quant "          \
    "blocks), 8 experts at a time (one DRAM round trip for a top-8 token) at two blocks an SM, " \
    "elsewhere as 2; 2 four at a time at two blocks an SM (128 registers). H100, "              \
    "Qwen3-30B-A3B Q4_K_M tokens/s (0 / 2 / 1, random weights): b1 352.1, 351.8 / 360.8, "       \
    "358.6 / 321.2; b8 873.3, 871.4 / 937.9, 930.3 / 798.8; b32 1,449 / 1,453")                   \
  X(int64_t, cuda_decode_split_positions, "FERRITE_CUDA_DECODE_SPLIT_POSITIONS", 64,            \
    "CUDA: cached positions per split of the fused decode attention kernel (16 at least): a "     \
    "short context is spread over more blocks with fewer positions each (results are equal up "  \
    "to the splits' summation order)")                                                            \
  X(bool, cuda_decode_reduce_scatter, "FERRITE_CUDA_DECODE_REDUCE_SCATTER", false,              \
    "CUDA: the fused decode attention sums its scores over a warp by halving the live values at " \
    "each shuffle offset (16 + 16 shuffles for 16 values instead of 80) and unpacks each V row "  \
    "once for all heads; bitwise the same outputs (the CUDA conformance checks it). Measured "   \
    "neutral on the H200, Qwen3-8B FP8 b1 / b8 300.4 / 1,534 against 300.2 / 1,514 tokens/s, "  \
    "so off")                                                                                     \
  X(int64_t, cuda_decode_colocate, "FERRITE_CUDA_DECODE_COLOCATE", 2,                          \
    "CUDA: at one token, blocks of the cluster decode attention (cuda_decode_cluster) and of "   \
    "the bulk-copy decode GEMVs (cuda_quant_stream_tokens) share SMs: 1: the attention "         \
    "prefers the largest shared-memory carveout, as the GEMVs take; 2: also the Q/K/V and "       \
    "output projections of layers whose step the cluster attention takes (length bound up to "  \
    "512, head_dim up to 128), on weights of under 8 bits (not q8_0), leave room for one of its " \
    "blocks (20 warps instead of 24 and ~41 KiB less ring), so the attention's blocks start "     \
    "beside the Q/K/V projection, copying their cached K/V rows before its end, and the output " \
    "projection's beside the attention's (results are bitwise equal; 0: neither). b1 tokens/s, " \
    "H200, 0 / room in every one-token GEMV of such steps (session 31's mode 2): Qwen3-8B "       \
    "Q4_K_M 400.0 / 427.4, GPTQ-Int4 384.6 / 416.3, Q8_0 332.3 / 315.8 (hence not q8_0); H100, " \
    "that / 2: Qwen3-8B Q4_K_M 382.8 / 387.6, Qwen3-30B-A3B Q4_K_M 331.1 / 331.9 (1: 336.5)")   \
  X(int64_t, cuda_decode_colocate_min_mib, "FERRITE_CUDA_DECODE_COLOCATE_MIN_MIB", 8,          \
    "CUDA: with cuda_decode_colocate 2, only layers whose Q/K/V weights take at least this many " \
    "MiB leave room for the attention's blocks (0: every such layer): the room costs those "     \
    "GEMVs warps and ring, and short ones end before the attention could use it. b1 tokens/s, "   \
    "room / none: Qwen3-8B Q4_K_M (14 MB of Q/K/V) 427.4 / 396.8 on the H200; Qwen3-30B-A3B "      \
    "Q4_K_M (5.9 MB) 343.1 / 351.0 on the H100 (session 33), 331.9 / 336.5 (session 32); with "  \
    "the threshold in place (session 34, H100), 0 / 8 measured 344.6, 344.1, 342.7 / 343.5, "     \
    "344.8, 341.6 on the MoE model and 394.0, 394.8 / 394.3, 394.3 on Qwen3-8B: within noise")   \
  X(bool, cuda_decode_cluster, "FERRITE_CUDA_DECODE_CLUSTER", true,                             \
    "CUDA: decode steps of up to 8 tokens whose length bound is at most 512 positions take the "  \
    "cluster decode attention (each KV head's splits of up to 64 positions one thread-block "     \
    "cluster: cached K/V rows copied to shared memory before the wait, a thread a score, the "    \
    "splits merged in distributed shared memory) instead of the fused kernel's rounds and "       \
    "global merge (results are equal up to the sums' order). On the H200 at 128 positions, "    \
    "b1 (0 / 1): Qwen3-8B GPTQ-Int4 387.8 / 393.6 tokens/s, Q4_K_M 390.2 / 399.5, "              \
    "Qwen3-30B-A3B GPTQ-Int4 324.7 / 341.3 (larger steps and longer bounds take the fused "    \
    "kernel)")                                                                                    \
  X(bool, cuda_decode_cluster_late_stores, "FERRITE_CUDA_DECODE_CLUSTER_LATE_STORES", true,     \
    "CUDA: the cluster decode attention stores the token's K / V rows into the cache after its " \
    "first cluster barrier, and arrives at its last one relaxed: neither barrier's release then " \
    "waits for global stores (ncu: the two barriers and their fences ~14 % of its stall "        \
    "samples on Qwen3-30B-A3B b1); the same values. H100, b1 tokens/s (0 / 1, two runs each): "  \
    "Qwen3-30B-A3B Q4_K_M 348.4, 348.5 / 351.6, 351.3; Qwen3-8B Q4_K_M 398.6, 399.5 / 401.9, "   \
    "403.1 (b8 +0.2-0.5 %). Its last barrier 1.03 -> 0.55 us a block (FERRITE_CUDA_CLUSTER_TRACE)")\
  X(bool, cuda_decode_cluster_staged_pages, "FERRITE_CUDA_DECODE_CLUSTER_STAGED_PAGES", true,   \
    "CUDA: before its wait the cluster decode attention loads the page ids of a block's "        \
    "positions at once into shared memory, then issues the K/V copies from them, instead of two " \
    "dependent global loads before every copy, the table's start read from the token "          \
    "(StepMeta::token_table) rather than through its sequence; the same values. H100, b1 "       \
    "tokens/s (0 / 1, two runs each): Qwen3-8B Q4_K_M 399.0, 395.9 / 403.4, 402.3; "            \
    "Qwen3-30B-A3B Q4_K_M 347.0, 346.4 / 347.9, 347.6 (b8 within noise). Stamps "             \
    "(FERRITE_CUDA_CLUSTER_TRACE): page ids at hand 0.87 us after a block's start instead of "  \
    "the first copy at 1.32")                                                                      \
  X(bool, cuda_decode_cluster_bulk_copies, "FERRITE_CUDA_DECODE_CLUSTER_BULK_COPIES", true,      \
    "CUDA: the cluster decode attention copies its cached K/V rows into shared memory as one "   \
    "bulk (TMA) request a row, counted on an mbarrier, instead of a 16-byte cp.async a chunk "   \
    "(~2,000 requests a block at 128 positions); the same values. H100, b1 / b8 tokens/s (0 / " \
    "1, two runs each): Qwen3-30B-A3B Q4_K_M 340.3, 339.9 / 349.4, 349.2 and 927.8, 928.5 / "     \
    "932.0, 931.5; Qwen3-8B Q4_K_M 400.2, 400.7 / 401.0, 400.9 and 1,416.8, 1,422.4 / "          \
    "1,430.0, 1,425.7. Stamps: the prologue 8.2 -> 6.2 us a block")                              \
  X(bool, cuda_decode_cluster_copy_warps, "FERRITE_CUDA_DECODE_CLUSTER_COPY_WARPS", true,        \
    "CUDA: with cuda_decode_cluster_bulk_copies and late stores, the cluster decode attention's " \
    "two warps that hold no q / K / V row load the page ids and issue every bulk copy, "          \
    "synchronising only among themselves, so the row warps go from their loads to the PDL wait " \
    "without waiting on the page ids or the copies' issue; the same values. H200 b1 tokens/s: "  \
    "Qwen3-30B-A3B Q4_K_M alone 368.1 (off 367.3, 367.5), with cuda_decode_cluster_rope_table " \
    "381.0, 380.4 (the table alone 376.4)")                                                         \
  X(bool, cuda_decode_cluster_rope_table, "FERRITE_CUDA_DECODE_CLUSTER_ROPE_TABLE", true,        \
    "CUDA: the cluster decode attention computes RoPE's cos / sin once a block (a thread a "      \
    "frequency, into shared memory, published among the row warps by a named barrier) instead "  \
    "of in every lane of every q / K row, whose inv_freq reads are 32 distinct addresses of the " \
    "kernel's parameter bank a warp; the same values. H200 tokens/s, both knobs off / on: "      \
    "Qwen3-30B-A3B Q4_K_M b1 367.3, 367.5 / 381.0, 380.4, b8 964.9 / 972.7; Qwen3-8B Q4_K_M "    \
    "b1 449.4, 450.9 / 451.4, b8 1,438.9 / 1,451.0")                                              \
  X(int64_t, cuda_decode_mma_tokens, "FERRITE_CUDA_DECODE_MMA_TOKENS", 9,                       \
    "CUDA: decode steps of at least this many tokens (that the cluster kernel does not take) "   \
    "run the tensor-core decode attention (kernels/attention_decode_mma.cu: a KV head's query "  \
    "heads, up to 16, as the rows of mma.sync tiles over 16 positions at a time; P rounded to "  \
    "the activation type, so not bitwise the fused kernel; bf16 / f16, head_dim 64 / 128) "      \
    "instead of the fused kernel (0: off), whose per-lane dot products, score butterflies and " \
    "per-position masks cost ~290 warp instructions a position at b64. H100, Qwen3-8B decode "  \
    "tokens/s (0 / 9): Q4_K_M b64 6,207 / 6,509, b128 6,816 / 7,262; Q8_0 b16 2,305 / 2,477, "   \
    "b64 6,365 / 6,657; GPTQ-Int4 b128 7,684 / 8,252 (b8 even, so from 9 tokens)")              \
  X(bool, cuda_rope_token_warps, "FERRITE_CUDA_ROPE_TOKEN_WARPS", false,                        \
    "CUDA: prompt steps' bias / q-k norm / RoPE / K-V write kernel takes a warp per token over "  \
    "all its heads (RoPE's cos / sin and the cache slot once a token, four heads' rows loaded "  \
    "together) instead of a warp per (token, head); the same values. Not yet measured (the "      \
    "warp-per-row kernel takes ~125 us a layer on a 4,096-token Qwen3-8B prefill on the H200)")   \
  X(bool, cuda_prefill_short_tiles, "FERRITE_CUDA_PREFILL_SHORT_TILES", false,                  \
    "CUDA: the head_dim-128 flash prefill on 32-key tiles with Q re-read from shared memory "    \
    "(168 registers: 3 blocks, 12 warps an SM, instead of 2 at 219 registers); the same "        \
    "arithmetic over other tile bounds. Not yet measured (the default is latency-bound at 2 "     \
    "warps a scheduler, ncu on the H200)")                                                         \
  X(int64_t, cuda_dequant_slice_mib, "FERRITE_CUDA_DEQUANT_SLICE_MIB", 512,                       \
    "CUDA: products of more than 8 tokens on block weights dequantize at most this many MiB of "  \
    "weight rows (128 rows at least) per cuBLASLt call: small slices can stay in L2 between the " \
    "dequantization and the product")                                                            \
  X(int64_t, cuda_quant_tile_tokens, "FERRITE_CUDA_QUANT_TILE_TOKENS", 32,                       \
    "CUDA: products of 9 up to this many tokens on block weights (GGUF formats, FP8, GPTQ / AWQ " \
    "4-bit) with bf16 activations take the bf16 tensor-core tile that decodes the blocks in "     \
    "registers, reading them once per 64 tokens (0: dequantize to 16 bits for cuBLASLt). On the " \
    "H200 (tile to 64 / 32 / off), Qwen3-8B Q4_K_M b16 1,596 / - / 1,065 tokens/s, b32 2,677 / " \
    "2,672 / 2,107, b48 2,757 / 3,171 / 3,193, b64 3,610 / 4,332 / 4,360; FP8 b48 2,929 / "     \
    "3,657, b64 3,822 / 4,652: from 33 tokens the tile, compute-bound on decoding the blocks, " \
    "loses to dequantize + cuBLASLt")                                                             \
  X(int64_t, cuda_quant_mmq_tokens, "FERRITE_CUDA_QUANT_MMQ_TOKENS", 64,                        \
    "CUDA: products of 9 up to this many tokens (64 at most) on q4_k / q6_k / q8_0 weights run " \
    "on the int8 tensor cores (kernels/quant_mmq.cu: activations quantized to int8 per token "   \
    "and 256 elements (q8_0: 32), the CPU dot products' numerics; the scales applied to the "   \
    "int32 sums) ahead of the bf16 tile and dequantize + cuBLASLt (0: off). H200, Qwen3-8B, "   \
    "off / 64, tok/s: Q4_K_M b16 1,701 / 2,043, b32 2,809 / 3,518, b64 4,413 / 5,428; Q8_0 "    \
    "b16 1,693 / 2,016, b32 2,792 / 3,406, b64 4,812 / 5,229")                                  \
  X(int64_t, cuda_quant_mmq_min_tokens, "FERRITE_CUDA_QUANT_MMQ_MIN_TOKENS", 5,                 \
    "CUDA: the fewest tokens (1-9) of a q4_k / q6_k / q8_0 product that the int8 tile above "     \
    "takes: products of fewer run the fused decode GEMV (norm, quantization and SwiGLU in its "  \
    "launch, dp4a on CUDA cores), of this many up to cuda_quant_mmq_tokens the tile (the norm "  \
    "and SwiGLU then in launches of their own). The GEMV's dot products grow with the tokens, "  \
    "the tile's mma hardly. Qwen3-8B decode tokens/s (9 / this): H200, from 5, Q4_K_M b5 610.8 " \
    "/ 909.6, b7 853.1 / 1,277; Q8_0 b5 692.3 / 964.1, b7 958.4 / 1,331; H100, from 2, Q4_K_M " \
    "b4 771.4 / 738.3, b8 960.7 / 1,433 (the tile loses at 2-4 tokens)")                          \
  X(bool, cuda_quant_mmq_waves, "FERRITE_CUDA_QUANT_MMQ_WAVES", true,                            \
    "CUDA: the int8 tile splits k into the count that runs its blocks in the fewest waves x "     \
    "steps (kernels/quant_mmq.cuh, mmq_splits) instead of about 3 blocks an SM (0)")            \
  X(bool, cuda_quant_mmq_share_act, "FERRITE_CUDA_QUANT_MMQ_SHARE_ACT", true,                   \
    "CUDA: the int8 tile's products of one unchanged input (a stage's Q, K and V; gate and up) " \
    "quantize it once instead of once a product (gemm.cc, quant_product; bitwise the same "      \
    "outputs): 108 of the 253 quantization launches of a Qwen3-8B Q4_K_M b64 step. H100, "       \
    "Q4_K_M b64 (0 / 1): 6,229 / 6,299 tokens/s")                                                \
  X(int64_t, cuda_u4_tile_tokens, "FERRITE_CUDA_U4_TILE_TOKENS", 64,                            \
    "CUDA: products of 9 up to this many tokens on 4-bit (u4_g128: GPTQ / AWQ / "               \
    "compressed-tensors W4A16) weights with bf16 activations take the Marlin-class 4-bit tile "  \
    "(codes decoded in registers to the integers q - z, each step's sums scaled by the f32 "     \
    "scale: ~1.6 instructions a weight) ahead of the bf16 tile and cuBLASLt (0: off). On the "   \
    "H200, Qwen3-8B GPTQ-Int4 decode b16 2,052 against 1,877 tokens/s, b32 3,254 / 3,124, b64 "  \
    "4,755 / 4,102; from 128 tokens dequantize + cuBLASLt is faster (146 against 131 us at "     \
    "24576 x 4096)")                                                                             \
  X(bool, cuda_u4_tile_wgmma, "FERRITE_CUDA_U4_TILE_WGMMA", false,                              \
    "CUDA: the 4-bit tile (cuda_u4_tile_tokens) on Hopper's warpgroup MMA (wgmma m64nNk16, the "  \
    "decoded weights from registers, the activations from shared memory) instead of mma.sync. "   \
    "Correct on the H200 but not faster (24576 x 4096: 104 against 85 us at 64 tokens, 169 "      \
    "against 159 at 128, before the mma.sync tile's session-21 rework)")                                                                        \
  X(int64_t, cuda_fp8_lt_tokens, "FERRITE_CUDA_FP8_LT_TOKENS", 128,                             \
    "CUDA: products of at least this many tokens on FP8 (e4m3, 128-blocks) weights, beyond "    \
    "the bf16 tile's (cuda_quant_tile_tokens), quantize "                                        \
    "the activations to e4m3 per token and 128-element group (the FP8 checkpoints' dynamic "    \
    "activation scheme, W8A8) and run cuBLASLt's block-scaled FP8 GEMM on weight slices "       \
    "repacked to plain codes and scales (128x128 scales where each 128-row group shares them, " \
    "else per row), instead of dequantizing the weights to 16 bits; token counts of 16-multiples " \
    "(the rest on the smaller paths). 0: off. On the H200, Qwen3-8B FP8 (this path against "     \
    "512): b128 decode 9,378 against 8,583 tokens/s, prefill 128 10,570 against 9,586, prefill " \
    "256 18,281 against 17,354; 4,096-token prefill 38,628 against 32,630 (dequantizing)")      \
  X(bool, profile, "FERRITE_PROFILE", false,                                                      \
    "CUDA: GPU milliseconds per labelled phase of eager steps, printed to stderr at exit (use "   \
    "with FERRITE_CUDA_GRAPHS=0)")                                                                \
  X(int64_t, ncu_decode_step, "FERRITE_NCU_DECODE_STEP", 0,                                       \
    "CUDA: the K-th graph replay runs inside a profiler range, for `ncu --profile-from-start "    \
    "off` (0: none)")                                                                             \
  X(int64_t, cuda_cluster_trace, "FERRITE_CUDA_CLUSTER_TRACE", 0,                                 \
    "CUDA, a diagnostic: every block of the cluster decode attention records when it reached "   \
    "each phase (ClusterTraceRecord, kernels/attention_decode.cuh) in a ring of this many "       \
    "records (rounded up to a power of two; 0: off), printed to stderr as `cluster_trace,...` "  \
    "lines when the backend closes (scripts/cluster_trace_summary.py reads them)")

struct Tuning {
#define FERRITE_TUNING_FIELD(type, field, env, def, doc) type field = def;
  FERRITE_TUNING_KNOBS(FERRITE_TUNING_FIELD)
#undef FERRITE_TUNING_FIELD

  // The defaults overridden by every variable of the table that is set
  // (`lookup` is std::getenv unless a test passes its own). Booleans take
  // 0/1/false/true/off/on/no/yes; a malformed value is an error naming it.
  static Result<Tuning> from_environment(
      const std::function<const char*(const char*)>& lookup = nullptr);
  // Sets the knob of that variable from text (the parser above).
  Status set(std::string_view variable, std::string_view value);

  uint64_t fingerprint() const;
  std::string to_string() const;  // "threads=0 cuda_graphs=1 ..."
  bool operator==(const Tuning&) const = default;
};

// The markdown table of every knob (variable, type, default, what).
std::string tuning_docs_table();

}  // namespace ferrite
