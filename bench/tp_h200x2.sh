#!/usr/bin/env bash
# The two-GPU runs of issue 19 (tensor parallelism), in one command on the
# nvidia-h200-x2 machine: build (sm_90a), the NCCL communicator and the TP
# goldens on CUDA, then the benchmark rows of the issue, each at TP = 2 and
# (where it fits one GPU) TP = 1 on the same build, dummy bf16 weights:
#
#   Qwen3-8B         TP 1 vs 2, decode at batch 1, 32, 128 (+ 4,096-token prefill)
#   Llama-3.1-70B    TP 2, decode at batch 1 and 64 (141 GB bf16: TP 1 does not fit)
#   Qwen3-30B-A3B    TP 1 vs 2, decode at batch 1, 32, 128
#   serving          ferrite serve --tensor-parallel-size 2, bench-serve at 64 streams
#
# Targets (issue 19): Qwen3-8B TP 2 >= 1.8x TP 1 at batch 128 and >= 1.4x at
# batch 1; Llama-3.1-70B TP 2 batch-1 decode >= 70 % of the two cards'
# combined roofline (bench prints the per-step weight bytes: the roofline is
# bytes / (2 x 4.8 TB/s)).
#
#   bench/tp_h200x2.sh             # summary.txt and logs in $OUT (./out)
#   TP_ONLY=bench bench/tp_h200x2.sh   # skip the tests
#
# Until the CUDA pieces of docs/tensor_parallel.md ("CUDA: what is left")
# exist, the planner refuses --tensor-parallel-size > 1 on cuda and every TP 2
# row below fails at once with that error (the TP 1 rows still run): this
# script is the list of runs to make, ready for the session that has both
# the code and the machine. NCCL_NVLS_ENABLE=0 (NVLink multicast off), as
# the communicator sets it too. Needs the .deb folder of scripts/gpu_run.sh
# (carry [".deb"]) for the server's dev packages.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/out}"
LOGS="${LOGS:-/tmp/ferrite-tp-logs}"
mkdir -p "$OUT" "$LOGS"
BUILD="${BUILD:-$ROOT/build-gpu}"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
log() { echo "$*" | tee -a "$SUMMARY"; }
export NCCL_NVLS_ENABLE=0
. "$ROOT/scripts/gpu_env.sh"  # the carried dev packages (.deb/)
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
nvidia-smi topo -m 2>&1 | head -6 >> "$SUMMARY"

T0=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRITE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DFERRITE_BUILD_BENCH=OFF > "$OUT/build.log" 2>&1
ninja -C "$BUILD" -k 0 ferrite communicator_test tp_golden_test tp_plan_test >> "$OUT/build.log" 2>&1
log "build: rc=$? in $(( $(date +%s) - T0 )) s"
grep -E "error|FAILED" "$OUT/build.log" | head -20 | tee -a "$SUMMARY"
F="$BUILD/ferrite"

if [ "${TP_ONLY:-}" != bench ]; then
  for t in communicator_test tp_plan_test tp_golden_test; do
    bin=$(find "$BUILD/tests" -name "$t" -type f | head -1)
    [ -x "$bin" ] || { log "$t: not built"; continue; }
    timeout 600 "$bin" > "$LOGS/$t.log" 2>&1
    log "$t (cpu ranks): rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$LOGS/$t.log" | tr '\n' ' ')"
  done
  # The same goldens with --device cuda at TP 2 (greedy tokens of every
  # family, through `ferrite generate`; compare with the CPU's).
  for fam in $(grep -E '^[a-z0-9_]+$' "$ROOT/tests/models/families.txt"); do
    ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$ROOT/tests/models/$fam/golden.json'))['prompts']['short']['ids'])))")
    want=$(python3 -c "import json;print(','.join(map(str,json.load(open('$ROOT/tests/models/$fam/golden.json'))['prompts']['short']['greedy_tokens'])))")
    n=$(echo "$want" | tr ',' '\n' | wc -l)
    got=$(timeout 120 "$F" generate "$ROOT/tests/models/$fam" --device cuda --dtype float32 \
      --tensor-parallel-size 2 --prompt-ids "$ids" --max-tokens "$n" 2> "$LOGS/gen-$fam.err" | tail -1)
    [ "$got" = "$want" ] && log "golden $fam cuda tp2: ok" \
      || log "golden $fam cuda tp2: FAIL got '$got' want '$want' ($(tail -1 "$LOGS/gen-$fam.err"))"
  done
