#!/usr/bin/env bash
# Every family's tiny checkpoint through the `ferrite generate` command line:
# the greedy tokens printed with --json equal the goldens transformers made,
# for the short and the long (300-token) prompt, with both CPU provider sets.
# Usage: generate_goldens_test.sh FERRITE_BINARY SOURCE_DIR
set -uo pipefail
FERRITE="$1"
SRC="$2"
passed=0
failed=0
for dir in "$SRC"/tests/models/*/; do
  [[ -f "$dir/golden.json" ]] || continue
  family=$(basename "$dir")
  for which in short long; do
    read -r ids expected count < <(python3 - "$dir/golden.json" "$which" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["prompts"][sys.argv[2]]
print(",".join(map(str, p["ids"])), ",".join(map(str, p["greedy_tokens"])), len(p["greedy_tokens"]))
PY
)
    for providers in fast reference; do
      out=$(timeout 300 "$FERRITE" generate --model "$dir" --prompt-ids "$ids" --max-tokens "$count" \
              --ignore-eos --providers "$providers" --json 2>&1)
      got=$(python3 -c 'import json,sys; print(",".join(map(str, json.loads(sys.stdin.read())["output_tokens"])))' <<<"$out" 2>/dev/null)
      if [[ "$got" == "$expected" ]]; then
        passed=$((passed + 1))
      else
        failed=$((failed + 1))
        echo "FAIL: $family $which ($providers): got [$got], want [$expected]: $out"
      fi
    done
  done
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
