#!/usr/bin/env bash
# `ferrite perplexity`: the default model's perplexity on its held-out
# excerpt equals the figure transformers measured in the training run
# (models/ferrite-tiny/perplexity.json, same windows), over the same tokens;
# the figure does not depend on how windows are batched; bad input fails
# with a message.
# Usage: perplexity_test.sh FERRITE_BINARY SOURCE_DIR
set -uo pipefail
FERRITE="$1"
SRC="$2"
MODEL="$SRC/models/ferrite-tiny"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
passed=0
failed=0
check() {  # check NAME CONDITION-EXIT-CODE DETAILS
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); echo "ok: $1"
  else failed=$((failed + 1)); echo "FAIL: $1: $3"; fi
}
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1" 2>/dev/null; }

# 1. Golden: transformers' perplexity (f32) on the excerpt, ctx 256, stride 128.
read -r want want_tokens < <(python3 - "$MODEL/perplexity.json" <<'PY'
import json, sys
e = [e for e in json.load(open(sys.argv[1]))["perplexity"]
     if e["text"] == "heldout_excerpt" and e["ctx"] == 256 and e["stride"] == 128][0]
print(e["ppl_transformers_f32"], e["tokens_scored"])
PY
)
out=$(timeout 600 "$FERRITE" perplexity --model "$MODEL" --text-file "$MODEL/heldout_excerpt.txt" \
        --ctx-size 256 --stride 128 --json 2>&1)
got=$(field perplexity <<<"$out")
tokens=$(field tokens_evaluated <<<"$out")
python3 -c "import sys; g, w = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(g - w) > 1e-3 * w)" \
  "${got:-nan}" "$want"
check "ferrite-tiny held-out perplexity $got vs transformers $want" $? "$out"
[[ "$tokens" == "$want_tokens" ]]
check "tokens evaluated $tokens vs $want_tokens" $? "$out"

# 2. The same tokens as the training run's tokenizer (the `tokenizers` library).
"$FERRITE" tokenize --tokenizer "$MODEL" --text-file "$MODEL/heldout_excerpt.txt" --json \
  > "$WORK/ids.json" 2>&1
python3 - "$WORK/ids.json" "$MODEL/perplexity.json" <<'PY'
import json, sys
got = json.load(open(sys.argv[1]))["ids"]
want = [e for e in json.load(open(sys.argv[2]))["perplexity"] if "token_ids" in e][0]["token_ids"]
sys.exit(got != want)
PY
check "excerpt tokenized as by the tokenizers library" $? "$(head -c 300 "$WORK/ids.json")"

# 3. Batching does not change the figure (a random model: fast).
"$FERRITE" create-model --out "$WORK/rand" >/dev/null || exit 1
head -c 4000 "$MODEL/heldout_excerpt.txt" > "$WORK/text.txt"
a=$("$FERRITE" perplexity --model "$WORK/rand" --text-file "$WORK/text.txt" -c 96 --stride 40 \
      --max-num-seqs 1 --json 2>&1)
b=$("$FERRITE" perplexity --model "$WORK/rand" --text-file "$WORK/text.txt" -c 96 --stride 40 \
      --max-num-seqs 16 --max-num-batched-tokens 37 --json 2>&1)
pa=$(field perplexity <<<"$a")
pb=$(field perplexity <<<"$b")
python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(not (a > 1 and abs(a - b) < 1e-9 * a))" \
  "${pa:-nan}" "${pb:-nan}"
check "one window at a time = 16 windows per step ($pa, $pb)" $? "$a / $b"
ta=$(field tokens_evaluated <<<"$a")
tt=$(field text_tokens <<<"$a")
[[ -n "$ta" && "$ta" -eq $((tt - 1)) ]]
check "every token but the first is scored once ($ta of $tt)" $? "$a"
# Non-overlapping windows (stride = ctx): the first token of each window has
# no context and is not scored.
c=$("$FERRITE" perplexity --model "$WORK/rand" --text-file "$WORK/text.txt" -c 96 --stride 96 --json 2>&1)
cw=$(field windows <<<"$c")
[[ -n "$cw" && "$(field tokens_evaluated <<<"$c")" == "$((tt - cw))" ]]
check "stride = ctx scores all but each window's first token" $? "$c"
d=$("$FERRITE" perplexity --model "$WORK/rand" --text-file "$WORK/text.txt" -c 96 --stride 40 \
      --max-windows 2 --json 2>&1)
[[ "$(field windows <<<"$d")" == "2" && "$(field tokens_evaluated <<<"$d")" == "135" ]]
check "--max-windows 2 scores 95 + 40 tokens" $? "$d"

# 4. Bad input: a message and exit code 1.
expect_fail() {  # NAME PATTERN -- COMMAND...
  local name="$1" pattern="$2"
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  [[ $rc -ne 0 ]] && grep -qi -- "$pattern" <<<"$out"
  check "$name" $? "exit $rc: $out"
}
expect_fail "missing text file" "cannot open" -- \
  "$FERRITE" perplexity --model "$WORK/rand" --text-file "$WORK/none.txt"
expect_fail "stride above ctx" "stride" -- \
  "$FERRITE" perplexity --model "$WORK/rand" --text-file "$WORK/text.txt" -c 64 --stride 65
expect_fail "ctx above the model length" "max-model-len" -- \
  "$FERRITE" perplexity --model "$WORK/rand" --text-file "$WORK/text.txt" -c 8192
printf 'a' > "$WORK/one.txt"
expect_fail "a one-token text" "fewer than 2 tokens" -- \
  "$FERRITE" perplexity --model "$WORK/rand" --text-file "$WORK/one.txt"
expect_fail "a folder without tokenizer" "tokenizer" -- \
  "$FERRITE" perplexity --model "$WORK" --text-file "$WORK/text.txt"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
