#!/usr/bin/env bash
# CPU overhead of grammar-constrained decoding: 64 concurrent streams, the
# same bench-serve run unconstrained and with a json_schema response_format.
set -u
B=${B:-build/ferrite}
MODEL=${MODEL:-}
PORT=${PORT:-8960}
OUTD=${OUTD:-/tmp/struct_bench}
mkdir -p $OUTD
$B serve ${MODEL:+--model $MODEL} --port $PORT --threads 2 --max-num-seqs 64 > $OUTD/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do grep -q listening $OUTD/serve.log && break; sleep 1; done
STR='{"response_format":{"type":"json_schema","json_schema":{"name":"t","strict":true,"schema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}}}}'
PERSON='{"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"name":{"type":"string","maxLength":24},"age":{"type":"integer","minimum":0,"maximum":130},"role":{"enum":["admin","user","guest"]},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":4},"bio":{"type":"string"}},"required":["name","age","role","tags","bio"],"additionalProperties":false}}}}'
run() { $B bench-serve --url http://127.0.0.1:$PORT --endpoint chat --input-len 32 --output-len ${OLEN:-96} \
  --num-prompts ${NP:-128} --concurrency 64 --json-file $OUTD/$1.json "${@:2}" > $OUTD/$1.txt 2>&1; }
for r in 1 2; do
  run unconstrained_$r
  run string_schema_$r --extra-body "$STR"
  run person_schema_$r --extra-body "$PERSON"
done
kill $SP
for f in $OUTD/*.json; do python3 -c "
import json,sys;d=json.load(open('$f'));r=d['runs'][0]
print('%-28s'%'$f'.split('/')[-1], {k:r[k] for k in r if k in ('output_throughput','output_tokens','completed','errors','request_throughput')}, 'tpot', r.get('tpot_ms',{}).get('mean'), 'server', r.get('server'))"; done
