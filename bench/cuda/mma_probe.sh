#!/usr/bin/env bash
# GPU calls for the tensor-core decode GEMV (kernels/quant_gemv_mma.cu), in two stages that
# fit the device's 10-minute command limit (the machine stays warm ~30 s between calls):
#   STAGE=test: the build (build-gpu: cuda_test, conformance_test, ferrite, quant_gemm_bench),
#     its kernel test (CudaQuantMmaTest) and the Hugging Face quantized goldens (cuda_test),
#     the CUDA conformance, then quant_gemm_bench at decode token counts, the fused GEMV on the
#     CUDA cores against the tensor cores (paths gemv, mma), then fp8_lt_probe;
#   STAGE=ab: `ferrite bench` on Qwen3-8B FP8 and GPTQ-Int4 (random weights) at batch 1 / 2 / 8
#     with the tensor-core kernel on and off (FERRITE_CUDA_QUANT_MMA_FP8 / _U4); AB= picks other
#     models and settings (below), BATCHES= the batch sizes (default "1 2 8");
#   STAGE=prefill: prefill tokens/s over prompt lengths for settings (PREFILL=, LENS=) and
#     FERRITE_PROFILE's table of a 4,096-token prefill (PROFILE="qwen3-8b:fp8 qwen3-8b:-");
#   STAGE=ncu: ncu sections (speed of light, occupancy, warp states, scheduler) of the decode
#     GEMVs at one token (FORMATS, SHAPES, PATHS) and of one replayed b1 step's attention
#     (NCU_MODEL, default qwen3-8b); builds what it runs when the build is missing.
# Run bash scripts/gpu_prebuild.sh first and carry [".deb", ".gpu-prebuilt"]: the kernels then
# come prebuilt (scripts/gpu_env.sh; build.log says so).
# Session 21's first calls (run in session 23; docs/perf-log.md session 23):
#   HFQ_GOLDENS=qwen3_5_moe-gptq-int4-act TESTS='CudaU4Tile*:*HfQuant*' PROBE=0 FORMATS=u4_g128 \
#     PATHS=u4,u4s1,u4s2,u4t,lt SHAPES=6144x4096,24576x4096,4096x12288 TOKENS=16,32,64 \
#     STAGE=test bash bench/cuda/mma_probe.sh
#   AB='qwen3-8b:gptq-int4:FERRITE_CUDA_U4_TILE_TOKENS=64,0' BATCHES='16 32 64' STAGE=ab \
#     bash bench/cuda/mma_probe.sh
#   (AB's quantization "-" runs the bf16 model: AB='qwen3-8b:-:FERRITE_CUDA_U4_TILE_TOKENS=0');
#   a tile's ncu: STAGE=ncu NCU_KERNEL=u4_ NCU_ATTENTION=0 NCU_DETAILS=1 FORMATS=u4_g128 PATHS=u4 \
#     SHAPES=24576x4096 TOKENS=16,64 NCU_KERNELS=2 bash bench/cuda/mma_probe.sh
# A decode step's per-kernel table and knob sweeps over GGUF formats: bench/cuda/step_probe.sh.
# Output: $OUT/mma_probe_<stage>.txt (its end on stdout).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/out}"
STAGE="${STAGE:-test}"
mkdir -p "$OUT"
. "$ROOT/scripts/gpu_env.sh"
BUILD="${BUILD:-$ROOT/build-gpu}"
T="$OUT/mma_probe_$STAGE.txt"
: > "$T"
if [ "$STAGE" = test ]; then
  T0=$(date +%s)
  # HFQ_GOLDENS="name ...": transformers goldens of those tests/models/hf_quant checkpoints
  # (scripts/make_hf_quant_goldens.py, on the CPU beside the build) into $OUT/hfq/<name>/;
  # copy them into tests/models/hf_quant/<name>/ and drop the name from hf_quant_test's
  # goldens_pending.
  if [ -n "${HFQ_GOLDENS:-}" ]; then
    HFQ_DIRS=""
    for m in $HFQ_GOLDENS; do HFQ_DIRS="$HFQ_DIRS $ROOT/tests/models/hf_quant/$m"; done
    timeout 400 python3 "$ROOT/scripts/make_hf_quant_goldens.py" --device cpu --out "$OUT/hfq" \
      $HFQ_DIRS > "$OUT/hfq_goldens.log" 2>&1 &
    HFQ_PID=$!
  fi
  [ -f "$BUILD/build.ninja" ] || gpu_configure "$BUILD" > "$OUT/build.log" 2>&1
  ninja -C "$BUILD" cuda_test conformance_test ferrite quant_gemm_bench fp8_lt_probe >> "$OUT/build.log" 2>&1
  echo "build rc=$? in $(( $(date +%s) - T0 )) s" | tee -a "$T"
  grep -E "error|FAILED" "$OUT/build.log" | head -10 | tee -a "$T"
  "$BUILD/tests/cuda/cuda_test" --gtest_filter="${TESTS:-CudaQuantMma*:*HfQuant*:*QuantStream*}" \
    > "$OUT/cuda_test.log" 2>&1
  echo "cuda_test: rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/cuda_test.log" | tr '\n' ' ')" | tee -a "$T"
  grep -E "^\[  FAILED  \] [A-Z]|Failure|Expected|Which is|largest" "$OUT/cuda_test.log" | head -30 | tee -a "$T"
  "$BUILD/tests/conformance/conformance_test" --gtest_filter='*/cuda_*' > "$OUT/conformance.log" 2>&1
  echo "conformance (cuda): rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/conformance.log" | tr '\n' ' ')" | tee -a "$T"
  grep -E "^\[  FAILED  \] [A-Z]" "$OUT/conformance.log" | head -20 | tee -a "$T"
  timeout 120 "$BUILD/bench/cuda/quant_gemm_bench" --formats ${FORMATS:-f8_e4m3_b128,u4_g128} \
    --paths ${PATHS:-gemv,mma} --shapes ${SHAPES:-4096x4096,12288x4096,4096x12288,1024x4096,24576x4096} \
    --tokens ${TOKENS:-1,2,4,8} 2>&1 | tee -a "$T"
  # cuBLASLt's block-scaled FP8: which scale layouts are exact, speed against bf16.
  [ "${PROBE:-1}" = 1 ] && timeout 60 "$BUILD/bench/cuda/fp8_lt_probe" 2>&1 | tee -a "$T"
  if [ -n "${HFQ_PID:-}" ]; then
    wait "$HFQ_PID"
    echo "hf_quant goldens rc=$?: $(ls "$OUT/hfq" 2>/dev/null | tr '\n' ' ')" | tee -a "$T"
    tail -3 "$OUT/hfq_goldens.log" | tee -a "$T"
  fi
