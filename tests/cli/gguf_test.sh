#!/usr/bin/env bash
# GGUF files through the ferrite binary: good files generate (raw ids, a
# prompt through the GGUF tokenizer, a chat through its template) and report
# in `info`; bad ones exit 1 with a clear "error:" line before any weight is
# allocated. Usage: gguf_test.sh FERRITE_BINARY SOURCE_DIR
set -uo pipefail
FERRITE="$1"
G="$2/tests/models/gguf"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
passed=0
failed=0

check() {  # check NAME WANT_RC PATTERN -- COMMAND...
  local name="$1" want="$2" pattern="$3"
  shift 4
  local out rc
  out=$(timeout 120 "$@" 2>&1)
  rc=$?
  if [[ $rc -eq $want ]] && grep -qiE "$pattern" <<<"$out"; then
    passed=$((passed + 1)); echo "ok: $name"
  else
    failed=$((failed + 1)); echo "FAIL: $name (exit $rc): $out"
  fi
}

for f in qwen3-f16 llama-f16 qwen3_next-f16 qwen3_5-f16; do
  check "$f ids" 0 "generated=4" -- "$FERRITE" generate --model "$G/$f.gguf" --prompt-ids 5,6,7 --max-tokens 4 --ignore-eos
  check "$f prompt" 0 "prompt=" -- "$FERRITE" generate --model "$G/$f.gguf" --prompt "Hello world" --max-tokens 3 --ignore-eos
done
check "chat" 0 "prompt=" -- "$FERRITE" generate --model "$G/qwen3-f16.gguf" --chat "hi" --max-tokens 3 --ignore-eos
check "info" 0 "qwen3_5_moe_text" -- "$FERRITE" info --model "$G/qwen3_5_moe-f16.gguf"
check "split" 0 "generated=2" -- "$FERRITE" generate --model "$G/qwen3-split-00001-of-00003.gguf" --prompt-ids 5,6 --max-tokens 2 --ignore-eos

head -c 200000 "$G/qwen3-f16.gguf" > "$WORK/truncated.gguf"
check "truncated" 1 "^error:.*(runs past|truncated)" -- "$FERRITE" generate --model "$WORK/truncated.gguf" --prompt-ids 5 --max-tokens 1
sed 's/qwen3\.block_count/qwen3.block_cxunt/' "$G/qwen3-f16.gguf" > "$WORK/nokey.gguf"
check "missing metadata" 1 "^error:.*qwen3.block_count" -- "$FERRITE" generate --model "$WORK/nokey.gguf" --prompt-ids 5 --max-tokens 1
sed 's/\x05\x00\x00\x00\x00\x00\x00\x00qwen3/\x05\x00\x00\x00\x00\x00\x00\x00qwen9/' "$G/qwen3-f16.gguf" > "$WORK/arch.gguf"
check "unknown architecture" 1 "^error:.*architecture 'qwen9'" -- "$FERRITE" generate --model "$WORK/arch.gguf" --prompt-ids 5 --max-tokens 1
printf 'GGUF' > "$WORK/short.gguf"
check "not a gguf" 1 "^error:" -- "$FERRITE" generate --model "$WORK/short.gguf" --prompt-ids 5 --max-tokens 1

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
