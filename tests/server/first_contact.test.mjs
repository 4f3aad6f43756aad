// Issue 18, a new user's first hour with `ferrite serve`: the context and KV
// cache come from the model, prompt + max_tokens beyond the context is a 400,
// the startup summary, --log-requests lines, the periodic throughput line,
// vLLM-named metrics with a model_name label, generation_config.json
// defaults, --chat-template, and bench-serve against a keyed server.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, cpSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN, startServer, tinyModel, metrics, postRaw, waitFor, loadOpenAI } from './harness.mjs';

const OpenAI = await loadOpenAI();
const work = mkdtempSync(join(tmpdir(), 'ferrite-first-contact-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));
let server;
let client;

before(async () => {
  server = await startServer(['--log-requests', '--log-stats-interval', '0.2',
    '--served-model-name', 'tiny']);
  client = new OpenAI({ baseURL: server.url + '/v1', apiKey: 'x', maxRetries: 0 });
});
after(async () => { await server?.stop(); });

// `ferrite serve` without the harness's --max-model-len: resolves with
// { url, log, stop } once it listens, or rejects with its log.
function serveRaw(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, ['serve', '--host', '127.0.0.1', '--port', '0', '--threads', '1',
      ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error('no start:\n' + log)); }, 60000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ url: `http://127.0.0.1:${m[1]}`, log: () => log,
          stop: () => new Promise((r) => { proc.on('exit', r); proc.kill('SIGTERM'); }) });
      }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`exit ${code}:\n${log}`)); });
  });
}

test('the context is the model\'s (max_position_embeddings), reported by /v1/models', async () => {
  const s = await serveRaw([tinyModel()]);  // positional model, as `vllm serve MODEL`
  try {
    const j = await (await fetch(s.url + '/v1/models')).json();
    assert.equal(j.data[0].max_model_len, 4096);
    const one = await (await fetch(s.url + '/v1/models/tiny')).json();
    assert.equal(one.max_model_len, 4096);
    assert.match(s.log(), /max context 4096 tokens \(the model's\)/);
  } finally { await s.stop(); }
  // --max-model-len below the model's is what /v1/models says.
  const j = await (await fetch(server.url + '/v1/models')).json();
  assert.equal(j.data[0].max_model_len, 1024);
});

test('prompt + max_tokens beyond the context is a 400 naming both, not a clamp', async () => {
  await assert.rejects(client.completions.create({ model: 'tiny', prompt: [1, 2, 3, 4], max_tokens: 1021 }),
    (e) => e.status === 400 && e.error?.code === 'context_length_exceeded' &&
      /1025 tokens \(4 in the prompt, 1021 in the completion\)/.test(e.error?.message));
  const ok = await client.completions.create({ model: 'tiny', prompt: [1, 2, 3, 4], max_tokens: 1020, ignore_eos: true });
  assert.equal(ok.usage.completion_tokens, 1020);
});

test('the startup summary says what was loaded and how big the KV cache is', () => {
  const log = server.log();
  for (const re of [/model tiny \(.*\), family qwen3/, /weights [0-9.]+ MiB \(bf16/, /activations f32, KV cache f32/,
    /KV cache [0-9.]+ MiB = \d+ tokens in \d+ pages of 16 \(from /, /max context 1024 tokens \(the model's: 4096\)/,
    /max 16 sequences/, /device cpu/, /loaded in [0-9.]+ s/, /listening on http:/])
    assert.match(log, re);
});

test('--log-requests: id, status, tokens in / out, TTFT and latency per generation', async () => {
  const r = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 5, ignore_eos: true });
  const stream = await client.completions.create({ model: 'tiny', prompt: 'hello', max_tokens: 3, ignore_eos: true, stream: true });
  let id = '';
  for await (const c of stream) id = c.id;
  await postRaw(server.url, '/v1/completions', '{"model": ');
  const re = (x, n) => new RegExp(`${x} POST /v1/\\w+(/\\w+)? 200 prompt_tokens=\\d+ cached_tokens=0 completion_tokens=${n} finish=length ttft=[0-9.]+s latency=[0-9.]+s`);
  assert.ok(await waitFor(() => re(r.id, 5).test(server.log()) && re(id, 3).test(server.log())), server.log());
  assert.match(server.log(), /POST \/v1\/completions 400/);
});

test('a throughput line while there is traffic (as vLLM)', async () => {
  await Promise.all(Array.from({ length: 4 }, () =>
    client.completions.create({ model: 'tiny', prompt: 'a b c', max_tokens: 200, ignore_eos: true })));
  assert.ok(await waitFor(() => /avg prompt throughput: [0-9.]+ tokens\/s, avg generation throughput: [0-9.]+ tokens\/s, running: \d+ reqs, waiting: \d+ reqs, KV cache usage: [0-9.]+%, prefix cache hit rate: [0-9.]+%/.test(server.log()), 3000),
    server.log());
});

test('/metrics: vLLM names with a model_name label, KV usage, request histograms', async () => {
  await client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 2, ignore_eos: true });
  const m = await metrics(server.url);
  const L = '{model_name="tiny"}';
  for (const k of ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc',
    'vllm:prompt_tokens_total', 'vllm:generation_tokens_total', 'vllm:num_preemptions_total',
    'vllm:prefix_cache_queries_total', 'vllm:time_to_first_token_seconds_count',
    'vllm:inter_token_latency_seconds_count', 'vllm:e2e_request_latency_seconds_count',
    'vllm:request_decode_time_seconds_count', 'vllm:request_prompt_tokens_count',
    'vllm:request_generation_tokens_count'])
    assert.ok(Number.isFinite(m[k + L]), `${k}${L} missing`);
  assert.ok(m['vllm:kv_cache_usage_perc' + L] >= 0 && m['vllm:kv_cache_usage_perc' + L] <= 1);
  assert.ok(m['vllm:request_success_total{model_name="tiny",finished_reason="length"}'] >= 1);
  assert.equal(m['vllm:generation_tokens_total' + L], m.ferrite_generation_tokens_total);
  assert.ok(m['vllm:e2e_request_latency_seconds_bucket{model_name="tiny",le="+Inf"}'] >= 1);
});

