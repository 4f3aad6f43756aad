#!/usr/bin/env bash
# The GPU session in two calls on one warm machine (scripts/gpu_carry.sh first; device
# `carry: [".gpu", ".deb"]`):
#   prepare: the llama.cpp build and the twin weights start in the background (setsid, nice 19;
#            bench/gguf_vs_llama_h200.sh --prepare), then scripts/gpu_run.sh --no-bench (build
#            and every GPU test, the opt-in paths' golden cases included), then with OPTIN=1
#            bench/optin_ab_h200.sh (the opt-in A/B). About 6 minutes, 9 with OPTIN.
#   measure: with OPTIN=1 bench/optin_ab_h200.sh, then bench/gguf_vs_llama_h200.sh (dense twins;
#            PEER_MOE=1 adds the Qwen3-30B-A3B one, about 4 more minutes), then with
#            TABLE="models..." bench/quant_table_h200.sh on them; PICK=1 first exports the
#            settings the prepare call's A/B favours (scripts/optin_pick.py). About 6 minutes.
# Logs and tables under $OUT.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT" /tmp/peer /tmp/peer-out
START=$(date +%s)
# Seconds left of this call's CALL_BUDGET (default 585: the device's 600 s a command, less
# the copy back), at least 30.
left() { local l=$(( ${CALL_BUDGET:-585} - ($(date +%s) - START) )); echo $(( l < 30 ? 30 : l )); }
# The opt-in A/B, its table kept on the machine for a later call's PICK.
optin() {
  timeout "$(left)" bash bench/optin_ab_h200.sh > "$OUT/optin.log" 2>&1
  cp "$OUT/optin_ab.txt" /tmp/ferrite-optin.txt 2>/dev/null
}
case "${1:-}" in
  prepare)
    if [ ! -f /tmp/peer/prep-started ]; then
      touch /tmp/peer/prep-started
      OUT=/tmp/peer-out setsid nohup nice -n 19 bash bench/gguf_vs_llama_h200.sh --prepare \
        > /tmp/peer-prep.log 2>&1 < /dev/null &
    fi
    timeout 560 bash scripts/gpu_run.sh --no-bench > "$OUT/gpu_run.log" 2>&1
    echo "gpu_run rc=$?" >> "$OUT/gpu_run.log"
    cp /tmp/ferrite-gpu-logs/*.log "$OUT/" 2>/dev/null
    tail -1 /tmp/peer/build.log > "$OUT/peer_state.txt" 2>&1
    cat "$OUT/summary.txt" 2>/dev/null
    if [ "${OPTIN:-0}" = 1 ]; then
      optin
      cat "$OUT/optin_ab.txt" 2>/dev/null
    fi
    ;;
  measure)
    [ "${OPTIN:-0}" = 1 ] && optin
    # PICK=1: the settings the opt-in A/B favours (scripts/optin_pick.py) for what follows.
    if [ "${PICK:-0}" = 1 ] && [ -f /tmp/ferrite-optin.txt ]; then
      python3 scripts/optin_pick.py /tmp/ferrite-optin.txt > "$OUT/picked.sh"
      echo "picked: $(tr '\n' ' ' < "$OUT/picked.sh")"
      . "$OUT/picked.sh"
    fi
    for i in $(seq 1 60); do [ -f /tmp/peer/prepared ] && break; sleep 5; done
    timeout "${SIDE_TIMEOUT:-300}" bash bench/gguf_vs_llama_h200.sh > "$OUT/side.log" 2>&1
    cat "$OUT/optin_ab.txt" "$OUT/peer_side_by_side.txt" 2>/dev/null
    if [ -n "${TABLE:-}" ]; then
      FERRITE_BENCH_FLAGS="${FERRITE_BENCH_FLAGS:--r 1}" timeout "$(left)" \
        bash bench/quant_table_h200.sh $TABLE > "$OUT/table.log" 2>&1
      cat "$OUT/quant_table.txt" 2>/dev/null
    fi
    ;;
  *)
    echo "usage: scripts/gpu_session.sh prepare|measure" >&2
    exit 2
    ;;
esac
