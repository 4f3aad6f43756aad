// Oracle for the tokenizer tests: encodes every string of a corpus with the
// Hugging Face tokenizers library (@anush008/tokenizers, Rust via N-API).
// Usage: node oracle.js TOKENIZER_JSON CORPUS_JSON OUT_JSON
// Writes [{ids, ids_special, decoded, decoded_skip}, ...] in corpus order.
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.resolve(__dirname, '..', '..');
const { Tokenizer } = require(path.join(root, 'node_modules', '@anush008', 'tokenizers'));

async function main() {
  const [tokPath, corpusPath, outPath] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));
  const out = [];
  for (const s of corpus) {
    const plain = await tok.encode(s, null, { addSpecialTokens: false });
    const special = await tok.encode(s, null, { addSpecialTokens: true });
    const ids = plain.getIds();
    out.push({
      ids,
      ids_special: special.getIds(),
      decoded: await tok.decode(ids, false),
      decoded_skip: await tok.decode(ids, true),
    });
  }
  fs.writeFileSync(outPath, JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
