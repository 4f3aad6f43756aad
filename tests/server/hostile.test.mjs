// Malformed and hostile requests get 4xx and leave the server healthy; API
// key; a full queue answers 429.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, postRaw, loadOpenAI, metrics, waitFor } from './harness.mjs';

const OpenAI = await loadOpenAI();
let server;
before(async () => { server = await startServer(['--max-body-bytes', '1000000']); });
after(async () => { await server?.stop(); });

const cases = [
  ['not JSON', 'hello'],
  ['truncated', '{"prompt": "a"'],
  ['array body', '[1,2,3]'],
  ['deep JSON', '['.repeat(100000) + ']'.repeat(100000)],
  ['deep object', '{"a":'.repeat(5000) + '1' + '}'.repeat(5000)],
  ['invalid UTF-8', Buffer.from([0x7b, 0x22, 0x70, 0x72, 0x6f, 0x6d, 0x70, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d])],
  ['negative max_tokens', '{"prompt":"a","max_tokens":-5}'],
  ['absurd max_tokens', '{"prompt":"a","max_tokens":1000000000000000000000}'],
  ['huge max_tokens', '{"prompt":"a","max_tokens":9007199254740991}'],
  ['float max_tokens', '{"prompt":"a","max_tokens":1.5}'],
  ['negative temperature', '{"prompt":"a","temperature":-1}'],
  ['string temperature', '{"prompt":"a","temperature":"hot"}'],
  ['top_p 0', '{"prompt":"a","top_p":0}'],
  ['absurd top_k', '{"prompt":"a","top_k":1e30}'],
  ['penalty', '{"prompt":"a","presence_penalty":99}'],
  ['n=17', '{"prompt":"a","n":17}'],
  ['logprobs 1000', '{"prompt":"a","logprobs":1000}'],
  ['token id out of vocab', '{"prompt":[1,2,99999999]}'],
  ['negative token id', '{"prompt":[-1]}'],
  ['stop not strings', '{"prompt":"a","stop":[1,2]}'],
  ['empty stop', '{"prompt":"a","stop":""}'],
  ['no prompt', '{}'],
  ['bad seed', '{"prompt":"a","seed":"x"}'],
];

test('hostile completions bodies get 400 in OpenAI shape', async () => {
  for (const [name, body] of cases) {
    const r = await postRaw(server.url, '/v1/completions', body);
    assert.equal(r.status, 400, `${name}: ${r.status} ${r.text.slice(0, 200)}`);
    assert.equal(typeof r.json?.error?.message, 'string', name);
  }
});

test('hostile chat bodies get 400', async () => {
  for (const body of ['{"messages":"hi"}', '{"messages":[{"role":"wizard","content":"x"}]}',
    '{"messages":[{"content":"x"}]}', '{"messages":[{"role":"user","content":{"a":1}}]}',
    '{"messages":[{"role":"user","content":"x"}],"top_logprobs":3}',
    '{"messages":[{"role":"user","content":"x"}],"stream_options":5}']) {
    const r = await postRaw(server.url, '/v1/chat/completions', body);
    assert.equal(r.status, 400, body);
  }
});

test('oversized body is 413', async () => {
  const r = await postRaw(server.url, '/v1/completions', JSON.stringify({ prompt: 'a'.repeat(2_000_000) }));
  assert.equal(r.status, 413);
  assert.equal(typeof r.json?.error?.message, 'string');
});

test('unknown route 404, still healthy afterwards', async () => {
  const r = await fetch(server.url + '/v1/nothing');
  assert.equal(r.status, 404);
  assert.equal((await fetch(server.url + '/health')).status, 200);
  const ok = await postRaw(server.url, '/v1/completions', '{"prompt":"still alive","max_tokens":3}');
  assert.equal(ok.status, 200);
  assert.equal(ok.json.usage.completion_tokens <= 3, true);
});

test('--api-key: 401 without it, 200 with it', async () => {
  const s = await startServer(['--api-key', 'sekrit']);
  try {
    const r = await postRaw(s.url, '/v1/completions', '{"prompt":"a","max_tokens":2}');
    assert.equal(r.status, 401);
    assert.equal(r.json.error.code, 'invalid_api_key');
    const OpenAIc = new OpenAI({ baseURL: s.url + '/v1', apiKey: 'sekrit', maxRetries: 0 });
    const c = await OpenAIc.completions.create({ model: 'tiny', prompt: 'a', max_tokens: 2 });
    assert.ok(c.usage.completion_tokens >= 1);
    assert.equal((await fetch(s.url + '/health')).status, 200);
  } finally { await s.stop(); }
});

test('a full queue answers 429 and the server recovers', async () => {
  const s = await startServer(['--max-num-seqs', '1', '--max-queue', '1']);
  try {
    const body = JSON.stringify({ prompt: 'a', max_tokens: 400, ignore_eos: true });
    const all = await Promise.all(Array.from({ length: 6 }, () => postRaw(s.url, '/v1/completions', body)));
    const codes = all.map((r) => r.status);
    assert.ok(codes.includes(429), `codes ${codes}`);
    assert.ok(codes.includes(200), `codes ${codes}`);
    for (const r of all) if (r.status === 429) assert.equal(typeof r.json.error.message, 'string');
    assert.ok(await waitFor(async () => (await metrics(s.url)).ferrite_num_requests_running === 0));
    const ok = await postRaw(s.url, '/v1/completions', '{"prompt":"a","max_tokens":2}');
    assert.equal(ok.status, 200);
  } finally { await s.stop(); }
});
