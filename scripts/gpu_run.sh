#!/usr/bin/env bash
# The whole GPU run in one command, on the GPU machine (H200, CUDA 13):
# build for sm_90a, run the GPU tests (CUDA goldens, graph replay,
# conformance of every CUDA provider against the CPU reference), then the
# benchmark table (decode at batch 1/8/32/128 and a 4,096-token prefill for
# the real configs, dummy bf16 weights). Logs and a summary go to $OUT
# (default ./out).
#
#   scripts/gpu_run.sh [--no-bench] [--bench-only] [models...]
#
# FERRITE_BENCH_FLAGS: extra flags of this tree's benchmarks (e.g. "-r 1"
# when device time is short; the baseline gets none: older trees may not
# know them).
#
# A/B against another version in the same run: FERRITE_BASELINE=DIR (a
# source tree, e.g. `git archive <commit> CMakeLists.txt src | tar x -C
# DIR`) is built beside the main build (ferrite only) and benchmarked with
# the same flags right after each model; the summary ends with both tables
# side by side.
#
# Dev packages the machine lacks (PCRE2, cpp-httplib) travel as .deb files
# in .deb/ (scripts/gpu_env.sh unpacks them into a private prefix).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/out}"
LOGS="${LOGS:-/tmp/ferrite-gpu-logs}"  # full logs; $OUT gets summary.txt + logs.tgz
mkdir -p "$OUT" "$LOGS"
BUILD="${BUILD:-$ROOT/build-gpu}"
RUN_TESTS=1
RUN_BENCH=1
MODELS=()
for a in "$@"; do
  case "$a" in
    --no-bench) RUN_BENCH=0 ;;
    --bench-only) RUN_TESTS=0 ;;
    *) MODELS+=("$a") ;;
  esac
