// 64 concurrent greedy streams give the same text as serial runs; a tiny KV
// pool forces preemption and still completes every request; the prefix cache
// hits and changes nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, metrics, loadOpenAI } from './harness.mjs';

const OpenAI = await loadOpenAI();

async function streamText(client, params) {
  const stream = await client.completions.create({ ...params, stream: true });
  let text = '';
  for await (const c of stream) if (c.choices.length) text += c.choices[0].text;
  return text;
}

function prompts(n) {
  const words = ['alpha', 'beta', 'gamma', 'delta', 'omega', 'sigma', 'kappa', 'zeta'];
  return Array.from({ length: n }, (_, i) =>
    Array.from({ length: 3 + (i % 7) }, (_, k) => words[(i * 3 + k * 5) % 8]).join(' ') + ` #${i}`);
}

test('64 concurrent greedy streams equal serial runs', async () => {
  const s = await startServer(['--max-num-seqs', '64', '--max-num-batched-tokens', '512']);
  try {
    const client = new OpenAI({ baseURL: s.url + '/v1', apiKey: 'x', maxRetries: 0, timeout: 120000 });
    const ps = prompts(64);
    const params = (p) => ({ model: 'tiny', prompt: p, max_tokens: 32, temperature: 0, ignore_eos: true });
    const serial = [];
    for (const p of ps) serial.push((await client.completions.create(params(p))).choices[0].text);
    const concurrent = await Promise.all(ps.map((p) => streamText(client, params(p))));
    for (let i = 0; i < ps.length; i++) assert.equal(concurrent[i], serial[i], `prompt ${i}`);
  } finally { await s.stop(); }
});

test('preemption under a tiny KV pool completes every request', async () => {
  // 2 layers x 2 KV heads x 16 dims x K,V x f32 = 512 B/token: 64 pages of 16 tokens, one
  // sequence of the 1024-token context (the least the server starts with), while 16 requests
  // of ~200 tokens want ~200 pages. The generations are long enough (160 steps) that all 16
  // requests are in flight together however fast the machine runs the tiny model (with 48
  // tokens the faster CPU kernels finished early requests before the last ones arrived:
  // no preemption in 2 of 3 runs).
  const s = await startServer(['--max-num-seqs', '16', '--kv-cache-gib', String(64 * 16 * 512 / 2 ** 30)]);
  try {
    const client = new OpenAI({ baseURL: s.url + '/v1', apiKey: 'x', maxRetries: 0, timeout: 120000 });
    const ps = prompts(16).map((p) => p + ' '.repeat(4) + p);
    const params = (p) => ({ model: 'tiny', prompt: p, max_tokens: 160, temperature: 0, ignore_eos: true });
    const serial = [];
    for (const p of ps.slice(0, 4)) serial.push((await client.completions.create(params(p))).choices[0].text);
    const results = await Promise.all(ps.map((p) => client.completions.create(params(p))));
    for (const r of results) {
      assert.equal(r.usage.completion_tokens, 160);
      assert.equal(r.choices[0].finish_reason, 'length');
    }
    for (let i = 0; i < 4; i++) assert.equal(results[i].choices[0].text, serial[i]);
    const m = await metrics(s.url);
    assert.ok(m.ferrite_preemptions_total > 0, 'expected preemptions');
    assert.equal(m.ferrite_kv_pages_used, 0);
  } finally { await s.stop(); }
});

test('prefix cache: hits on a shared prefix, same greedy text', async () => {
  const s = await startServer(['--enable-prefix-cache']);
  try {
    const client = new OpenAI({ baseURL: s.url + '/v1', apiKey: 'x', maxRetries: 0 });
    const system = 'You are a helpful assistant. '.repeat(6);
    const ask = (q) => client.chat.completions.create({ model: 'tiny', temperature: 0, max_tokens: 8, ignore_eos: true,
      messages: [{ role: 'system', content: system }, { role: 'user', content: q }] });
    const a = await ask('first question');
    const b = await ask('first question');
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);
    assert.ok(b.usage.prompt_tokens_details.cached_tokens > 0);
    await ask('another question');
    const m = await metrics(s.url);
    assert.ok(m.ferrite_prefix_cache_hits_total > 0);
  } finally { await s.stop(); }
});