// Prometheus histogram from /metrics text: { bounds, counts (cumulative), sum, count }.
async function histogram(url, name, label = 'model_name="tiny"') {
  const text = await (await fetch(url + '/metrics')).text();
  const h = { bounds: [], counts: [], sum: NaN, count: NaN };
  for (const line of text.split('\n')) {
    let m = line.match(new RegExp(`^${name}_bucket\\{${label},le="([^"]+)"\\} (\\S+)$`));
    if (m) { h.bounds.push(m[1] === '+Inf' ? Infinity : Number(m[1])); h.counts.push(Number(m[2])); }
    m = line.match(new RegExp(`^${name}_(sum|count)\\{${label}\\} (\\S+)$`));
    if (m) h[m[1]] = Number(m[2]);
  }
  return h;
}

test('/metrics: vLLM\'s queue, prefill, decode, inference, e2e, TTFT and TPOT histograms, vLLM\'s buckets', async () => {
  const latency = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680, Infinity];
  const tpot = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, Infinity];
  const ttft = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560, Infinity];
  const names = { 'vllm:request_queue_time_seconds': latency, 'vllm:request_prefill_time_seconds': latency,
    'vllm:request_decode_time_seconds': latency, 'vllm:request_inference_time_seconds': latency,
    'vllm:e2e_request_latency_seconds': latency, 'vllm:time_to_first_token_seconds': ttft,
    'vllm:request_time_per_output_token_seconds': tpot, 'vllm:inter_token_latency_seconds': tpot,
    'vllm:time_per_output_token_seconds': tpot };
  // One sequence at a time: the second of two requests waits for the first.
  // Whether B reaches the server while A still decodes depends on the
  // client's event loop (a loaded machine can send B only after A's ~0.1 s
  // of decoding): a run where B did not queue is repeated on a fresh
  // server, up to three runs; the metrics' shapes are checked in every run.
  let timing = '';
  for (let run = 0; run < 3; ++run) {
    timing = await queuedPair(names);
    if (!timing) return;
  }
  assert.fail(timing);
});

// A, then B sent after A's first token (B waits for A), then a one-token
// request; checks the histograms and returns '' when B's queue time is a
// good part of the inference time, else why not.
async function queuedPair(names) {
  const s = await startServer(['--max-num-seqs', '1', '--served-model-name', 'tiny']);
  try {
    const c = new OpenAI({ baseURL: s.url + '/v1', apiKey: 'x', maxRetries: 0 });
    const body = { model: 'tiny', prompt: [5, 6, 7, 8], max_tokens: 1000, ignore_eos: true };
    // A streams; once its first token is out, B is sent and waits for A.
    const t0 = Date.now();
    let sentB = 0, endA = 0, second;
    for await (const _ of await c.completions.create({ ...body, stream: true })) {
      if (!second) { sentB = Date.now(); second = c.completions.create(body); }
    }
    endA = Date.now();
    await second;
    const wall = (Date.now() - t0) / 1000;
    await c.completions.create({ ...body, max_tokens: 1 });  // one token: TPOT 0, decode 0
    const h = {};
    for (const [n, bounds] of Object.entries(names)) {
      h[n] = await histogram(s.url, n);
      assert.deepEqual(h[n].bounds, bounds, n);
      for (let i = 1; i < h[n].counts.length; ++i) assert.ok(h[n].counts[i] >= h[n].counts[i - 1], n);
      assert.equal(h[n].counts.at(-1), h[n].count, n);
    }
    // One observation per request (the warm-up-free server saw three).
    for (const n of Object.keys(names).filter((n) => !/inter_token|time_per_output_token_seconds$/.test(n)))
      assert.equal(h[n].count, 3, n);
    // ITL: one per token after each request's first.
    assert.equal(h['vllm:inter_token_latency_seconds'].count, 2 * 999);
    const q = h['vllm:request_queue_time_seconds'], inf = h['vllm:request_inference_time_seconds'];
    const pre = h['vllm:request_prefill_time_seconds'], dec = h['vllm:request_decode_time_seconds'];
    // inference = prefill + decode for every request; e2e covers queue + inference.
    assert.ok(Math.abs(inf.sum - pre.sum - dec.sum) < 1e-3, `${inf.sum} vs ${pre.sum} + ${dec.sum}`);
    assert.ok(h['vllm:e2e_request_latency_seconds'].sum >= q.sum + inf.sum - 1e-3);
    assert.ok(inf.sum <= wall + 0.1 && h['vllm:e2e_request_latency_seconds'].sum <= 2 * wall + 0.5);
    // B queued while A decoded (sent after A's first token, it waits for A's
    // last): a good part of A's inference time, never more than A's e2e. The
    // exact bucket of a known wait: scheduler_test's QueuePrefillAndDecodeTimes.
    const waited = (endA - sentB) / 1000;
    if (!(waited > 0.05)) return `A decoded too fast to measure (${waited} s)`;
    if (!(q.sum > 0.1 * inf.sum && q.sum < waited + 0.2))
      return `queue ${q.sum} s, inference ${inf.sum} s, B waited about ${waited} s`;
    return '';
  } finally { await s.stop(); }
}

