#!/usr/bin/env bash
# `ferrite run`: one-shot, interactive chat with history and /clear, and
# Ctrl-C (SIGINT) stopping a reply without quitting.
# Usage: run_test.sh FERRITE_BINARY
set -uo pipefail
trap '' PIPE  # a dead reader of the FIFO must fail the test, not kill it
FERRITE="$1"
WORK=$(mktemp -d)
PID=""
cleanup() {
  [[ -n "$PID" ]] && kill -9 "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
passed=0
failed=0
check() {  # check NAME CONDITION-EXIT-CODE DETAILS
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); echo "ok: $1"
  else failed=$((failed + 1)); echo "FAIL: $1: $3"; fi
}

"$FERRITE" create-model --out "$WORK/small" >/dev/null || exit 1
# A slower model, so that a reply is still running when SIGINT arrives.
"$FERRITE" create-model --out "$WORK/slow" --hidden 512 --layers 8 --heads 8 --kv-heads 4 \
  --head-dim 64 --intermediate 1536 >/dev/null || exit 1

# One-shot: prints a reply and exits 0.
out=$(timeout 60 "$FERRITE" run --model "$WORK/small" --max-tokens 8 "Hello" 2>&1)
rc=$?
check "one-shot reply" $(( rc != 0 || ${#out} == 0 )) "exit $rc, output '$out'"

# Interactive: two turns, /clear, /exit.
out=$(printf 'Hello\nAgain\n/clear\nThird\n/exit\n' |
      timeout 60 "$FERRITE" run --model "$WORK/small" --max-tokens 4 2>&1)
rc=$?
prompts=$(grep -o '>>> ' <<<"$out" | wc -l)
check "interactive turns" $(( rc != 0 || prompts < 4 )) "exit $rc, $prompts prompts: $out"
grep -q "conversation cleared" <<<"$out"
check "/clear" $? "$out"

# Ctrl-C during a long reply stops it; the session goes on.
mkfifo "$WORK/in"
# (Not under `timeout`, which would take the SIGINT itself; the trap and a
# watchdog bound the run instead.)
"$FERRITE" run --model "$WORK/slow" --max-tokens 4000 --ignore-eos --threads 1 \
  <"$WORK/in" >"$WORK/out" 2>&1 &
PID=$!
( sleep 120; kill -9 "$PID" ) >/dev/null 2>&1 &
WATCHDOG=$!
exec 3>"$WORK/in"
echo "Tell me a long story" >&3
# Interrupt once the reply is streaming (the first prompt is echoed as ">>> "
# and the reply follows it), not while the model is still loading.
for _ in $(seq 600); do
  [[ $(tr -d '\000' <"$WORK/out" | sed -n 's/^>>> //p' | head -1 | wc -c) -gt 20 ]] && break
  sleep 0.1
done
kill -INT "$PID"
sleep 1
echo "/exit" >&3
exec 3>&-
wait "$PID"
rc=$?
PID=""
pkill -P "$WATCHDOG" 2>/dev/null
kill "$WATCHDOG" 2>/dev/null
out=$(tr -d '\000' <"$WORK/out")
grep -q "\[stopped\]" <<<"$out"
check "Ctrl-C stops the reply" $? "$out"
prompts=$(grep -o '>>> ' <<<"$out" | wc -l)
# A second prompt after the stopped reply, then a clean /exit.
check "the session survives Ctrl-C" $(( rc != 0 || prompts < 2 )) "exit $rc, $prompts prompts"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