elif [ "$STAGE" = ncu ]; then
  NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
  [ -f "$BUILD/build.ninja" ] || gpu_configure "$BUILD" > "$OUT/build.log" 2>&1
  ninja -C "$BUILD" ferrite quant_gemm_bench >> "$OUT/build.log" 2>&1 || echo "build failed" | tee -a "$T"
  SECTIONS="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
  # NCU_DETAILS=1: the sections' detail tables too (the warp stall reasons, the instruction mix,
  # the memory tables: ncu --print-details all), into ncu_gemv.txt.
  [ "${NCU_DETAILS:-0}" = 1 ] && SECTIONS="$SECTIONS --section InstructionStats --print-details all"
  # NCU_KERNEL: the kernel-name regex (default the decode GEMVs; "u4_" the 4-bit tiles with
  # PATHS=u4,u4wg and 16+ TOKENS); NCU_ATTENTION=0 skips the decode attention below.
  timeout 200 "$NCU" $SECTIONS --kernel-name "regex:${NCU_KERNEL:-quant_gemv}" -c ${NCU_KERNELS:-8} \
    "$BUILD/bench/cuda/quant_gemm_bench" --iters 1 --warmup 0 --formats ${FORMATS:-f8_e4m3_b128,u4_g128} \
    --paths ${PATHS:-gemv,mma} --shapes ${SHAPES:-24576x4096} --tokens ${TOKENS:-1} > "$OUT/ncu_gemv.txt" 2>&1
  echo "ncu gemv rc=$?" | tee -a "$T"
  grep -E "^  [a-z_0-9]+.*(${NCU_KERNEL:-quant_gemv})|Duration|Pipe|Compute \(SM\)|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|Theoretical Occ|Block Limit" "$OUT/ncu_gemv.txt" | head -120 | tee -a "$T"
  if [ "${NCU_ATTENTION:-1}" = 1 ]; then
    FERRITE_NCU_DECODE_STEP=10 timeout 200 "$NCU" --profile-from-start off $SECTIONS \
      --kernel-name regex:attention -c 2 "$BUILD/ferrite" bench --model "$ROOT/configs/${NCU_MODEL:-qwen3-8b}" \
      --dummy-weights --device cuda --batch 1 --prompt-len 16 --decode-prompt-len 128 --gen-len 16 \
      --max-num-seqs 8 --kv-cache-gib 4 --max-model-len 8192 > "$OUT/ncu_attention.txt" 2>&1
    echo "ncu attention rc=$?" | tee -a "$T"
    grep -E "^  [a-z_]+.*attention|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Grid Size" "$OUT/ncu_attention.txt" | head -40 | tee -a "$T"
  fi