test('generation_config.json gives the defaults; --generation-config vllm ignores it', async () => {
  const model = join(work, 'with-gen-config');
  cpSync(tinyModel(), model, { recursive: true });
  writeFileSync(join(model, 'generation_config.json'), JSON.stringify({ temperature: 0, max_new_tokens: 5, do_sample: true }));
  const s = await startServer([], { model });
  try {
    assert.match(s.log(), /sampling defaults from .*generation_config.json: temperature 0, max_tokens 5/);
    const c = new OpenAI({ baseURL: s.url + '/v1', apiKey: 'x', maxRetries: 0 });
    const body = { model: 'with-gen-config', prompt: 'once upon a time', ignore_eos: true };
    const a = await c.completions.create(body);
    const b = await c.completions.create(body);
    assert.equal(a.usage.completion_tokens, 5);
    assert.equal(a.choices[0].text, b.choices[0].text);  // temperature 0: greedy
    const greedy = await c.completions.create({ ...body, temperature: 0 });
    assert.equal(a.choices[0].text, greedy.choices[0].text);
    const longer = await c.completions.create({ ...body, max_tokens: 9 });
    assert.equal(longer.usage.completion_tokens, 9);
  } finally { await s.stop(); }
  const v = await startServer(['--generation-config', 'vllm'], { model });
  try {
    assert.doesNotMatch(v.log(), /sampling defaults/);
    const c = new OpenAI({ baseURL: v.url + '/v1', apiKey: 'x', maxRetries: 0 });
    const r = await c.completions.create({ model: 'with-gen-config', prompt: 'x', ignore_eos: true });
    assert.ok(r.usage.completion_tokens > 5);
  } finally { await v.stop(); }
});

test('--chat-template replaces the model\'s template', async () => {
  const s = await startServer(['--chat-template', '{{ raise_exception("the custom template ran") }}']);
  try {
    const r = await postRaw(s.url, '/v1/chat/completions',
      JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }] }));
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /the custom template ran/);
  } finally { await s.stop(); }
});

function run(args, env = {}) {
  return new Promise((resolve) => {
    execFile(BIN, args, { env: { ...process.env, ...env }, timeout: 60000 },
      (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

test('bench-serve: a keyed server without a key says 401 and --api-key; usage counts and P90/P95', async () => {
  const s = await startServer(['--api-key', 'sesame']);
  try {
    const env = { FERRITE_API_KEY: '', OPENAI_API_KEY: '' };
    const no = await run(['bench-serve', '--url', s.url, '--num-prompts', '2', '--input-len', '8', '--output-len', '4'], env);
    assert.notEqual(no.code, 0);
    assert.match(no.stderr, /401.*--api-key/);
    const ok = await run(['bench-serve', '--url', s.url, '--num-prompts', '4', '--input-len', '8',
      '--output-len', '16', '--json'], { ...env, OPENAI_API_KEY: 'sesame' });
    assert.equal(ok.code, 0, ok.stderr);
    const r = JSON.parse(ok.stdout).runs[0];
    assert.equal(r.mean_input_tokens, 8);  // what the server counted
    for (const k of ['ttft_ms', 'tpot_ms', 'itl_ms', 'e2e_ms'])
      for (const q of ['mean', 'p50', 'p90', 'p95', 'p99']) assert.ok(Number.isFinite(r[k][q]), `${k}.${q}`);
    // ITL per token: its mean matches TPOT (per SSE chunk it would not).
    assert.ok(Math.abs(r.itl_ms.mean - r.tpot_ms.mean) <= 0.5 * r.tpot_ms.mean + 0.05,
      `itl ${r.itl_ms.mean} tpot ${r.tpot_ms.mean}`);
  } finally { await s.stop(); }
});
