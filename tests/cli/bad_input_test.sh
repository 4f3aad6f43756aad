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

# Hostile config values (tests/formats/data/hostile): refused by name before
# anything is allocated. Each of these crashed, aborted or ran before.
set_field() {  # set_field CONFIG_JSON PYTHON_ASSIGNMENT
  python3 - "$1" "$2" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p)); exec(sys.argv[2])
json.dump(c, open(p, "w"))
PY
}
m=$(copy_model rotary_4); set_field "$m/config.json" 'c["partial_rotary_factor"] = 4.0'
expect "partial_rotary_factor 4.0 (rope past the head)" "InvalidArgument.*'partial_rotary_factor'.*4\.0" -- \
  "${GEN[@]}" "$m" --providers reference
expect "partial_rotary_factor 4.0, fast providers" "'partial_rotary_factor'" -- "${GEN[@]}" "$m"
m=$(copy_model rotary_neg); set_field "$m/config.json" 'c["partial_rotary_factor"] = -0.5'
expect "partial_rotary_factor -0.5" "InvalidArgument.*'partial_rotary_factor'.*-0\.5" -- \
  "${GEN[@]}" "$m" --providers reference
m=$(copy_model layers_2e32); set_field "$m/config.json" 'c["num_hidden_layers"] = 4294967296'
expect "num_hidden_layers 2^32" "InvalidArgument.*'num_hidden_layers'.*4294967296" -- "${GEN[@]}" "$m"
m=$(copy_model theta_neg); set_field "$m/config.json" 'c["rope_parameters"]["rope_theta"] = -1e308'
expect "rope_theta -1e308" "InvalidArgument.*rope_theta.*-1e\+308" -- "${GEN[@]}" "$m"
HOSTILE="$SRC/tests/formats/data/hostile"
for f in text_config_layers_2pow32 text_config_experts_huge text_config_linear_key_heads_huge; do
  mkdir -p "$WORK/$f"; cp "$HOSTILE/config/$f.json" "$WORK/$f/config.json"
  expect "text_config wrapper: $f" "InvalidArgument.*'text_config\." -- \
    "$FERRITE" info --model "$WORK/$f" --dummy-weights
