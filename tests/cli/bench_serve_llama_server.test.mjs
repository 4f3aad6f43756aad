// `ferrite bench-serve --backend llama-server` against a fake llama-server
// (issue 14 item 7): the native /completion endpoint with token-id prompts,
// n_predict, ignore_eos and stream; one SSE event per token ({"content",
// "tokens": [id], "stop": false}), a last event with "stop": true and the
// server's counts, no [DONE]. The fake checks every request body (a wrong
// field is a 400, so the run reports errors) and streams with known delays:
// the first token after TTFT_MS, then one every ITL_MS (every fourth event
// carries two tokens after twice the gap), so the report's TTFT, ITL, TPOT
// and token counts are known.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { execFile } from 'node:child_process';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const BIN = process.env.FERRITE_BIN ||
  join(dirname(fileURLToPath(import.meta.url)), '../../build/ferrite');
const TTFT_MS = 60, ITL_MS = 15, INPUT = 12, OUTPUT = 9;
const seen = [];  // request bodies
let server, url;
let closeAfterStream = false;  // drop each connection after its stream (keep-alive refused late)

function fail(res, msg) {
  res.writeHead(400, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ error: { code: 400, message: msg, type: 'invalid_request_error' } }));
}

before(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      if (req.method === 'GET' && req.url === '/health') { res.end('{"status":"ok"}'); return; }
      if (req.method === 'GET' && req.url === '/v1/models') {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [{ id: 'fake.gguf', object: 'model' }] }));
        return;
      }
      if (req.method !== 'POST' || req.url !== '/completion') { res.writeHead(404); res.end('{}'); return; }
      let j;
      try { j = JSON.parse(body); } catch { return fail(res, 'bad JSON'); }
      seen.push(j);
      if (!Array.isArray(j.prompt) || !j.prompt.every(Number.isInteger)) return fail(res, 'prompt: token ids expected');
      if (j.stream !== true || j.ignore_eos !== true || !Number.isInteger(j.n_predict) || j.n_predict < 1)
        return fail(res, 'stream, ignore_eos and n_predict expected');
      if ('max_tokens' in j || 'model' in j) return fail(res, 'OpenAI fields on /completion');
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      const n = j.n_predict;
      let sent = 0, event = 0;
      const next = () => {
        // Every fourth event after the first packs two tokens (twice the gap).
        const k = event > 0 && event % 4 === 0 && sent + 2 <= n ? 2 : 1;
        const tokens = Array.from({ length: k }, (_, i) => 100 + sent + i);
        sent += k;
        ++event;
        res.write(`data: ${JSON.stringify({ index: 0, content: 'x'.repeat(k), tokens, stop: false,
          id_slot: 0, tokens_predicted: sent, tokens_evaluated: j.prompt.length })}\n\n`);
        if (sent < n) {
          const again = event % 4 === 0 && sent + 2 <= n ? 2 * ITL_MS : ITL_MS;
          setTimeout(next, again);
          return;
        }
        res.end(`data: ${JSON.stringify({ index: 0, content: '', tokens: [], stop: true,
          tokens_predicted: n, tokens_evaluated: j.prompt.length, stop_type: 'limit',
          timings: { prompt_n: j.prompt.length, predicted_n: n } })}\n\n`);
        if (closeAfterStream) res.on('finish', () => setTimeout(() => req.socket.destroy(), 5));
      };
      setTimeout(next, TTFT_MS);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${server.address().port}`;
});
after(() => server?.close());

function bench(args) {
  return new Promise((resolve) => {
    execFile(BIN, ['bench-serve', '--url', url, ...args], { timeout: 60000 },
      (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

test('bench-serve --backend llama-server: /completion bodies, TTFT, ITL, TPOT, counts', async () => {
  seen.length = 0;
  const r = await bench(['--backend', 'llama-server', '--input-len', String(INPUT), '--output-len',
    String(OUTPUT), '--num-prompts', '6', '--concurrency', '1', '3', '--json']);
  assert.equal(r.code, 0, r.stderr + r.stdout);
  const j = JSON.parse(r.stdout);
  assert.equal(j.backend, 'llama-server');
  assert.equal(j.endpoint, '/completion');
  assert.equal(j.model, 'fake.gguf');
  assert.equal(seen.length, 1 + 2 * 6);  // the warm-up and two runs
  for (const b of seen) {
    assert.equal(b.prompt.length, INPUT);
    assert.equal(b.n_predict, OUTPUT);
    assert.equal(b.temperature, 0);
    assert.equal(b.cache_prompt, false);  // each run sends the same prompts again
  }
  assert.equal(j.runs.length, 2);
  for (const run of j.runs) {
    assert.equal(run.completed, 6);
    assert.equal(run.errors, 0);
    assert.equal(run.mean_input_tokens, INPUT);  // tokens_evaluated
    assert.equal(run.output_tokens, 6 * OUTPUT);  // tokens_predicted
    // TTFT: the fake's delay plus a little.
    assert.ok(run.ttft_ms.p50 >= TTFT_MS && run.ttft_ms.p50 < TTFT_MS + 80, `ttft ${run.ttft_ms.p50}`);
    // ITL per token: the two-token events spread their doubled gap over both
    // tokens, so every token is about ITL_MS apart.
    assert.ok(run.itl_ms.p50 >= ITL_MS - 1 && run.itl_ms.p50 < ITL_MS + 20, `itl ${run.itl_ms.p50}`);
    assert.ok(run.itl_ms.p90 < 2 * ITL_MS - 1 + 20, `itl p90 ${run.itl_ms.p90}`);
    // Per token, the ITL's mean is TPOT's (the same gaps over the same
    // tokens); counted per event it would be 8/7 of it.
    assert.ok(Math.abs(run.itl_ms.mean - run.tpot_ms.mean) < 0.05 * run.tpot_ms.mean,
      `itl ${run.itl_ms.mean} tpot ${run.tpot_ms.mean}`);
    // TPOT = (e2e - TTFT) / (tokens - 1): (events - 1) gaps, two doubled.
    const gaps = ((OUTPUT - 1) * ITL_MS) / (OUTPUT - 1);
    assert.ok(run.tpot_ms.mean >= gaps - 1 && run.tpot_ms.mean < gaps + 20, `tpot ${run.tpot_ms.mean}`);
    for (const k of ['ttft_ms', 'tpot_ms', 'itl_ms', 'e2e_ms'])
      for (const q of ['mean', 'p50', 'p90', 'p95', 'p99']) assert.ok(Number.isFinite(run[k][q]), `${k}.${q}`);
  }
  // Text output too: the same sections.
  const t = await bench(['--backend', 'llama-server', '--input-len', '4', '--output-len', '3', '--num-prompts', '2']);
  assert.equal(t.code, 0, t.stderr);
  assert.match(t.stdout, /llama-server \/completion/);
  assert.match(t.stdout, /itl +ms: mean/);
});

test('bench-serve: a server that closes kept-alive connections between requests costs no errors', async () => {
  closeAfterStream = true;
  try {
    const r = await bench(['--backend', 'llama-server', '--input-len', '4', '--output-len', '3',
      '--num-prompts', '6', '--concurrency', '1', '2', '--json']);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    for (const run of JSON.parse(r.stdout).runs) {
      assert.equal(run.errors, 0, JSON.stringify(run.error_samples));
      assert.equal(run.output_tokens, 6 * 3);
    }
  } finally { closeAfterStream = false; }
});

test('bench-serve --backend llama-server: a refused body is an error, chat is refused up front', async () => {
  // An OpenAI body on /completion (the fake refuses max_tokens): errors, exit 2.
  const bad = await bench(['--backend', 'llama-server', '--num-prompts', '2', '--output-len', '2',
    '--extra-body', '{"max_tokens": 2}']);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr + bad.stdout, /OpenAI fields on \/completion/);
  const chat = await bench(['--backend', 'llama-server', '--endpoint', 'chat']);
  assert.equal(chat.code, 1);
  assert.match(chat.stderr, /--backend llama-server drives \/completion/);
  const other = await bench(['--backend', 'tgi']);
  assert.equal(other.code, 1);
  assert.match(other.stderr, /--backend must be openai or llama-server/);
});
