#!/usr/bin/env bash
# Where a decode step's GPU time goes, for a few models / weight formats, in one device call:
#   STEPS="model:quant:batch ..." (quant "-" = bf16; a GGUF block format = --dummy-dtype, e.g.
#     qwen3-8b:q4_k_m:1): ncu's per-kernel table of one replayed decode step (the 10th:
#     FERRITE_NCU_DECODE_STEP; scripts/ncu_summary.py: kernels by name, summed time, DRAM bytes
#     read, bandwidth), default "qwen3-8b:gptq-int4:1";
#   TESTS='a cuda_test filter' (first): builds cuda_test and runs those tests (e.g. the
#     bitwise tests of the knobs a KNOBS run measures);
#   SWEEP="model:quant:VAR=v1,v2 ..." with SWEEP_BATCHES (default "128") and SWEEP_PROMPT
#     (default 512) and SWEEP_DECODE_PROMPT (the decode steps' context, default 128): ferrite
#     bench's prefill and decode tokens/s for each setting;
#   KNOBS="model:quant:VAR1,VAR2,... ..." (after SWEEP, the same bench settings): off-by-default
#     knobs decided in one call: the defaults, every VAR=1, each VAR=1 alone, then the
#     defaults and all of them once more (two alternated samples of the pair that matters);
#   OBJECTS_AB="model:quant ..." with AB_OBJECTS (a .tar.xz of objects/*.cu.o, default
#     .gpu-prebuilt/ab_old.tar.xz; the build must link prebuilt kernels, scripts/gpu_env.sh):
#     a kernel change that has no knob (the same results, fewer instructions) against the
#     objects it replaced: ferrite relinked with those objects as "old", then the tree's as
#     "new", and ferrite bench (the SWEEP settings) alternated old / new / old / new;
#   PROFILE="model:quant:batch ..." (before the ncu tables): FERRITE_PROFILE's GPU time per
#     labelled phase of eager decode steps (graphs off: each phase's kernels run without the
#     overlap of the previous phase's tail, as under ncu but without its replay overhead). At
#     small batches an eager step is bound by the host's launches, so the phases' times there
#     include launch gaps: read them at b8+ or next to the ncu table, not as b1 kernel times.
#   TIMELINE="model:quant:batch[:VAR=value] ..." (after PROFILE): the real timeline of the replayed decode
#     graphs (bench/cuda/kernel_timeline.cc, a CUPTI injection library: every kernel's start
#     and end with the overlaps PDL gives), summarised by scripts/timeline_summary.py: the
#     step's period, each kernel's summed and exposed time, the first TIMELINE_KERNELS (default
#     16) kernels of a step in order; ferrite bench's own decode tok/s traced and untraced.
#   NCU_SOURCE="model:quant:batch ..." (last) with NCU_SOURCE_KERNELS (a kernel-name regex) and
#     NCU_SOURCE_COUNT (default 3): ncu's sampled warp stalls per SASS instruction of the first
#     matching kernels of one replayed decode step (serialised, as under STEPS), into
#     $OUT/src-<tag>-sass.csv (ncu --page source) and -details.txt (stall reasons, occupancy);
#     scripts/ncu_source_summary.py reads the CSV (the instructions the samples stall on).
# Builds build-gpu (ferrite) when missing. Run bash scripts/gpu_prebuild.sh first and carry
# [".deb", ".gpu-prebuilt"]. Output: $OUT/step_probe.txt (and its end on stdout); $OUT/status
# names the section running (build, tests, sweep, ..., done), so the script can run detached
# (setsid nohup ... &) while later device calls poll it: a call lasts at most 10 minutes.
# While its build runs, make no other device call: every call copies the working tree onto the
# machine again, and files a compiler is reading vanish for a moment (session 45: "No such
# file" in the middle of the build, no ferrite binary, every bench after it rc=127). Poll (or
# start a second detached job) only once $OUT/status has passed "build" (and "tests").
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT"
. "$ROOT/scripts/gpu_env.sh"
BUILD="${BUILD:-$ROOT/build-gpu}"
T="$OUT/step_probe.txt"
: > "$T"
T0=$(date +%s)
stage() { echo "$1" > "$OUT/status"; echo "-- $1 at $(( $(date +%s) - T0 )) s" >> "$T"; }
trap 'echo done > "$OUT/status"' EXIT
stage build
[ -f "$BUILD/build.ninja" ] || gpu_configure "$BUILD" > "$OUT/build.log" 2>&1
ninja -C "$BUILD" ferrite >> "$OUT/build.log" 2>&1
echo "build rc=$? in $(( $(date +%s) - T0 )) s" | tee -a "$T"
if [ -n "${TESTS:-}" ]; then
  stage tests
  ninja -C "$BUILD" cuda_test >> "$OUT/build.log" 2>&1
  "$BUILD/tests/cuda/cuda_test" --gtest_filter="$TESTS" > "$OUT/tests.log" 2>&1
  echo "tests rc=$?" | tee -a "$T"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$OUT/tests.log" | tee -a "$T"
