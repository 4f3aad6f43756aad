#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (docs/hardening.md), one after
# another (or two at a time with --jobs 2), each growing a merged corpus under
# fuzz-corpus/<target>/ (git-ignored; seeded from tests/fuzz/corpus and
# tests/fuzz/regressions), and prints the executions of each target (from
# libFuzzer's -print_final_stats) and the total.
#
# Usage: scripts/fuzz.sh --hours N [--jobs 1|2] [targets...]
#        scripts/fuzz.sh --seconds-per-target S [targets...]
#   targets: safetensors gguf model_config tokenizer_json tokenizer_text
#            chat_template request_parser stream_text (default: all built)
#   --no-build  use the fuzzers already in build-hardening
#   --no-merge  skip the corpus minimization (-merge=1) after each run
#   --ignore-leaks T[,T...]  run these targets with -detect_leaks=0 (a known,
#               reported leak would otherwise stop them on the first input)
# Findings (crash-*, timeout-*, oom-*, leak-*) land in fuzz-artifacts/<target>/;
# the exit status is 1 when there was any. Logs: fuzz-logs/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${FERRITE_HARDENING_DIR:-build-hardening}
HOURS=""
PER_TARGET=""
JOBS=1
BUILD_FIRST=1
MERGE=1
IGNORE_LEAKS=","
TARGETS=()
while (($#)); do
  case $1 in
    --hours) HOURS=$2; shift 2 ;;
    --seconds-per-target) PER_TARGET=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --no-build) BUILD_FIRST=0; shift ;;
    --no-merge) MERGE=0; shift ;;
    --ignore-leaks) IGNORE_LEAKS=",$2,"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) TARGETS+=("${1#fuzz_}"); shift ;;
  esac
done
if [[ -z $HOURS && -z $PER_TARGET ]]; then
  echo "fuzz.sh: give --hours N or --seconds-per-target S" >&2
  exit 2
fi
[[ $JOBS == 1 || $JOBS == 2 ]] || { echo "fuzz.sh: --jobs is 1 or 2" >&2; exit 2; }

if ((BUILD_FIRST)); then scripts/test_hardening.sh --build-fuzzers; fi
if ((${#TARGETS[@]} == 0)); then
  for f in "$BUILD"/tests/fuzz/fuzz_*; do
    if [[ -x $f && -f $f ]]; then f=$(basename "$f"); TARGETS+=("${f#fuzz_}"); fi
  done
fi
((${#TARGETS[@]})) || { echo "fuzz.sh: no fuzz targets in $BUILD/tests/fuzz" >&2; exit 1; }
for t in "${TARGETS[@]}"; do
  [[ -x $BUILD/tests/fuzz/fuzz_$t ]] || { echo "fuzz.sh: $BUILD/tests/fuzz/fuzz_$t not built" >&2; exit 1; }
done

if [[ -z $PER_TARGET ]]; then
  # Wall time split evenly; with two at a time each target gets twice as long.
  PER_TARGET=$(python3 -c "import math; print(max(10, int(float('$HOURS') * 3600 * $JOBS / ${#TARGETS[@]})))")
fi

# Per-target input size limits (the seeds' sizes with room to grow) and
# dictionaries.
max_len() {
  case $1 in
    tokenizer_json) echo 131072 ;;
    chat_template) echo 16384 ;;
    safetensors|gguf|model_config|request_parser) echo 8192 ;;
    *) echo 4096 ;;
  esac
}
dict() {
  case $1 in
    safetensors|model_config|tokenizer_json|request_parser) echo tests/fuzz/json.dict ;;
    gguf) echo tests/fuzz/gguf.dict ;;
    chat_template) echo tests/fuzz/chat_template.dict ;;
    *) echo "" ;;
  esac
}

