// The OpenAI API surface through the official client: chat, completions,
// streaming, usage, stop strings, logprobs, errors, cancellation.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, metrics, waitFor, postRaw, loadOpenAI } from './harness.mjs';

const OpenAI = await loadOpenAI();
let server, client, model;

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  model = (await client.models.list()).data[0].id;
});
after(async () => { await server?.stop(); });

test('health and models', async () => {
  const h = await fetch(server.url + '/health');
  assert.equal(h.status, 200);
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, 'tiny');
});

test('chat completion with usage', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
    max_tokens: 12, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('completion: ignore_eos runs to max_tokens; max_completion_tokens too', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 20, temperature: 0, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 20);
  const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_completion_tokens: 5, ignore_eos: true });
  assert.equal(c.usage.completion_tokens, 5);
});

test('greedy is deterministic; seeded sampling is reproducible', async () => {
  const a = await client.completions.create({ model, prompt: 'abc', max_tokens: 16, temperature: 0, ignore_eos: true });
  const b = await client.completions.create({ model, prompt: 'abc', max_tokens: 16, temperature: 0, ignore_eos: true });
  assert.equal(a.choices[0].text, b.choices[0].text);
  const params = { model, prompt: 'abc', max_tokens: 16, temperature: 1, top_p: 0.9, top_k: 50, min_p: 0.01, seed: 1234, ignore_eos: true,
    presence_penalty: 0.5, frequency_penalty: 0.5, repetition_penalty: 1.1 };
  const c = await client.completions.create(params);
  const d = await client.completions.create(params);
  assert.equal(c.choices[0].text, d.choices[0].text);
});

test('streaming chat: role first, deltas, one finish, usage chunk, one [DONE]', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 24, temperature: 0,
    ignore_eos: true, stream: true, stream_options: { include_usage: true },
  });
  let text = '', finishes = 0, usage = null, first = true;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (first) { assert.equal(chunk.choices[0].delta.role, 'assistant'); first = false; }
    if (chunk.usage) { usage = chunk.usage; assert.equal(chunk.choices.length, 0); continue; }
    text += chunk.choices[0].delta.content ?? '';
    if (chunk.choices[0].finish_reason) finishes++;
  }
  assert.equal(finishes, 1);
  assert.ok(usage);
  assert.equal(usage.completion_tokens, 24);
  const full = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 24, temperature: 0, ignore_eos: true,
  });
  assert.equal(text, full.choices[0].message.content);
  // The raw stream: exactly one data: [DONE], at the end.
  const raw = await postRaw(server.url, '/v1/completions', JSON.stringify({
    model, prompt: 'hi', max_tokens: 8, stream: true, ignore_eos: true }));
  assert.equal(raw.status, 200);
  assert.equal(raw.text.split('data: [DONE]').length - 1, 1);
  assert.ok(raw.text.trimEnd().endsWith('data: [DONE]'));
});

test('stop strings end the text and never leak, streamed or not', async () => {
  const base = { model, prompt: 'The quick brown fox', max_tokens: 40, temperature: 0, ignore_eos: true };
  const full = (await client.completions.create(base)).choices[0].text;
  // A stop string from the middle of the greedy text.
  let stop = null;
  for (let i = 4; i + 2 <= full.length && !stop; i++) {
    const s = full.slice(i, i + 2);
    if (/^[\x20-\x7e]{2}$/.test(s)) stop = s;
  }
  if (!stop) stop = full.slice(4, 6);
  const expected = full.slice(0, full.indexOf(stop));
  const r = await client.completions.create({ ...base, stop: [stop, 'never-appears'] });
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const stream = await client.completions.create({ ...base, stop, stream: true });
  let text = '', reason = null;
  for await (const chunk of stream) {
    if (!chunk.choices.length) continue;
    text += chunk.choices[0].text;
    assert.ok(!text.includes(stop), 'stop string leaked into the stream');
    reason = chunk.choices[0].finish_reason ?? reason;
  }
  assert.equal(text, expected);
  assert.equal(reason, 'stop');
});

test('logprobs and top_logprobs', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 6, temperature: 0, ignore_eos: true,
    logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 6);
  for (const e of content) {
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0);
    assert.ok(Array.isArray(e.bytes));
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.top_logprobs[0].token, e.token);  // greedy picks the best
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6);
  }
  const c = await client.completions.create({ model, prompt: 'hi', max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: 2 });
  assert.equal(c.choices[0].logprobs.tokens.length, 4);
  assert.equal(c.choices[0].logprobs.token_logprobs.length, 4);
  assert.equal(Object.keys(c.choices[0].logprobs.top_logprobs[0]).length, 2);
});

test('errors in OpenAI shape: 400, 404', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 404 && e.error?.code === 'model_not_found');
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], temperature: 7 }),
    (e) => e.status === 400 && e.error?.param === 'temperature');
  await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: 0 }), (e) => e.status === 400);
  await assert.rejects(client.chat.completions.create({ model, messages: [] }), (e) => e.status === 400);
  const bad = await postRaw(server.url, '/v1/chat/completions', '{"model": ');
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.type, 'invalid_request_error');
  const long = await postRaw(server.url, '/v1/completions', JSON.stringify({ model, prompt: 'a '.repeat(3000) }));
  assert.equal(long.status, 400);
  assert.equal(long.json.error.code, 'context_length_exceeded');
});

test('a client that disconnects mid-stream frees its pages', async () => {
  const before = await metrics(server.url);
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model, prompt: 'long story', max_tokens: 1000, ignore_eos: true, temperature: 0, stream: true },
    { signal: controller.signal });
  let chunks = 0;
  try {
    for await (const _ of stream) { if (++chunks === 3) controller.abort(); }
  } catch { /* the abort surfaces as an error or as the end of the stream */ }
  assert.ok(chunks >= 3);
  const freed = await waitFor(async () => {
    const m = await metrics(server.url);
    return m.ferrite_kv_pages_used === 0 && m.ferrite_num_requests_running === 0 &&
      m['ferrite_requests_finished_total{reason="cancelled"}'] > before['ferrite_requests_finished_total{reason="cancelled"}'];
  }, 5000);
  assert.ok(freed, 'pages were not freed after the disconnect');
  const m = await metrics(server.url);
  assert.ok(m.ferrite_generation_tokens_total - before.ferrite_generation_tokens_total < 1000);
});

test('metrics: Prometheus text with histograms', async () => {
  const text = await (await fetch(server.url + '/metrics')).text();
  for (const name of ['ferrite_time_to_first_token_seconds_bucket', 'ferrite_inter_token_latency_seconds_count',
    'ferrite_kv_pages_used', 'ferrite_num_requests_waiting', 'ferrite_prefix_cache_hits_total',
    'ferrite_generation_tokens_total', 'ferrite_prompt_tokens_total'])
    assert.ok(text.includes(name), name);
});
