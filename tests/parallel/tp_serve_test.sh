#!/usr/bin/env bash
# `ferrite serve --tensor-parallel-size 2` on CPU (one scheduler, the
# executor runs the two ranks as threads): greedy completions of the default
# model, two at a time, give the TP = 1 server's text.
#   tp_serve_test.sh FERRITE SOURCE_DIR
set -u
B=$1
MODEL=$2/models/ferrite-tiny
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null; rm -rf "$TMP"' EXIT
fail() {
  { echo "FAIL: $*"; for f in "$TMP"/*.log; do echo "== $f"; tail -20 "$f"; done; } >&2
  kill $(jobs -p) 2> /dev/null
  exit 1
}

# Answers of one server: two prompts sent at once (one batch), greedy.
answers() {
  local tp=$1 port=$((20000 + RANDOM % 20000))
  "$B" serve "$MODEL" --port "$port" --tensor-parallel-size "$tp" --threads 2 --max-num-seqs 4 \
    --max-model-len 512 > "$TMP/serve$tp.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
    kill -0 $pid 2> /dev/null || fail "serve --tensor-parallel-size $tp exited"
    sleep 0.2
  done
  for i in 1 2; do
    curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"Once upon a time $i\", \"max_tokens\": 24, \"temperature\": 0}" \
      > "$TMP/answer$tp.$i.json" &
  done
  wait $(jobs -p | grep -v "^$pid$") 2> /dev/null
  kill $pid
  wait $pid 2> /dev/null
  for i in 1 2; do
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['choices'][0]['text'])" \
      "$TMP/answer$tp.$i.json" || fail "no answer $i from --tensor-parallel-size $tp"
  done
}

one=$(answers 1) || exit 1
two=$(answers 2) || exit 1
[ -n "$one" ] || fail "empty answers"
[ "$one" = "$two" ] || fail "TP=2 answers differ from TP=1:
--- TP=1
$one
--- TP=2
$two"
echo "PASS: serve --tensor-parallel-size 2 answers as TP=1:"
echo "$two"