fi
weights() {  # quant -> ferrite bench's weight flags
  case "$1" in
    -) ;;
    fp8 | gptq-int4 | awq-int4) echo "--quantization $1" ;;
    *) echo "--dummy-dtype $1" ;;
  esac
}
sweep_bench() {  # label model quant VAR=value...: ferrite bench (BENCH_BIN) at the SWEEP settings
  local label=$1 model=$2 quant=$3
  shift 3
  echo "== $model $quant $label" | tee -a "$T"
  env "$@" timeout "${RUN_TIMEOUT:-120}" "${BENCH_BIN:-$BUILD/ferrite}" bench --device cuda --dummy-weights \
    -r 1 --batch ${SWEEP_BATCHES:-128} --prompt-len "${SWEEP_PROMPT:-512}" --decode-prompt-len "${SWEEP_DECODE_PROMPT:-128}" \
    --gen-len 16 --max-num-seqs 128 --kv-cache-gib 8 --max-model-len 8192 \
    --model "$ROOT/configs/$model" $(weights "$quant") 2>&1 | grep -E "^(prefill|decode)|error" | tee -a "$T"
}
[ -n "${SWEEP:-}" ] && stage sweep
for spec in ${SWEEP:-}; do
  IFS=: read -r model quant setting <<< "$spec"
  var=${setting%%=*}
  for v in $(echo "${setting#*=}" | tr , ' '); do sweep_bench "$var=$v" "$model" "$quant" "$var=$v"; done