mkdir -p fuzz-corpus fuzz-artifacts fuzz-logs
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() {
  local t=$1 bin=$BUILD/tests/fuzz/fuzz_$1 corpus=fuzz-corpus/$1 log=fuzz-logs/$1.log
  mkdir -p "$corpus" "fuzz-artifacts/$t"
  local seeds=()
  for d in tests/fuzz/corpus/$t tests/fuzz/regressions/$t; do [[ -d $d ]] && seeds+=("$d"); done
  local d
  d=$(dict "$t")
  local rc=0 leaks=1
  [[ $IGNORE_LEAKS == *",$t,"* ]] && leaks=0
  # libFuzzer stops at a finding: the target is restarted (corpus kept) until
  # its time is used up, so one finding does not end its run. Executions add
  # up over the restarts.
  # -timeout: an input running 30 s (wall clock, on a shared machine) is a
  # hang (a finding); -rss_limit_mb: a process above 2 GB is a memory blow-up
  # (a finding); -malloc_limit_mb: so is a single allocation of that size.
  local start end left execs=0 n
  start=$(date +%s)
  end=$((start + PER_TARGET))
  : >"$log"
  while :; do
    left=$((end - $(date +%s)))
    ((left >= 5)) || break
    local one=0
    "$bin" -max_total_time="$left" -print_final_stats=1 -rss_limit_mb=2048 \
      -malloc_limit_mb=2048 -timeout=30 -max_len="$(max_len "$t")" ${d:+-dict=$d} -detect_leaks=$leaks \
      -artifact_prefix="fuzz-artifacts/$t/" "$corpus" "${seeds[@]}" >"$log.run" 2>&1 || one=$?
    n=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log.run" | tail -n 1)
    execs=$((execs + ${n:-0}))
    cat "$log.run" >>"$log"
    echo "fuzz.sh: run ended (exit $one), $execs executions so far" >>"$log"
    ((one == 0)) && break
    rc=$one
    # A finding in the initial corpus would come back at every start: stop.
    if ! grep -q 'INITED' "$log.run" || grep -q 'in the initial corpus' "$log.run"; then break; fi
  done
  rm -f "$log.run"
  echo "$execs" >"fuzz-logs/$t.execs"
  if ((MERGE)); then
    # Keep the corpus minimal: a set cover of the coverage it reached.
    rm -rf "$corpus.merged" && mkdir -p "$corpus.merged"
    if "$bin" -merge=1 -rss_limit_mb=2048 -timeout=30 -detect_leaks=$leaks -max_len="$(max_len "$t")" \
         "$corpus.merged" "$corpus" >>"$log" 2>&1; then
      rm -rf "$corpus" && mv "$corpus.merged" "$corpus"
    else
      rm -rf "$corpus.merged"
    fi
  fi
  echo "$rc" >"fuzz-logs/$t.rc"
}

echo "fuzz.sh: ${#TARGETS[@]} targets, ${PER_TARGET} s each, $JOBS at a time"
T0=$(date +%s)
for ((i = 0; i < ${#TARGETS[@]}; i += JOBS)); do
  for t in "${TARGETS[@]:i:JOBS}"; do
    echo "fuzz.sh: $(date -u +%H:%M:%S) $t started"
    run_one "$t" &
  done
  wait
done

total=0
failed=0
printf '%-16s %14s %8s %8s  %s\n' target executions exec/s corpus result
# exec/s: libFuzzer's average of the last (re)start.
for t in "${TARGETS[@]}"; do
  log=fuzz-logs/$t.log
  execs=$(cat "fuzz-logs/$t.execs" 2>/dev/null || echo 0)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
  total=$((total + execs))
  rc=$(cat "fuzz-logs/$t.rc" 2>/dev/null || echo 1)
  result=ok
  if ((rc != 0)); then
    result="FINDING (exit $rc): $(ls fuzz-artifacts/$t/ 2>/dev/null | tr '\n' ' ') see $log"
    failed=1
  fi
  printf '%-16s %14s %8s %8s  %s\n' "$t" "$execs" "${speed:-?}" "$(ls fuzz-corpus/$t | wc -l)" "$result"
done
printf '%-16s %14s\n' total "$total"
echo "fuzz.sh: $(($(date +%s) - T0)) s wall"
exit $failed