elif [ "$STAGE" = prefill ]; then
  # Prefill tokens/s over prompt lengths (LENS, default "256 512 1024 4096") for each setting of
  # PREFILL="model:quantization:VAR=v1,v2 ..." (default: the FP8 cuBLASLt path's crossover), then,
  # with PROFILE="model:quantization ..." (quantization "-" = bf16), FERRITE_PROFILE's table of one
  # eager 4,096-token prefill (profiler.h: GPU time between labelled marks).
  [ -f "$BUILD/build.ninja" ] || gpu_configure "$BUILD" > "$OUT/build.log" 2>&1
  ninja -C "$BUILD" ferrite >> "$OUT/build.log" 2>&1 || echo "build failed" | tee -a "$T"
  for spec in ${PREFILL-qwen3-8b:fp8:FERRITE_CUDA_FP8_LT_TOKENS=65,0}; do
    IFS=: read -r model quant setting <<< "$spec"
    var=${setting%%=*}
    q=(--quantization "$quant")
    [ "$quant" = - ] && q=()
    for v in $(echo "${setting#*=}" | tr , ' '); do
      for len in ${LENS:-256 512 1024 4096}; do
        echo "== $model $quant $var=$v prompt $len" | tee -a "$T"
        env "$var=$v" timeout "${RUN_TIMEOUT:-120}" "$BUILD/ferrite" bench --device cuda \
          --dummy-weights -r 2 --batch 1 --prompt-len "$len" --decode-prompt-len 16 --gen-len 2 \
          --max-num-seqs 1 --kv-cache-gib 4 --max-model-len 8192 --model "$ROOT/configs/$model" \
          "${q[@]}" 2>&1 | grep -E "^prefill|error" | tee -a "$T"
      done
    done
  done
  # Each profile twice, with PROFILE_RUNS measured prefills (default "1 3") after the warm-up:
  # the difference of two tables is steady prefills only (the warm-up's first calls, cuBLASLt's
  # plans and lazily loaded kernels, land in the first layers' marks).
  for spec in ${PROFILE:-}; do
    IFS=: read -r model quant <<< "$spec"
    q=(--quantization "$quant")
    [ "$quant" = - ] && q=()
    for r in ${PROFILE_RUNS:-1 3}; do
      echo "== profile $model $quant prefill 4096, -r $r" | tee -a "$T"
      FERRITE_PROFILE=1 FERRITE_CUDA_GRAPHS=0 timeout "${RUN_TIMEOUT:-120}" "$BUILD/ferrite" bench \
        --device cuda --dummy-weights -r "$r" --batch 1 --prompt-len 4096 --decode-prompt-len 16 \
        --gen-len 2 --max-num-seqs 1 --kv-cache-gib 4 --max-model-len 8192 \
        --model "$ROOT/configs/$model" "${q[@]}" > "$OUT/profile_${model}_${quant}_r$r.txt" 2>&1
      grep -vE "^(decode|mixed)" "$OUT/profile_${model}_${quant}_r$r.txt" | head -60 | tee -a "$T"
    done
  done
  # NCU_PREFILL=model: ncu sections of one flash-prefill attention launch (4,096 tokens).
  if [ -n "${NCU_PREFILL:-}" ]; then
    NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
    timeout 200 "$NCU" --clock-control none --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section LaunchStats \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --kernel-name regex:prefill_kernel -s 2 -c 1 "$BUILD/ferrite" bench --device cuda \
      --dummy-weights -r 1 --batch 1 --prompt-len 4096 --decode-prompt-len 16 --gen-len 2 \
      --max-num-seqs 1 --kv-cache-gib 4 --max-model-len 8192 \
      --model "$ROOT/configs/$NCU_PREFILL" > "$OUT/ncu_prefill.txt" 2>&1
    echo "ncu prefill rc=$?" | tee -a "$T"
    grep -E "prefill_kernel|Duration|Registers Per|Achieved Occupancy|Theoretical Occ|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Grid Size|Block Limit|Throughput|Pipe|Shared" "$OUT/ncu_prefill.txt" | head -60 | tee -a "$T"
  fi
else
  run() {  # VAR=value, then ferrite bench's model arguments
    local setting=$1
    shift
    echo "== $setting $*" | tee -a "$T"
    local batches=${BATCHES:-1 2 8}
    env "$setting" timeout "${RUN_TIMEOUT:-170}" "$BUILD/ferrite" bench --device cuda \
      --dummy-weights -r 1 --batch $batches --prompt-len 128 --decode-prompt-len 128 \
      --gen-len 32 --max-num-seqs "${batches##* }" --kv-cache-gib 4 --max-model-len 8192 "$@" 2>&1 |
      grep -E "^(prefill|decode)|roofline|error" | tee -a "$T"
  }
  # AB="model:quantization:VAR=v1,v2 ..." (default: the 8B FP8 and GPTQ-Int4 A/B).
  for spec in ${AB:-qwen3-8b:fp8:FERRITE_CUDA_QUANT_MMA_FP8=1,0 qwen3-8b:gptq-int4:FERRITE_CUDA_QUANT_MMA_U4=5,0}; do
    IFS=: read -r model quant setting <<< "$spec"
    var=${setting%%=*}
    q=(--quantization "$quant")
    [ "$quant" = - ] && q=()  # "-": the bf16 model
    for v in $(echo "${setting#*=}" | tr , ' '); do
      run "$var=$v" --model "$ROOT/configs/$model" "${q[@]}"
    done
  done
fi
