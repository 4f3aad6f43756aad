#!/usr/bin/env bash
# Soak benchmark of `ferrite serve` (docs/soak.md): starts the server on
# 127.0.0.1 with a tiny model and a small KV pool, drives it with mixed,
# partly hostile load, checks RSS, KV pages, errors and SIGTERM shutdown.
#
#   scripts/soak.sh [--duration SECONDS] [--concurrency 64] [--binary PATH]
#                   [--model DIR] [--out summary.json] [--ci] [more: docs/soak.md]
#
#   --ci            a 2-minute run (--duration 120 unless given)
#   --duration 3600 the one-hour record
#
# Exit 0: every check passed; 1: a check failed; 2: usage / setup error.
# The server is always stopped (trap), also when this script is interrupted.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

BINARY="${FERRITE_BIN:-$ROOT/build/ferrite}"
DURATION=""
CI=0
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
    --binary=*) BINARY="${1#*=}"; shift ;;
    --duration) DURATION="${2:?--duration needs seconds}"; shift 2 ;;
    --duration=*) DURATION="${1#*=}"; shift ;;
    --ci) CI=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
[ -n "$DURATION" ] || { [ $CI = 1 ] && DURATION=120 || DURATION=600; }
case "$DURATION" in ''|*[!0-9]*) echo "soak.sh: --duration must be whole seconds" >&2; exit 2 ;; esac

NODE="$(command -v node || true)"
[ -n "$NODE" ] || { echo "soak.sh: node is required (scripts/setup.sh)" >&2; exit 2; }
[ -x "$BINARY" ] || { echo "soak.sh: no ferrite binary at $BINARY (scripts/build.sh, or --binary PATH)" >&2; exit 2; }
BINARY="$(cd "$(dirname "$BINARY")" && pwd)/$(basename "$BINARY")"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ferrite-soak.XXXXXX")"
NODE_PID=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$NODE_PID" ] && kill -0 "$NODE_PID" 2>/dev/null; then
    kill -TERM "$NODE_PID" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$NODE_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$NODE_PID" 2>/dev/null
  fi
  # The server, if the driver could not stop it: only the pid it recorded,
  # and only while that pid is still this binary.
  if [ -f "$WORK/server.pid" ]; then
    local pid
    pid="$(cat "$WORK/server.pid")"
    if [ -n "$pid" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$BINARY" ]; then
      echo "soak.sh: stopping leftover server pid $pid" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  if [ "${SOAK_KEEP_WORK:-0}" = 1 ]; then echo "soak.sh: work folder kept: $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Watchdog: the driver bounds every phase itself; this is the backstop
# (load + 60 s deadline + settle + 30 s shutdown + startup).
BUDGET=$((DURATION + 200))
CI_ARGS=()
[ $CI = 1 ] && CI_ARGS=(--ci)

"$NODE" "$ROOT/tests/soak/soak.mjs" --binary "$BINARY" --duration "$DURATION" --workdir "$WORK" \
  "${CI_ARGS[@]}" "${ARGS[@]}" &
NODE_PID=$!
START=$SECONDS
while kill -0 "$NODE_PID" 2>/dev/null; do
  if [ $((SECONDS - START)) -gt "$BUDGET" ]; then
    echo "soak.sh: FAILED: the soak driver ran past ${BUDGET} s (watchdog); stopping it" >&2
    kill -TERM "$NODE_PID" 2>/dev/null
    wait "$NODE_PID" 2>/dev/null
    NODE_PID=""
    SOAK_KEEP_WORK=1
    exit 1
  fi
  sleep 1
done
wait "$NODE_PID"
RC=$?
NODE_PID=""
if [ $RC -ne 0 ] && [ -f "$WORK/server.log" ]; then
  echo "--- last lines of the server log ---" >&2
  tail -n 20 "$WORK/server.log" >&2
fi
exit $RC