done
[ ${#MODELS[@]} -eq 0 ] && MODELS=(qwen3-0.6b qwen3-8b llama-3.1-8b qwen3-30b-a3b qwen3.5-9b)
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
log() { echo "$*" | tee -a "$SUMMARY"; }

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > "$LOGS/gpu.txt" 2>&1
log "gpu: $(tail -1 "$LOGS/gpu.txt")"

. "$ROOT/scripts/gpu_env.sh"

# --- build -----------------------------------------------------------------
T0=$(date +%s)
gpu_configure "$BUILD" > "$LOGS/build.log" 2>&1
BASE="${FERRITE_BASELINE:-}"
BASE_BUILD="$BUILD-baseline"
if [ -n "$BASE" ]; then
  ( ROOT="$BASE" gpu_configure "$BASE_BUILD" -DFERRITE_BUILD_TESTS=OFF \
      > "$LOGS/build-baseline.log" 2>&1 &&
    ninja -C "$BASE_BUILD" ferrite >> "$LOGS/build-baseline.log" 2>&1 ) &
  BASE_PID=$!
fi
ninja -C "$BUILD" -k 0 cuda_test conformance_test engine_test ferrite quant_gemm_bench >> "$LOGS/build.log" 2>&1
log "build: rc=$? in $(( $(date +%s) - T0 )) s"
if [ -n "$BASE" ]; then
  wait "$BASE_PID"
  log "baseline build ($BASE): rc=$? in $(( $(date +%s) - T0 )) s"
  grep -E "error|FAILED" "$LOGS/build-baseline.log" | head -10 | tee -a "$SUMMARY"
fi
grep -E "error|FAILED" "$LOGS/build.log" | head -20 | tee -a "$SUMMARY"

# --- tests -----------------------------------------------------------------
if [ $RUN_TESTS -eq 1 ]; then
  TT=$(date +%s)
  if [ -x "$BUILD/tests/cuda/cuda_test" ]; then
    "$BUILD/tests/cuda/cuda_test" > "$LOGS/cuda_test.log" 2>&1
    log "cuda_test: rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' "$LOGS/cuda_test.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \] [A-Z]" "$LOGS/cuda_test.log" | head -20 | tee -a "$SUMMARY"
  fi
  if [ -x "$BUILD/tests/engine/engine_test" ]; then
    # Hybrid prefix caching with state snapshots on the GPU: same tokens, and
    # logprobs within 1e-3, with the cache on as off.
    FERRITE_TEST_DEVICE=cuda "$BUILD/tests/engine/engine_test" --gtest_filter='*HybridPrefixCache*' \
      > "$LOGS/engine_cuda.log" 2>&1
    log "engine_test (hybrid prefix cache on cuda): rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$LOGS/engine_cuda.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \] [A-Z]|Failure|Expected|Which is|token [0-9]" "$LOGS/engine_cuda.log" | head -30 | tee -a "$SUMMARY"
  fi
  if [ -x "$BUILD/tests/conformance/conformance_test" ]; then
    "$BUILD/tests/conformance/conformance_test" --gtest_filter='*cuda*:*Sampler*' > "$LOGS/conformance.log" 2>&1
    log "conformance (cuda providers): rc=$? (tests took $(( $(date +%s) - TT )) s) $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$LOGS/conformance.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \] [A-Z]" "$LOGS/conformance.log" | head -20 | tee -a "$SUMMARY"
  fi
fi

# --- benchmarks ------------------------------------------------------------
if [ $RUN_BENCH -eq 1 ] && [ -x "$BUILD/ferrite" ]; then
  for m in "${MODELS[@]}"; do
    log "== bench $m"
    TB=$(date +%s)
    timeout 200 "$BUILD/ferrite" bench --model "$ROOT/configs/$m" --dummy-weights --device cuda \
      --batch 1 2 4 8 32 128 --prompt-len 4096 --decode-prompt-len 128 --gen-len 64 \
      --max-num-seqs 128 --kv-cache-gib 24 ${FERRITE_BENCH_FLAGS:-} > "$LOGS/bench-$m.log" 2>&1
    rc=$?
    cat "$LOGS/bench-$m.log" | grep -vE "^\s*$" | tail -8 | tee -a "$SUMMARY"
    log "bench $m: rc=$rc in $(( $(date +%s) - TB )) s"
    if [ -n "$BASE" ] && [ -x "$BASE_BUILD/ferrite" ]; then
      timeout 200 "$BASE_BUILD/ferrite" bench --model "$ROOT/configs/$m" --dummy-weights \
        --device cuda --batch 1 2 4 8 32 128 --prompt-len 4096 --decode-prompt-len 128 \
        --gen-len 64 --max-num-seqs 128 --kv-cache-gib 24 > "$LOGS/bench-$m-baseline.log" 2>&1
      rc=$?
      grep -E "^(prefill|decode)" "$LOGS/bench-$m-baseline.log" | sed 's/^/baseline: /' | tee -a "$SUMMARY"
      log "bench $m (baseline): rc=$rc"
    fi
  done
  if [ -n "$BASE" ]; then
    log "== A/B: tokens/s, this tree vs baseline ($BASE)"
    python3 - "$LOGS" "${MODELS[@]}" <<'PY' 2>&1 | tee -a "$SUMMARY"
import re, sys
logs, models = sys.argv[1], sys.argv[2:]
def rows(path):
    out = {}
    try:
        for line in open(path):
            m = re.match(r"(prefill\s+\d+ tokens|decode\s+batch\s+\d+):\s+([\d.]+) tokens/s", line)
            if m: out[re.sub(r"\s+", " ", m.group(1))] = float(m.group(2))
    except OSError:
        pass
    return out
print(f"{'model':<16} {'row':<22} {'this':>10} {'baseline':>10} {'ratio':>7}")
for m in models:
    a, b = rows(f"{logs}/bench-{m}.log"), rows(f"{logs}/bench-{m}-baseline.log")
    for k in a:
        if k in b and b[k] > 0:
            print(f"{m:<16} {k:<22} {a[k]:>10.1f} {b[k]:>10.1f} {a[k] / b[k]:>7.3f}")
PY
  fi
fi
# Where the GPU time goes (eager, FERRITE_PROFILE=1; FERRITE_PROFILE_RUN=1).
if [ "${FERRITE_PROFILE_RUN:-0}" = 1 ] && [ -x "$BUILD/ferrite" ]; then
  # model, decode batch, prefill prompt, generated tokens
  IFS=';' read -r -a SPECS <<< "${FERRITE_PROFILE_SPECS:-qwen3-0.6b 1 16 32;qwen3-8b 1 16 32;qwen3-8b 128 16 16;qwen3-8b 1 4096 2}"
  for spec in "${SPECS[@]}"; do
    set -- $spec
    log "== profile $1 batch $2 prompt $3 (eager, graphs off)"
    FERRITE_PROFILE=1 FERRITE_CUDA_GRAPHS=0 timeout 120 "$BUILD/ferrite" bench \
      --model "$ROOT/configs/$1" --dummy-weights --device cuda --batch "$2" --prompt-len "$3" \
      --decode-prompt-len 128 --gen-len "$4" --max-num-seqs 128 --kv-cache-gib 24 \
      > "$LOGS/profile-$1-$2-$3.log" 2>&1
    grep -E "prefill|decode|ms " "$LOGS/profile-$1-$2-$3.log" | head -16 | tee -a "$SUMMARY"
  done
fi

# Per-kernel GPU times of one replayed decode step under ncu (FERRITE_NCU=1;
# FERRITE_NCU_SPECS="model batch [bench flags...];..."): the 10th graph replay
# runs inside a profiler range (FERRITE_NCU_DECODE_STEP), kernels are
# serialised by ncu. Kernels matching FERRITE_NCU_LAUNCHES (a regex, default
# quant_gemv) are also listed launch by launch (grid, registers, issue).
if [ "${FERRITE_NCU:-0}" = 1 ] && [ -x "$BUILD/ferrite" ]; then
  NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
  IFS=';' read -r -a SPECS <<< "${FERRITE_NCU_SPECS:-qwen3-8b 1;qwen3-0.6b 1}"
  for spec in "${SPECS[@]}"; do
    set -- $spec
    tag="$1-$2"
    [ $# -gt 2 ] && tag="$tag-$(echo "${*:3}" | tr -c 'a-zA-Z0-9_\n' '_' | sed 's/^_*//;s/_*$//')"
    log "== ncu $spec (one replayed decode step)"
    TN=$(date +%s)
    FERRITE_NCU_DECODE_STEP=10 timeout 240 "$NCU" --profile-from-start off --csv --print-units base --log-file "$LOGS/ncu-$tag.csv" \
      --cache-control none --clock-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
      "$BUILD/ferrite" bench --model "$ROOT/configs/$1" --dummy-weights --device cuda \
      --batch "$2" --prompt-len 16 --decode-prompt-len 128 --gen-len 16 --max-num-seqs 128 \
      --kv-cache-gib 24 "${@:3}" > "$LOGS/ncu-$tag.out" 2> "$LOGS/ncu-$tag.err"
    log "ncu rc=$? in $(( $(date +%s) - TN )) s"
    python3 "$ROOT/scripts/ncu_summary.py" "$LOGS/ncu-$tag.csv" --launches "${FERRITE_NCU_LAUNCHES:-quant_gemv}" 2>&1 | head -400 | tee -a "$SUMMARY"
    grep -E "decode" "$LOGS/ncu-$tag.out" | head -3 | tee -a "$SUMMARY"
    tail -3 "$LOGS/ncu-$tag.err" | tee -a "$SUMMARY"
  done
fi

# Variants (tuning variables, docs/tuning.md) against the default run above
# (FERRITE_AB=1; FERRITE_AB_VARIANTS, FERRITE_AB_MODELS).
if [ $RUN_BENCH -eq 1 ] && [ "${FERRITE_AB:-0}" = 1 ] && [ -x "$BUILD/ferrite" ]; then
  for am in ${FERRITE_AB_MODELS:-qwen3-8b}; do
    for v in ${FERRITE_AB_VARIANTS:-FERRITE_CUDA_GRAPHS=0}; do
      log "== variant $v ($am)"
      env "$v" timeout 120 "$BUILD/ferrite" bench --model "$ROOT/configs/$am" --dummy-weights \
        --device cuda --batch 1 8 128 --prompt-len 1024 --decode-prompt-len 128 --gen-len 32 \
        --max-num-seqs 128 --kv-cache-gib 24 > "$LOGS/variant-$v-$am.log" 2>&1
      grep -E "prefill|decode" "$LOGS/variant-$v-$am.log" | tee -a "$SUMMARY"
    done
  done
fi
# Prefix caching of a hybrid model (FERRITE_PREFIX_BENCH=1; issue 16): serve
# FERRITE_PREFIX_MODEL (qwen3.5-9b) with dummy weights on cuda, without and
# with --enable-prefix-cache, and run bench-serve with a shared system prompt
# (FERRITE_PREFIX_LEN 4096 tokens) + 128-token user turns. Targets: warm TTFT
# <= 15 % of cold (concurrency 1), >= 2x throughput at 32 streams. The model
# folder is the real config beside create-model's byte-level tokenizer (its
# vocabulary: 961 ids), which serving text needs.
if [ "${FERRITE_PREFIX_BENCH:-0}" = 1 ] && [ -x "$BUILD/ferrite" ]; then
  PM="${FERRITE_PREFIX_MODEL:-qwen3.5-9b}"
  PLEN="${FERRITE_PREFIX_LEN:-4096}"
  PDIR="$LOGS/prefix-model-$PM"
  rm -rf "$PDIR"
  "$BUILD/ferrite" create-model --out "$PDIR" --vocab 961 > "$LOGS/prefix-create.log" 2>&1
  python3 - "$ROOT/configs/$PM/config.json" "$PDIR/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))
dst = c.get("text_config", c)
for k in ("vocab_size", "bos_token_id", "eos_token_id"):
    dst[k] = t[k]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
  for mode in cold warm; do
    flags=()
    [ "$mode" = warm ] && flags=(--enable-prefix-cache)
    port=$((8300 + RANDOM % 500))
    "$BUILD/ferrite" serve --model "$PDIR" --dummy-weights --device cuda --port "$port" \
      --max-model-len 8192 --max-num-seqs 64 --max-num-batched-tokens 4096 --kv-cache-gib 24 \
      "${flags[@]}" > "$LOGS/prefix-serve-$mode.log" 2>&1 &
    spid=$!
    for _ in $(seq 120); do
      curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
      sleep 1
    done
    log "== prefix bench $PM $mode ($(head -1 "$LOGS/prefix-serve-$mode.log"))"
    timeout 600 "$BUILD/ferrite" bench-serve --url "http://127.0.0.1:$port" \
      --shared-prefix-len "$PLEN" --input-len 128 --output-len 64 --num-prompts 64 \
      --concurrency 1 32 --json-file "$LOGS/prefix-bench-$mode.json" \
      > "$LOGS/prefix-bench-$mode.log" 2>&1
    log "bench-serve rc=$?"
    grep -E "^==|ttft|tokens/s" "$LOGS/prefix-bench-$mode.log" | tee -a "$SUMMARY"
    curl -s "http://127.0.0.1:$port/metrics" | grep -E "^ferrite_prefix_cache" | tee -a "$SUMMARY"
    kill "$spid"
    wait "$spid" 2> /dev/null
  done
  python3 - "$LOGS/prefix-bench-cold.json" "$LOGS/prefix-bench-warm.json" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, sys
cold, warm = (json.load(open(p))["runs"] for p in sys.argv[1:3])
for c, w in zip(cold, warm):
    print(f"{c['label']}: ttft warm/cold {w['ttft_ms']['mean'] / c['ttft_ms']['mean']:.3f}, "
          f"throughput warm/cold {w['total_token_throughput'] / c['total_token_throughput']:.2f}x")
PY
fi
cp "$SUMMARY" "$LOGS/" && tar czf "$OUT/logs.tgz" -C "$LOGS" .
exit 0
