#!/usr/bin/env bash
# `ferrite run` with piped stdin: one-shot, chat with history and /clear,
# no prompt and no colour in the output, [MODEL] [PROMPT] positionals, and
# Ctrl-C (SIGINT) stopping a reply without quitting. The terminal side
# (editing, history, multi-line, /help) is run_tty_test.py.
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

# Positional model and prompt (as `ollama run MODEL PROMPT`).
out=$(timeout 60 "$FERRITE" run "$WORK/small" --max-tokens 4 Hello there 2>&1)
rc=$?
check "positional model and prompt" $(( rc != 0 || $(grep -c 'tok/s' <<<"$out") != 1 )) "exit $rc: $out"

# Piped chat: two turns, /clear, /help, /exit; no prompt, no escape codes.
out=$(printf 'Hello\nAgain\n/clear\n/?\nThird\n/exit\n' |
      timeout 60 "$FERRITE" run --model "$WORK/small" --max-tokens 4 2>&1)
rc=$?
replies=$(grep -c 'tok/s' <<<"$out")
check "piped turns" $(( rc != 0 || replies != 3 )) "exit $rc, $replies replies: $out"
grep -q "conversation cleared" <<<"$out"
check "/clear" $? "$out"
grep -q "/bye" <<<"$out"
check "/? prints the commands" $? "$out"
! grep -q '>>> ' <<<"$out"
check "no prompt on piped stdin" $? "$out"
! grep -q $'\x1b\[' <<<"$out"
check "no colour off a terminal" $? "$out"

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
# Interrupt once the reply is streaming (no prompt on piped stdin: the
# first bytes of the output are the reply), not while the model is loading.
for _ in $(seq 600); do
  [[ $(tr -d '\000' <"$WORK/out" | wc -c) -gt 20 ]] && break
  sleep 0.1
done
kill -INT "$PID"
sleep 1
echo "/?" >&3
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
# The session reads on after the stopped reply, then exits cleanly.
grep -q "/bye" <<<"$out"
check "the session survives Ctrl-C" $(( rc != 0 || $? != 0 )) "exit $rc: $out"

# Two Ctrl-C in a row mid-reply: out at once (130), no hang.
rm -f "$WORK/in"; mkfifo "$WORK/in"
"$FERRITE" run --model "$WORK/slow" --max-tokens 4000 --ignore-eos --threads 1 \
  <"$WORK/in" >"$WORK/out2" 2>&1 &
PID=$!
exec 3>"$WORK/in"
echo "Tell me a long story" >&3
for _ in $(seq 600); do
  [[ $(tr -d '\000' <"$WORK/out2" | wc -c) -gt 20 ]] && break
  sleep 0.1
done
kill -INT "$PID"; sleep 0.05; kill -INT "$PID"
for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
gone=$(kill -0 "$PID" 2>/dev/null && echo 0 || echo 1)
kill -9 "$PID" 2>/dev/null
wait "$PID"
rc=$?
PID=""
exec 3>&-
check "two Ctrl-C exit at once" $(( gone != 1 || rc != 130 )) "exit $rc, gone $gone"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
