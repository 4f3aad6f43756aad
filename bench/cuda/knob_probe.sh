#!/usr/bin/env bash
# Decides off-by-default decode knobs in one device call: builds ferrite and cuda_test, runs
# the knobs' bitwise tests, then ferrite bench (b1 and b8 decode, random weights) on one model
# with the defaults, with every knob on, with each knob alone, and the defaults and all-on once
# more (two samples of the pair that matters most, alternated):
#   KNOBS="FERRITE_CUDA_A FERRITE_CUDA_B ..."   the knobs (each set to 1)
#   MODEL=qwen3.5-35b-a3b WEIGHTS="--quantization gptq-int4"   (configs/MODEL; or --dummy-dtype q4_k_m)
#   TESTS='*CudaGatedDelta*:...'   cuda_test's filter (empty: no tests)
#   bash bench/cuda/knob_probe.sh
# Run bash scripts/gpu_prebuild.sh first and carry [".deb", ".gpu-prebuilt"]. Writes
# $OUT/knob_probe.txt as it goes (the stage in $OUT/status: build, tests, bench, done), so it
# can run detached (setsid nohup ... &) while later calls poll it: a device call lasts at most
# 10 minutes and this takes ~3 minutes to build plus ~25 s a bench run of a 35B model.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT"
. "$ROOT/scripts/gpu_env.sh"
BUILD="${BUILD:-$ROOT/build-gpu}"
T="$OUT/knob_probe.txt"
: > "$T"
T0=$(date +%s)
stage() { echo "$1" > "$OUT/status"; echo "-- $1 at $(( $(date +%s) - T0 )) s" >> "$T"; }
stage build
[ -f "$BUILD/build.ninja" ] || gpu_configure "$BUILD" > "$OUT/configure.log" 2>&1
targets=(ferrite)
[ -n "${TESTS-}" ] && targets+=(cuda_test)
ninja -C "$BUILD" "${targets[@]}" > "$OUT/build.log" 2>&1
echo "build rc=$?" >> "$T"
if [ -n "${TESTS-}" ]; then
  stage tests
  "$BUILD/tests/cuda/cuda_test" --gtest_filter="$TESTS" > "$OUT/tests.log" 2>&1
  echo "tests rc=$?" >> "$T"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$OUT/tests.log" >> "$T"
fi
stage bench
run() {  # label, then VAR=value settings
  local label=$1
  shift
  echo "== $label" >> "$T"
  env "$@" timeout "${RUN_TIMEOUT:-150}" "$BUILD/ferrite" bench --device cuda --dummy-weights -r 1 \
    --batch ${BATCHES:-1 8} --prompt-len 128 --decode-prompt-len 128 --gen-len 16 \
    --max-num-seqs 128 --kv-cache-gib 8 --max-model-len 8192 \
    --model "$ROOT/configs/${MODEL:-qwen3.5-35b-a3b}" ${WEIGHTS---quantization gptq-int4} 2>&1 |
    grep -E "^decode|rror" >> "$T"
}
all=()
for k in ${KNOBS:?KNOBS: the knobs to measure}; do all+=("$k=1"); done
run defaults KNOB_PROBE_DEFAULTS=1
run all-on "${all[@]}"
for k in ${KNOBS}; do run "$k=1" "$k=1"; done
run defaults KNOB_PROBE_DEFAULTS=1
run all-on "${all[@]}"
stage done