fi

# bench MODEL TP BATCHES...: one `ferrite bench` row set.
bench() {
  local m=$1 tp=$2
  shift 2
  local TB=$(date +%s)
  log "== bench $m --tensor-parallel-size $tp --batch $*"
  timeout 900 "$F" bench --model "$ROOT/configs/$m" --dummy-weights --device cuda \
    --tensor-parallel-size "$tp" --batch "$@" --prompt-len 4096 --decode-prompt-len 128 \
    --gen-len 64 --max-num-seqs 128 --kv-cache-gib 16 --json > "$LOGS/bench-$m-tp$tp.json" \
    2> "$LOGS/bench-$m-tp$tp.err"
  local rc=$?
  tail -3 "$LOGS/bench-$m-tp$tp.err" | tee -a "$SUMMARY"
  python3 - "$LOGS/bench-$m-tp$tp.json" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("  no JSON:", e); sys.exit()
for k in ("prefill", "decode"):
    v = d.get(k)
    for r in (v if isinstance(v, list) else [v] if v else []):
        print("  %s %s" % (k, {x: r[x] for x in r if not isinstance(r[x], (list, dict))}))
PY
  log "bench $m tp $tp: rc=$rc in $(( $(date +%s) - TB )) s"
}

bench qwen3-8b 1 1 32 128
bench qwen3-8b 2 1 32 128
bench llama-3.1-70b 2 1 64
bench qwen3-30b-a3b 1 1 32 128
bench qwen3-30b-a3b 2 1 32 128

# Serving at 64 streams: ferrite serve --tensor-parallel-size 2 on Qwen3-8B
# (dummy weights, create-model's byte-level tokenizer beside the real config).
SM="${TP_SERVE_MODEL:-qwen3-8b}"
SDIR="$LOGS/serve-model-$SM"
rm -rf "$SDIR"
"$F" create-model --out "$SDIR" --vocab 961 > "$LOGS/serve-create.log" 2>&1
python3 - "$ROOT/configs/$SM/config.json" "$SDIR/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))
dst = c.get("text_config", c)
for k in ("vocab_size", "bos_token_id", "eos_token_id"):
    dst[k] = t[k]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
for tp in 1 2; do
  port=$((8300 + RANDOM % 500))
  "$F" serve --model "$SDIR" --dummy-weights --device cuda --port "$port" \
    --tensor-parallel-size "$tp" --max-model-len 4096 --max-num-seqs 64 \
    --max-num-batched-tokens 4096 --kv-cache-gib 16 > "$LOGS/serve-tp$tp.log" 2>&1 &
  spid=$!
  for _ in $(seq 180); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
    kill -0 "$spid" 2> /dev/null || break
    sleep 1
  done
  log "== serve tp $tp ($(head -1 "$LOGS/serve-tp$tp.log"))"
  timeout 600 "$F" bench-serve --url "http://127.0.0.1:$port" --input-len 512 --output-len 128 \
    --num-prompts 256 --concurrency 64 --json-file "$LOGS/serve-bench-tp$tp.json" \
    > "$LOGS/serve-bench-tp$tp.log" 2>&1
  log "bench-serve tp $tp: rc=$?"
  grep -E "^==|ttft|tpot|tokens/s|throughput" "$LOGS/serve-bench-tp$tp.log" | tee -a "$SUMMARY"
  kill "$spid" 2> /dev/null
  wait "$spid" 2> /dev/null
done
tar czf "$OUT/logs.tgz" -C "$LOGS" . 2> /dev/null
log "done in $(( $(date +%s) - T0 )) s"
