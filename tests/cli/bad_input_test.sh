#!/usr/bin/env bash
# Bad input through the ferrite binary: every case must exit 1 with a clear
# "error:" line, within seconds (no crash, no hang, no signal exit).
# Usage: bad_input_test.sh FERRITE_BINARY SOURCE_DIR
set -uo pipefail
FERRITE="$1"
SRC="$2"
GOOD="$SRC/tests/models/qwen3"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
passed=0
failed=0

# expect NAME PATTERN -- COMMAND...: exit code 1, stderr matching PATTERN.
expect() {
  local name="$1" pattern="$2"
  shift 3
  local out rc
  out=$(timeout 60 "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -eq 1 ]] && grep -qiE "$pattern" <<<"$out"; then
    passed=$((passed + 1))
    echo "ok: $name"
  else
    failed=$((failed + 1))
    echo "FAIL: $name (exit $rc): $out"
  fi
}

# expect_ok NAME PATTERN -- COMMAND...: exit 0, stdout matching PATTERN.
expect_ok() {
  local name="$1" pattern="$2"
  shift 3
  local out rc
  out=$(timeout 120 "$@" 2>&1)
  rc=$?
  if [[ $rc -eq 0 ]] && grep -qE "$pattern" <<<"$out"; then
    passed=$((passed + 1))
    echo "ok: $name"
  else
    failed=$((failed + 1))
    echo "FAIL: $name (exit $rc): $out"
  fi
}

copy_model() {
  rm -rf "$WORK/$1"
  cp -r "$GOOD" "$WORK/$1"
  echo "$WORK/$1"
}

GEN=("$FERRITE" generate --prompt-ids 1,2,3 --max-tokens 2 --model)

expect "missing model folder" "not ?found|cannot open|no such" -- "${GEN[@]}" "$WORK/nowhere"

m=$(copy_model no_weights); rm "$m/model.safetensors"
expect "missing safetensors" "not ?found|model.safetensors" -- "${GEN[@]}" "$m"

m=$(copy_model truncated); truncate -s 1000 "$m/model.safetensors"
expect "truncated safetensors" "DataLoss|truncat|offset|beyond|past" -- "${GEN[@]}" "$m"

m=$(copy_model tiny); printf 'abc' > "$m/model.safetensors"
expect "file shorter than its header length" "DataLoss|short|header" -- "${GEN[@]}" "$m"

m=$(copy_model lying); python3 - "$m/model.safetensors" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[0:8] = struct.pack('<Q', 1 << 40)
open(p, 'wb').write(b)
PY
expect "header that lies about its length" "DataLoss|header" -- "${GEN[@]}" "$m"

m=$(copy_model garbage_header); python3 - "$m/model.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[8:20] = b'{{{{{{{{{{{{'
open(p, 'wb').write(b)
PY
expect "corrupt header JSON" "DataLoss|json|parse" -- "${GEN[@]}" "$m"

m=$(copy_model bad_json); echo '{"model_type": "qwen3", ' > "$m/config.json"
expect "config.json that is not JSON" "InvalidArgument|json|parse" -- "${GEN[@]}" "$m"

m=$(copy_model wrong_shape); python3 - "$m/config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p)); c["intermediate_size"] = 96
json.dump(c, open(p, "w"))
PY
expect "config disagrees with tensor shapes" "shape|config.json implies" -- "${GEN[@]}" "$m"

m=$(copy_model unknown_arch); python3 - "$m/config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p)); c["model_type"] = "mamba9"
json.dump(c, open(p, "w"))
PY
expect "unknown architecture" "Unsupported.*mamba9" -- "${GEN[@]}" "$m"

m=$(copy_model neg_size); python3 - "$m/config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p)); c["hidden_size"] = -64
json.dump(c, open(p, "w"))
PY
expect "negative size in config" "hidden_size" -- "${GEN[@]}" "$m"

expect "token id outside the vocabulary" "vocabulary" -- \
  "$FERRITE" generate --model "$GOOD" --prompt-ids 1,2,512 --max-tokens 2
expect "malformed prompt ids" "prompt-ids|token ids" -- \
  "$FERRITE" generate --model "$GOOD" --prompt-ids 1,x,3 --max-tokens 2
expect "prompt longer than the context" "context" -- \
  "$FERRITE" generate --model "$GOOD" --prompt-ids 1,2,3,4,5 --max-model-len 4 --max-tokens 2
expect "bad sampling flags" "out of range" -- \
  "$FERRITE" generate --model "$GOOD" --prompt-ids 1,2 --top-p 0
expect "unknown device" "device" -- \
  "$FERRITE" generate --model "$GOOD" --prompt-ids 1,2 --device tpu

# The good paths of the same commands still work.
expect_ok "info prints the plan" "causal_paged_attention +-> cpu.fast" -- \
  "$FERRITE" info --model "$GOOD"
expect_ok "info of a real config without allocating" "weights: 15\.[0-9]+ GiB" -- \
  "$FERRITE" info --model "$SRC/configs/qwen3-8b" --dummy-weights
expect_ok "generate --json" '"output_tokens":\[[0-9]+,[0-9]+\]' -- \
  "$FERRITE" generate --model "$GOOD" --prompt-ids 1,2,3 --max-tokens 2 --ignore-eos --json

expect_ok "create-model writes a model with a tokenizer" "wrote" -- \
  "$FERRITE" create-model --out "$WORK/created"
expect_ok "generate --prompt prints text" '"text":' -- \
  "$FERRITE" generate --model "$WORK/created" --prompt "Hello world" --max-tokens 4 --json
expect_ok "generate --chat renders the chat template" '"prompt_tokens":[0-9]+' -- \
  "$FERRITE" generate --model "$WORK/created" --chat "Hi" --system "Be brief" --max-tokens 4 --json
expect "generate --prompt without a tokenizer" "tokenizer" -- \
  "$FERRITE" generate --model "$GOOD" --prompt "Hello" --max-tokens 2
expect "two prompt kinds at once" "exactly one" -- \
  "$FERRITE" generate --model "$GOOD" --prompt-ids 1 --prompt "Hello"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