done
[ -n "${KNOBS:-}" ] && stage knobs
for spec in ${KNOBS:-}; do
  IFS=: read -r model quant list <<< "$spec"
  all=()
  for k in ${list//,/ }; do all+=("$k=1"); done
  sweep_bench defaults "$model" "$quant" STEP_PROBE_DEFAULTS=1
  sweep_bench all-on "$model" "$quant" "${all[@]}"
  for k in ${list//,/ }; do sweep_bench "$k=1" "$model" "$quant" "$k=1"; done
  sweep_bench defaults "$model" "$quant" STEP_PROBE_DEFAULTS=1
  sweep_bench all-on "$model" "$quant" "${all[@]}"
done
if [ -n "${OBJECTS_AB:-}" ]; then
  stage objects_ab
  pre=/tmp/ferrite-prebuilt
  ab=${AB_OBJECTS:-$ROOT/.gpu-prebuilt/ab_old.tar.xz}
  relink() {  # tarball -> $BUILD/ferrite linked with its objects over the prebuilt ones
    tar xJf "$1" -C "$pre" && touch "$pre"/objects/*.o && ninja -C "$BUILD" ferrite >> "$OUT/build.log" 2>&1
  }
  if [ -d "$pre/objects" ] && [ -f "$ab" ] && relink "$ab" && cp "$BUILD/ferrite" /tmp/ferrite-ab-old &&
    relink "$ROOT/.gpu-prebuilt/kernels.tar.xz"; then
    echo "objects_ab: old = $(tar tJf "$ab" | tr '\n' ' ')" | tee -a "$T"
    for spec in $OBJECTS_AB; do
      IFS=: read -r model quant <<< "$spec"
      for side in old new old new; do
        bin=$BUILD/ferrite
        [ $side = old ] && bin=/tmp/ferrite-ab-old
        BENCH_BIN=$bin sweep_bench "objects $side" "$model" "$quant"
      done
    done
  else
    echo "objects_ab: no prebuilt objects in $pre or no $ab (or the relink failed)" | tee -a "$T"
  fi
fi
[ -n "${PROFILE:-}" ] && stage profile
for spec in ${PROFILE:-}; do
  IFS=: read -r model quant batch <<< "$spec"
  echo "== profile $model $quant batch $batch (eager decode steps)" | tee -a "$T"
  FERRITE_PROFILE=1 FERRITE_CUDA_GRAPHS=0 timeout "${RUN_TIMEOUT:-120}" "$BUILD/ferrite" bench \
    --device cuda --dummy-weights -r 1 --batch "$batch" --prompt-len 16 --decode-prompt-len 128 \
    --gen-len 64 --max-num-seqs "$batch" --kv-cache-gib 4 --max-model-len 8192 \
    --model "$ROOT/configs/$model" $(weights "$quant") > "$OUT/profile-$model-$quant-$batch.txt" 2>&1
  grep -vE "^(prefill|mixed)" "$OUT/profile-$model-$quant-$batch.txt" | head -40 | tee -a "$T"
done
[ -n "${TIMELINE:-}" ] && stage timeline
for spec in ${TIMELINE:-}; do
  IFS=: read -r model quant batch setting <<< "$spec"
  setting=${setting:-FERRITE_TIMELINE_SETTING=none}
  tag="$model-$quant-$batch-${setting//[^A-Za-z0-9_]/}"
  ninja -C "$BUILD" kernel_timeline >> "$OUT/build.log" 2>&1 || { echo "no kernel_timeline" | tee -a "$T"; break; }
  echo "== timeline $model $quant batch $batch $setting (replayed decode graphs)" | tee -a "$T"
  for traced in 0 1; do
    env "$setting" $([ $traced = 1 ] && echo "CUDA_INJECTION64_PATH=$BUILD/bench/cuda/libkernel_timeline.so") \
      FERRITE_TIMELINE_OUT="$OUT/timeline-$tag.csv" timeout "${RUN_TIMEOUT:-120}" "$BUILD/ferrite" bench \
      --device cuda --dummy-weights -r 1 --batch "$batch" --prompt-len 16 \
      --gen-len 64 --max-num-seqs "$batch" --kv-cache-gib 4 --max-model-len 8192 \
      --decode-prompt-len "${TIMELINE_DECODE_PROMPT:-128}" \
      --model "$ROOT/configs/$model" $(weights "$quant") 2>&1 | grep -E "^decode|error|kernel_timeline" |
      sed "s/^/traced=$traced /" | tee -a "$T"
  done
  python3 "$ROOT/scripts/timeline_summary.py" "$OUT/timeline-$tag.csv" \
    --kernels "${TIMELINE_KERNELS:-16}" 2>&1 | tee -a "$T"
  xz -T0 "$OUT/timeline-$tag.csv"
done
NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
[ -n "${STEPS-qwen3-8b:gptq-int4:1}" ] && stage ncu
for spec in ${STEPS-qwen3-8b:gptq-int4:1}; do
  IFS=: read -r model quant batch <<< "$spec"
  tag="$model-$quant-$batch"
  echo "== ncu $model $quant batch $batch (one replayed decode step)" | tee -a "$T"
  FERRITE_NCU_DECODE_STEP=10 timeout "${NCU_TIMEOUT:-200}" "$NCU" --profile-from-start off --csv \
    --print-units base --log-file "$OUT/ncu-$tag.csv" --cache-control none --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
    "$BUILD/ferrite" bench --model "$ROOT/configs/$model" --dummy-weights --device cuda \
    --batch "$batch" --prompt-len 16 --decode-prompt-len 128 --gen-len 16 --max-num-seqs "$batch" \
    --kv-cache-gib 4 --max-model-len 8192 $(weights "$quant") > "$OUT/ncu-$tag.out" 2>&1
  echo "ncu rc=$?" | tee -a "$T"
  python3 "$ROOT/scripts/ncu_summary.py" "$OUT/ncu-$tag.csv" --launches "${LAUNCHES:-u4_|quant_gemv}" 2>&1 |
    head -${SUMMARY_LINES:-120} | tee -a "$T"
done
[ -n "${NCU_SOURCE:-}" ] && stage ncu_source
for spec in ${NCU_SOURCE:-}; do
  IFS=: read -r model quant batch <<< "$spec"
  tag="$model-$quant-$batch"
  echo "== ncu source $model $quant batch $batch: ${NCU_SOURCE_KERNELS:-attention}" | tee -a "$T"
  FERRITE_NCU_DECODE_STEP=10 timeout "${NCU_TIMEOUT:-300}" "$NCU" --profile-from-start off \
    --kernel-name "regex:${NCU_SOURCE_KERNELS:-attention}" -c "${NCU_SOURCE_COUNT:-3}" \
    --section SourceCounters --section WarpStateStats --section LaunchStats --section Occupancy \
    --section SpeedOfLight --import-source no --cache-control none --clock-control none -f \
    -o "$OUT/src-$tag" "$BUILD/ferrite" bench --model "$ROOT/configs/$model" --dummy-weights \
    --device cuda --batch "$batch" --prompt-len 16 --decode-prompt-len 128 --gen-len 16 \
    --max-num-seqs "$batch" --kv-cache-gib 4 --max-model-len 8192 $(weights "$quant") \
    > "$OUT/src-$tag.out" 2>&1
  echo "ncu rc=$?" | tee -a "$T"
  "$NCU" -i "$OUT/src-$tag.ncu-rep" --page source --csv --print-source sass \
    > "$OUT/src-$tag-sass.csv" 2>> "$OUT/src-$tag.out"
  "$NCU" -i "$OUT/src-$tag.ncu-rep" --page details --print-details all \
    > "$OUT/src-$tag-details.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|Warp Cycles Per Issued|Issue Slots Busy|Achieved Occupancy" \
    "$OUT/src-$tag-details.txt" | head -40 | tee -a "$T"
  python3 "$ROOT/scripts/ncu_source_summary.py" "$OUT/src-$tag-sass.csv" 2>&1 | head -260 | tee -a "$T"
  xz -T0 -f "$OUT/src-$tag-sass.csv"
  rm -f "$OUT/src-$tag.ncu-rep"
done