done
# Every hostile config of the seed corpus: exit 1 with an error, no signal.
for f in "$HOSTILE"/config/*.json; do
  name=$(basename "$f" .json)
  mkdir -p "$WORK/cfg_$name"; cp "$f" "$WORK/cfg_$name/config.json"
  expect "hostile config $name" "error: (InvalidArgument|Unsupported)" -- \
    "$FERRITE" info --model "$WORK/cfg_$name" --dummy-weights
done
# Every hostile safetensors file as the checkpoint: a clear error, no signal.
for f in "$HOSTILE"/safetensors/*.safetensors; do
  name=$(basename "$f" .safetensors)
  m=$(copy_model "st_$name"); cp "$f" "$m/model.safetensors"
  expect "hostile safetensors $name" "error: (DataLoss|Unsupported|InvalidArgument)" -- "${GEN[@]}" "$m"
done
# A header length that is not a multiple of 8 is legal: the misaligned
# tensors are copied to aligned memory and the model generates as before.
m=$(copy_model misaligned); python3 - "$m/model.safetensors" <<'PY'
import struct, sys
p = sys.argv[1]
b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
header = b[8:8 + n] + b' ' * ((1 - n) % 8)
open(p, 'wb').write(struct.pack('<Q', len(header)) + header + b[8 + n:])
PY
tokens_of() { grep -oE '"output_tokens":\[[0-9,]+' | cut -d'[' -f2; }
want=$("$FERRITE" generate --model "$GOOD" --prompt-ids 1,2,3 --max-tokens 4 --ignore-eos --json \
  2>/dev/null | tokens_of)
for providers in reference fast; do
  expect_ok "misaligned safetensors header, $providers providers ($want)" \
    "\"output_tokens\":\[$want\]" -- \
    "$FERRITE" generate --model "$m" --prompt-ids 1,2,3 --max-tokens 4 --ignore-eos --json \
    --providers "$providers"
done

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

# First contact (issue 18): each common mistake gets its own message.
SERVE=("$FERRITE" serve --port 0)
expect "a path that does not exist" "does not exist" -- "${SERVE[@]}" "$WORK/no/such/dir"
expect "a Hugging Face id" "Hugging Face.*does not download.*local folder" -- \
  "${SERVE[@]}" Qwen/Qwen3-0.6B
printf 'GGUF' >"$WORK/model.gguf"
expect "a .gguf file" "GGUF" -- "${SERVE[@]}" "$WORK/model.gguf"
expect "a file instead of a folder" "is a file" -- "${SERVE[@]}" "$GOOD/config.json"
expect "a folder without config.json" "no config.json" -- "${SERVE[@]}" "$WORK"
expect "run with a hub id" "Hugging Face" -- "$FERRITE" run Qwen/Qwen3-0.6B "Hello"
if ! "$FERRITE" info --model "$GOOD" --device cuda >/dev/null 2>&1; then
  expect "--device cuda without a GPU" "device cuda.*(no CUDA backend|no usable NVIDIA GPU).*--device cpu" -- \
    "${SERVE[@]}" -m "$WORK/created" --device cuda
fi
# Capacity: the context is the model's; beyond it is an error, as is a KV
# cache that cannot hold one sequence of it.
# Past the model's context only with the explicit opt-in, named in the
# error, for serve, run, generate and bench alike.
LONG="longer than the model's context of 4096.*--allow-long-max-model-len"
expect "serve --max-model-len above the model's" "$LONG" -- \
  "${SERVE[@]}" "$WORK/created" --max-model-len 100000
expect "run --max-model-len above the model's" "$LONG" -- \
  "$FERRITE" run "$WORK/created" "Hello" --max-model-len 5000
expect "generate --max-model-len above the model's" "$LONG" -- \
  "$FERRITE" generate "$GOOD" --prompt-ids 1,2 --max-model-len 5000
expect "bench past the model's context" "longer than the model's 4096.*--allow-long-max-model-len" -- \
  "$FERRITE" bench "$GOOD" --prompt-len 5000
expect "bench past --max-model-len" "need a context of 5001 tokens; --max-model-len is 1024" -- \
  "$FERRITE" bench "$GOOD" --prompt-len 5000 --max-model-len 1024
# With it: a 4150-token prompt in a 4200-token context, and a warning.
LONG_IDS=$(seq -s, 1 4150 | awk -v RS=, -v ORS=, '{print $1 % 200 + 1}' | sed 's/,$//')
expect_ok "--allow-long-max-model-len: a prompt past the model's context" \
  "generated=2" -- "$FERRITE" generate "$GOOD" --prompt-ids "$LONG_IDS" --max-tokens 2 \
  --max-model-len 4200 --allow-long-max-model-len
expect_ok "--allow-long-max-model-len warns" "warning: --max-model-len 4200 is longer than the model's" -- \
  "$FERRITE" generate "$GOOD" --prompt-ids 1,2 --max-tokens 2 --max-model-len 4200 \
  --allow-long-max-model-len
expect "a KV cache too small for one sequence" "less than one sequence.*--max-model-len [0-9]+ or less.*--kv-cache-gib" -- \
  "${SERVE[@]}" "$WORK/created" --kv-cache-gib 0.0001
expect "--gpu-memory-utilization out of range" "gpu-memory-utilization" -- \
  "${SERVE[@]}" "$WORK/created" --gpu-memory-utilization 1.5
expect "--generation-config that does not exist" "generation-config" -- \
  "${SERVE[@]}" "$WORK/created" --generation-config "$WORK/nowhere"
echo '{"temperature": "hot"}' >"$WORK/created/generation_config.json"
expect "a bad generation_config.json" "temperature" -- "${SERVE[@]}" "$WORK/created"
rm "$WORK/created/generation_config.json"
expect "--chat-template file that does not exist" "chat-template" -- \
  "${SERVE[@]}" "$WORK/created" --chat-template "$WORK/nowhere.jinja"
# Conventions: --version, defaults in --help, positional model or -m.
expect_ok "--version" "^ferrite [0-9]+\.[0-9]+" -- "$FERRITE" --version
expect_ok "--help shows defaults" "device TEXT=cpu" -- "$FERRITE" serve --help
expect_ok "--help: vLLM's flag names" "enable-prefix-caching" -- \
  "$FERRITE" serve --help
expect_ok "generate takes the model as a positional" '"output_tokens":' -- \
  "$FERRITE" generate "$GOOD" --prompt-ids 1,2 --max-tokens 2 --json
expect_ok "generate takes -m and --seed" '"output_tokens":' -- \
  "$FERRITE" generate -m "$GOOD" --prompt-ids 1,2 --max-tokens 2 --temperature 1 --seed 7 --json

# Without a model, info plans the embedded one (as serve and run use it),
# and --help says so; run's sampler seed is random unless given.
expect_ok "info without a model: the embedded model" "model: qwen3 .*vocab 8192" -- "$FERRITE" info
expect_ok "serve --help names the default model" "default: the embedded model, ferrite-tiny" -- \
  "$FERRITE" serve --help
expect_ok "run --help: the seed is random by default" "sampling-seed UINT=random" -- \
  "$FERRITE" run --help
# bench -r: mean and sample standard deviation of the runs, in the text and
# the JSON (each run's figure listed).
expect_ok "bench -r 3 prints mean ± stddev" "prefill +[0-9]+ tokens: +[0-9.]+ tokens/s ± [0-9.]+.*decode +batch +2: +[0-9.]+ tokens/s ± [0-9.]+.*of 3 runs" -- \
  bash -c "'$FERRITE' bench '$GOOD' --prompt-len 32 --gen-len 8 --batch 1 2 -r 3 | tr '\n' ' '"
"$FERRITE" bench "$GOOD" --prompt-len 32 --gen-len 8 --batch 1 2 --repetitions 4 --json \
  >"$WORK/bench.json" 2>/dev/null
expect_ok "bench --json: runs, mean and stddev agree" "^spread ok$" -- python3 -c '
import json, statistics, sys
j = json.load(open(sys.argv[1]))
assert j["repetitions"] == 4
for e in [j["prefill"]] + j["decode"]:
    runs = e["tokens_per_s_runs"]
    assert len(runs) == 4, runs
    assert abs(e["tokens_per_s"] - statistics.mean(runs)) <= 1e-6 * e["tokens_per_s"], e
    assert abs(e["tokens_per_s_stddev"] - statistics.stdev(runs)) <= 1e-6 * e["tokens_per_s"], e
print("spread ok")' "$WORK/bench.json"
expect "bench -r 0" "repetitions" -- "$FERRITE" bench "$GOOD" -r 0

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
