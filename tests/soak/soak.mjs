// Soak benchmark of `ferrite serve` (not a CI test by itself; scripts/soak.sh
// runs it, docs/soak.md describes it).
//
// Starts the server on 127.0.0.1 with a tiny model and a KV pool small enough
// that sequences are preempted, drives it for --duration seconds with
// --concurrency generation workers (streaming and whole chat / completions
// requests with random prompt and output lengths, client aborts mid-stream,
// cancellations, malformed bodies) plus --hostile raw-socket workers (slow and
// partial requests, idle keep-alive sockets, garbage, pipelining), samples the
// server's RSS, threads and fds, and at the end, once idle, checks that every
// KV page came back, then stops the server with SIGTERM.
//
// Exit 0: every check passed; 1: a check failed; 2: bad usage or the server
// did not start.
import { spawn, execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync, existsSync, readdirSync, mkdirSync, createWriteStream } from 'node:fs';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import http from 'node:http';
import net from 'node:net';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

// ---------------------------------------------------------------- options
const { values: a } = parseArgs({
  options: {
    duration: { type: 'string' },
    concurrency: { type: 'string', default: '64' },
    hostile: { type: 'string', default: '8' },
    binary: { type: 'string', default: join(ROOT, 'build/ferrite') },
    model: { type: 'string' },
    ci: { type: 'boolean', default: false },
    out: { type: 'string' },
    workdir: { type: 'string' },
    seed: { type: 'string' },
    warmup: { type: 'string' },
    settle: { type: 'string', default: '20' },
    deadline: { type: 'string', default: '60' },
    'kv-pages': { type: 'string', default: '96' },
    'max-num-seqs': { type: 'string', default: '32' },
    'max-model-len': { type: 'string', default: '512' },
    threads: { type: 'string', default: '1' },
    'sample-every': { type: 'string' },
    'rss-slack-mib': { type: 'string', default: '64' },
    'rss-slack-frac': { type: 'string', default: '0.2' },
    'no-prefix-cache': { type: 'boolean', default: false },
    'server-arg': { type: 'string', multiple: true, default: [] },
    skip: { type: 'string', multiple: true, default: [] },
    quiet: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (a.help) {
  console.log(readFileSync(join(ROOT, 'docs/soak.md'), 'utf8').split('\n## ')[1] ?? 'see docs/soak.md');
  process.exit(0);
}
const num = (name, v, lo = 0) => {
  const x = Number(v);
  if (!Number.isFinite(x) || x < lo) { console.error(`soak: --${name} must be a number >= ${lo}, got ${v}`); process.exit(2); }
  return x;
};
const DURATION = num('duration', a.duration ?? (a.ci ? '120' : '600'), 5);
const CONC = num('concurrency', a.concurrency, 1);
const HOSTILE = num('hostile', a.hostile, 0);
const WARMUP = num('warmup', a.warmup ?? String(Math.min(300, Math.max(a.ci ? 30 : 15, Math.round(DURATION * 0.15)))), 1);
const SETTLE = num('settle', a.settle, 1);
const DEADLINE_MS = num('deadline', a.deadline, 0.1) * 1000;
const KV_PAGES = num('kv-pages', a['kv-pages'], 1);
const MAX_SEQS = num('max-num-seqs', a['max-num-seqs'], 1);
const MAX_LEN = num('max-model-len', a['max-model-len'], 64);
const SAMPLE_MS = num('sample-every', a['sample-every'] ?? (DURATION > 900 ? '5' : '2'), 0.2) * 1000;
const RSS_SLACK_KB = num('rss-slack-mib', a['rss-slack-mib']) * 1024;
const RSS_SLACK_FRAC = num('rss-slack-frac', a['rss-slack-frac']);
const SEED = a.seed !== undefined ? num('seed', a.seed) : (Date.now() % 1e9);
const BODY_LIMIT = 65536;
// --skip NAME[,NAME]: leave cases out of the mix (a malformed case's name with
// dashes, e.g. oversize-chunked-body, or a raw kind, e.g. pipelined).
const slug = (s) => s.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');
const SKIP = new Set(a.skip.flatMap((x) => x.split(',')).map(slug).filter(Boolean));
const SHUTDOWN_LIMIT_MS = 30000;
const OUT = a.out ?? join(process.env.TMPDIR || '/tmp', `ferrite-soak-${process.pid}.json`);
const WORKDIR = a.workdir ?? join(process.env.TMPDIR || '/tmp', `ferrite-soak-work-${process.pid}`);
mkdirSync(WORKDIR, { recursive: true });
if (WARMUP >= DURATION) { console.error('soak: --warmup must be shorter than --duration'); process.exit(2); }

const log = (...x) => { if (!a.quiet) console.error(`[soak ${((Date.now() - T0) / 1000).toFixed(1)}s]`, ...x); };
const T0 = Date.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Deterministic PRNG (mulberry32) so a run can be repeated with --seed.
let rs = SEED >>> 0;
function rand() {
  rs = (rs + 0x6d2b79f5) >>> 0;
  let t = rs;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const ri = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));  // inclusive
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
function weighted(table) {
  let total = 0;
  for (const [, w] of table) total += w;
  let x = rand() * total;
  for (const [v, w] of table) { if ((x -= w) < 0) return v; }
  return table[table.length - 1][0];
}

// ---------------------------------------------------------------- server
function tinyModel() {
  const dir = join(WORKDIR, 'tiny');
  if (!existsSync(join(dir, 'config.json'))) {
    execFileSync(a.binary, ['create-model', '--out', dir, '--hidden', '64', '--layers', '2', '--heads', '4',
      '--kv-heads', '2', '--head-dim', '16', '--intermediate', '128', '--vocab', '512'], { stdio: 'ignore' });
  }
  return dir;
}

// KV bytes per token of a model folder (f32 K and V per layer), to size the pool in pages.
function kvBytesPerToken(dir) {
  const c = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  const layers = c.num_hidden_layers ?? 2;
  const kvh = c.num_key_value_heads ?? c.num_attention_heads ?? 2;
  const hd = c.head_dim ?? Math.floor((c.hidden_size ?? 64) / (c.num_attention_heads ?? 4));
  return layers * kvh * hd * 2 * 4;
}

const procStatus = (pid) => {
  try {
    const s = readFileSync(`/proc/${pid}/status`, 'utf8');
    const f = (k) => Number((s.match(new RegExp(`^${k}:\\s+(\\d+)`, 'm')) || [])[1] ?? NaN);
    let fds = NaN;
    try { fds = readdirSync(`/proc/${pid}/fd`).length; } catch {}
    return { rss_kb: f('VmRSS'), hwm_kb: f('VmHWM'), threads: f('Threads'), fds };
  } catch { return null; }
};

let server = null;  // { proc, port, url, pid, exited: null | {code, signal, at} }
let serverLog = '';

async function startServer() {
  if (!existsSync(a.binary)) { console.error(`soak: no ferrite binary at ${a.binary}`); process.exit(2); }
  const model = a.model ?? tinyModel();
  const gib = KV_PAGES * 16 * kvBytesPerToken(model) / 2 ** 30;
  const args = ['serve', '--model', model, '--host', '127.0.0.1', '--port', '0',
    '--threads', String(a.threads), '--max-model-len', String(MAX_LEN), '--max-num-seqs', String(MAX_SEQS),
    '--page-size', '16', '--kv-cache-gib', String(gib), '--max-body-bytes', String(BODY_LIMIT),
    ...(a['no-prefix-cache'] ? [] : ['--enable-prefix-cache']), ...a['server-arg']];
  log(`starting ${a.binary} ${args.join(' ')}`);
  const proc = spawn(a.binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  writeFileSync(join(WORKDIR, 'server.pid'), String(proc.pid));
  const logFile = createWriteStream(join(WORKDIR, 'server.log'));
  const s = { proc, pid: proc.pid, port: 0, url: '', exited: null, args };
  proc.stderr.on('data', (d) => {
    logFile.write(d);
    serverLog += d.toString();
    if (serverLog.length > 200000) serverLog = serverLog.slice(-100000);
  });
  proc.on('exit', (code, signal) => { s.exited = { code, signal, at: Date.now() }; });
  const kill = () => { try { if (!s.exited) proc.kill('SIGKILL'); } catch {} };
  process.on('exit', kill);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => { kill(); process.exit(130); });
  const end = Date.now() + 60000;
  while (Date.now() < end && !s.exited) {
    const m = serverLog.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) { s.port = Number(m[1]); break; }
    await sleep(50);
  }
  if (!s.port) {
    console.error(`soak: the server did not start (${s.exited ? `exited ${s.exited.code ?? s.exited.signal}` : 'no port in 60 s'}):\n${serverLog}`);
    kill();
    process.exit(2);
  }
  s.url = `http://127.0.0.1:${s.port}`;
  const pm = serverLog.match(/(\d+) KV pages of (\d+) tokens/);
  s.kvPages = pm ? Number(pm[1]) : null;
  s.pageSize = pm ? Number(pm[2]) : null;
  return s;
}

// ---------------------------------------------------------------- HTTP helpers
// Generation traffic uses one keep-alive agent; every request gets a deadline.
let agent = new http.Agent({ keepAlive: true, maxSockets: CONC * 2, keepAliveMsecs: 1000 });

// Sends one request; resolves { status, body, events, error, aborted, timedOut, ms }.
// opts.abortAfterEvents: destroy after this many SSE events; opts.abortAfterMs: destroy after a delay.
function request(method, path, body, opts = {}) {
  return new Promise((resolveP) => {
    const t0 = Date.now();
    let done = false;
    const out = { status: 0, body: '', events: 0, error: null, aborted: false, timedOut: false, ms: 0, sse: null };
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(deadline);
      clearTimeout(abortTimer);
      out.ms = Date.now() - t0;
      resolveP(out);
    };
    const headers = { Host: `127.0.0.1:${server.port}`, ...(opts.headers || {}) };
    if (body !== null && body !== undefined) {
      if (!headers['Content-Type']) headers['Content-Type'] = 'application/json';
      if (!opts.chunkedUpload) headers['Content-Length'] = Buffer.byteLength(body);
    }
    const req = http.request({ host: '127.0.0.1', port: server.port, method, path, headers, agent: opts.agent ?? agent });
    const abort = () => { if (!done) { out.aborted = true; req.destroy(); finish(); } };
    const deadline = setTimeout(() => { if (!done) { out.timedOut = true; req.destroy(); finish(); } }, opts.deadline ?? DEADLINE_MS);
    const abortTimer = opts.abortAfterMs !== undefined ? setTimeout(abort, opts.abortAfterMs) : null;
    req.on('response', (res) => {
      out.status = res.statusCode;
      out.headers = res.headers;
      const sse = (res.headers['content-type'] || '').startsWith('text/event-stream');
      if (sse) out.sse = { data: [], done: 0, afterDone: 0, comments: 0, buf: '' };
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        if (done) return;
        if (!sse) { out.body += chunk; return; }
        const st = out.sse;
        st.buf += chunk;
        let i;
        while ((i = st.buf.indexOf('\n\n')) >= 0) {
          const ev = st.buf.slice(0, i);
          st.buf = st.buf.slice(i + 2);
          if (ev.startsWith(':')) { st.comments++; continue; }
          out.events++;
          for (const line of ev.split('\n')) {
            if (!line.startsWith('data: ')) continue;
            const d = line.slice(6);
            if (st.done) st.afterDone++;
            if (d === '[DONE]') st.done++;
            else st.data.push(d);
          }
          if (opts.abortAfterEvents !== undefined && out.events >= opts.abortAfterEvents) { abort(); return; }
        }
      });
      res.on('end', finish);
      res.on('error', (e) => { if (!done) { out.error = e.code || e.message; finish(); } });
      res.on('aborted', () => { if (!done) { out.error = 'response aborted'; finish(); } });
    });
    req.on('error', (e) => { if (!done) { out.error = e.code || e.message; out.reused = req.reusedSocket; finish(); } });
    if (body !== null && body !== undefined) {
      if (opts.chunkedUpload) {
        const buf = Buffer.from(body);
        for (let k = 0; k < buf.length; k += 16384) req.write(buf.subarray(k, k + 16384));
      } else {
        req.write(body);
      }
    }
    req.end();
  });
}

// ---------------------------------------------------------------- stats
const stats = {
  byAction: {},          // action -> outcome -> count
  outcomes: {},          // outcome -> count
  errors: {},            // error type -> count
  failures: [],          // first failures (5 per type), with details
  failuresByType: {},
  latency: {},           // action -> [ms...] (reservoir, for percentiles)
  total: 0,
};
const FAIL_OUTCOMES = new Set(['5xx', 'timeout', 'conn_error', 'sse_incomplete', 'bad_body', 'unexpected_status', 'hung']);
function record(action, outcome, detail = null, ms = 0) {
  stats.total++;
  const b = (stats.byAction[action] ??= {});
  b[outcome] = (b[outcome] || 0) + 1;
  const cls = outcome.startsWith('5xx') ? '5xx' : outcome.startsWith('4xx') ? '4xx' : outcome.split(':')[0];
  stats.outcomes[cls] = (stats.outcomes[cls] || 0) + 1;
  if (outcome.startsWith('4xx')) stats.outcomes[outcome] = (stats.outcomes[outcome] || 0) + 1;
  if (FAIL_OUTCOMES.has(cls)) {
    const type = detail?.type ? `${cls}:${detail.type}` : outcome;
    stats.errors[type] = (stats.errors[type] || 0) + 1;
    stats.failuresByType[type] = (stats.failuresByType[type] || 0) + 1;
    if (stats.failuresByType[type] <= 5 && stats.failures.length < 200) stats.failures.push({ t: ((Date.now() - T0) / 1000).toFixed(1), action, outcome, ...detail });
  }
  const l = (stats.latency[action] ??= []);
  if (l.length < 20000) l.push(ms); else l[Math.floor(rand() * l.length)] = ms;
}
const pct = (xs, p) => {
  if (!xs.length) return null;
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

// Classifies a response to a well-formed request that we did not abort.
function classifyHttp(r, wantStatus) {
  if (r.timedOut) return ['timeout', { type: 'deadline', ms: r.ms }];
  // A kept-alive socket the server closed as idle just as the client reused
  // it: the usual keep-alive race, not a server fault; counted, and bounded
  // by a check of its own.
  if (r.error && !r.status && r.reused && ['ECONNRESET', 'EPIPE'].includes(r.error)) return ['keepalive_race', null];
  if (r.error && !r.status) return ['conn_error', { type: String(r.error) }];
  if (r.status >= 500) return [`5xx:${r.status}`, { type: String(r.status), body: r.body.slice(0, 300) }];
  if (r.error) return ['conn_error', { type: `mid-response ${r.error}`, status: r.status }];
  if (r.status === 429) return ['4xx:429', null];
  if (wantStatus !== undefined && !(Array.isArray(wantStatus) ? wantStatus.includes(r.status) : r.status === wantStatus))
    return ['unexpected_status', { type: `${r.status} (want ${wantStatus})`, body: r.body.slice(0, 300) }];
  return null;
}

// ---------------------------------------------------------------- traffic
const WORDS = 'the of and a to in is you that it he was for on are as with his they at be this have from or one had by word but not what all were we when your can said there use an each which she do how their if will up other about out many then them these so some her would make like him into time has look two more write go see number no way could people my than first water been call who oil its now find long down day did get come made may part'.split(' ');
const SYSTEMS = [
  'You are a helpful assistant that answers briefly and precisely. '.repeat(2),
  'You are a pirate. Answer every question in the voice of an old sea captain. ',
  'Translate everything the user writes into French, keeping the tone. '.repeat(3),
  'You are a code reviewer: list bugs first, then style issues, nothing else. ',
];
function text(minChars, maxChars) {
  const n = ri(minChars, maxChars);
  let s = '';
  while (s.length < n) s += (s ? ' ' : '') + pick(WORDS);
  if (rand() < 0.1) s += ' ' + pick(['naïve café', '日本語のテキスト', '🙂🚀', 'emoji ✓ done', '\\n\\t"quoted"']);
  return s.slice(0, Math.max(1, n + 20));
}
function outputLen() {
  return weighted([[() => ri(1, 8), 3], [() => ri(8, 48), 5], [() => ri(48, 160), 2], [() => ri(160, 320), 0.5]])();
}
function promptLen() {
  return weighted([[[1, 24], 4], [[24, 120], 4], [[120, 300], 2]]);
}

// A random valid body; returns { path, body, stream, params }.
function validRequest({ stream, forceLong = false } = {}) {
  const chat = rand() < 0.5;
  const p = {};
  p.model = rand() < 0.8 ? 'tiny' : undefined;
  const [lo, hi] = promptLen();
  const sys = rand() < 0.35 ? pick(SYSTEMS) : null;
  if (chat) {
    const msgs = [];
    if (sys) msgs.push({ role: 'system', content: sys });
    if (rand() < 0.2) {
      msgs.push({ role: 'user', content: text(1, 40) });
      msgs.push({ role: 'assistant', content: text(1, 60) });
    }
    msgs.push({ role: 'user', content: rand() < 0.1 ? [{ type: 'text', text: text(lo, hi) }] : text(lo, hi) });
    p.messages = msgs;
  } else if (rand() < 0.15) {
    p.prompt = Array.from({ length: ri(1, 200) }, () => ri(0, 511));
  } else {
    p.prompt = (sys ?? '') + text(lo, hi);
  }
  const mt = forceLong ? ri(120, 320) : outputLen();
  if (rand() < 0.5 || !chat) p.max_tokens = mt; else p.max_completion_tokens = mt;
  if (rand() < 0.6 || forceLong) p.ignore_eos = true;
  p.temperature = pick([0, 0, 0.7, 1.0, 1.5]);
  if (rand() < 0.3) p.top_p = pick([0.5, 0.9, 1]);
  if (rand() < 0.2) p.top_k = pick([1, 5, 50]);
  if (rand() < 0.1) p.min_p = 0.05;
  if (rand() < 0.3) p.seed = ri(0, 1e6);
  if (rand() < 0.1) p.presence_penalty = 0.5;
  if (rand() < 0.1) p.repetition_penalty = 1.1;
  if (rand() < 0.15 && !forceLong) p.stop = rand() < 0.5 ? pick(['e', 'th', '\n']) : ['zz', 'q', '.'];
  if (rand() < 0.15) {
    if (chat) { p.logprobs = true; p.top_logprobs = ri(0, 5); } else p.logprobs = ri(0, 5);
  }
  p.stream = stream ?? rand() < 0.5;
  if (p.stream && rand() < 0.4) p.stream_options = { include_usage: true };
  return { path: chat ? '/v1/chat/completions' : '/v1/completions', body: JSON.stringify(p), stream: p.stream, params: p, chat };
}

// Checks a finished (not aborted) SSE stream.
function checkStream(r, v) {
  const st = r.sse;
  if (!st) return ['bad_body', { type: 'not event-stream', body: r.body.slice(0, 200) }];
  if (st.done !== 1 || st.afterDone) return ['sse_incomplete', { type: st.done ? 'data after [DONE]' : 'no [DONE]', events: r.events }];
  let finals = 0, usage = null, lastFinalIdx = -1;
  for (let k = 0; k < st.data.length; k++) {
    let j;
    try { j = JSON.parse(st.data[k]); } catch { return ['bad_body', { type: 'chunk not JSON', chunk: st.data[k].slice(0, 200) }]; }
    if (j.error) return ['5xx:stream', { type: 'error event in stream', chunk: st.data[k].slice(0, 300) }];
    if (j.usage) usage = j.usage;
    for (const c of j.choices || []) if (c.finish_reason) { finals++; lastFinalIdx = k; }
  }
  if (finals !== 1) return ['sse_incomplete', { type: `${finals} final chunks` }];
  if (v.params.stream_options?.include_usage) {
    if (!usage) return ['bad_body', { type: 'no usage chunk' }];
    const mt = v.params.max_tokens ?? v.params.max_completion_tokens;
    if (usage.completion_tokens > mt) return ['bad_body', { type: 'more tokens than max_tokens' }];
  }
  return null;
}
function checkWhole(r, v) {
  let j;
  try { j = JSON.parse(r.body); } catch { return ['bad_body', { type: 'body not JSON', body: r.body.slice(0, 200) }]; }
  if (j.error) return [r.status >= 500 ? `5xx:${r.status}` : 'bad_body', { type: 'error object with 200', body: r.body.slice(0, 300) }];
  const c = j.choices?.[0];
  if (!c || !['stop', 'length'].includes(c.finish_reason)) return ['bad_body', { type: 'no finish_reason', body: r.body.slice(0, 200) }];
  const mt = v.params.max_tokens ?? v.params.max_completion_tokens;
  if (!(j.usage?.completion_tokens <= mt)) return ['bad_body', { type: 'usage.completion_tokens > max_tokens' }];
  if (v.params.ignore_eos && !v.params.stop && c.finish_reason === 'length' && j.usage.completion_tokens !== mt &&
      j.usage.prompt_tokens + j.usage.completion_tokens < MAX_LEN)
    return ['bad_body', { type: 'length finish with fewer tokens than max_tokens', got: j.usage.completion_tokens, want: mt }];
  return null;
}

// A valid body whose prompt plus max_tokens runs past the context is refused
// with 400 context_length_exceeded (as vLLM and OpenAI do). The driver cannot
// count the prompt's tokens itself, so such a refusal is clean only when the
// server's own account of it is consistent: the completion it names is the
// max_tokens that was asked for, and prompt + completion exceeds the context.
function contextRefusal(r, v) {
  if (r.status !== 400) return false;
  let j;
  try { j = JSON.parse(r.body); } catch { return false; }
  if (j?.error?.code !== 'context_length_exceeded') return false;
  const m = /requested (\d+) tokens \((\d+) in the (?:prompt|messages), (\d+) in the completion\)/.exec(j.error.message || '');
  if (!m) return false;
  const [total, prompt, completion] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const mt = v.params.max_tokens ?? v.params.max_completion_tokens;
  return completion === mt && total === prompt + completion && total > MAX_LEN && prompt < MAX_LEN;
}

async function doValid(v, action) {
  const r = await request('POST', v.path, v.body);
  if (contextRefusal(r, v)) return record(action, 'context_400', null, r.ms);
  const bad = classifyHttp(r, 200) ?? (v.stream ? checkStream(r, v) : checkWhole(r, v));
  if (bad) record(action, bad[0], { ...bad[1], path: v.path, req: v.body.slice(0, 300) }, r.ms);
  else record(action, 'completed', null, r.ms);
}

// Client goes away mid-stream after a few events (or a short time).
async function doAbortStream() {
  const v = validRequest({ stream: true, forceLong: true });
  const byEvents = rand() < 0.7;
  const r = await request('POST', v.path, v.body, byEvents ? { abortAfterEvents: ri(1, 12) } : { abortAfterMs: ri(5, 300) });
  if (r.aborted) return record('abort_stream', 'client_aborted', null, r.ms);
  if (contextRefusal(r, v)) return record('abort_stream', 'context_400', null, r.ms);
  const bad = classifyHttp(r, 200) ?? checkStream(r, v);
  if (bad) record('abort_stream', bad[0], { ...bad[1], req: v.body.slice(0, 300) }, r.ms);
  else record('abort_stream', 'completed', null, r.ms);
}

// Cancellation: the client gives up before (or while) the answer arrives.
async function doCancel() {
  const v = validRequest({ forceLong: rand() < 0.7 });
  const r = await request('POST', v.path, v.body, { abortAfterMs: ri(0, 60) });
  if (r.aborted) return record('cancel', 'client_aborted', null, r.ms);
  if (contextRefusal(r, v)) return record('cancel', 'context_400', null, r.ms);
  const bad = classifyHttp(r, 200) ?? (v.stream ? checkStream(r, v) : checkWhole(r, v));
  if (bad) record('cancel', bad[0], { ...bad[1], req: v.body.slice(0, 300) }, r.ms);
  else record('cancel', 'completed', null, r.ms);
}

const MALFORMED = [
  ['not JSON', '/v1/completions', 'hello there', 400],
  ['truncated JSON', '/v1/chat/completions', '{"messages": [{"role": "user", "content": "hi"}', 400],
  ['empty body', '/v1/completions', '', 400],
  ['array body', '/v1/completions', '[1,2,3]', 400],
  ['deep JSON', '/v1/completions', '['.repeat(3000) + ']'.repeat(3000), 400],
  ['invalid UTF-8', '/v1/completions', Buffer.from('{"prompt":"\xff\xfe"}', 'latin1'), 400],
  ['negative max_tokens', '/v1/completions', '{"prompt":"a","max_tokens":-5}', 400],
  ['float max_tokens', '/v1/completions', '{"prompt":"a","max_tokens":2.5}', 400],
  ['string temperature', '/v1/chat/completions', '{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}', 400],
  ['top_p 0', '/v1/completions', '{"prompt":"a","top_p":0}', 400],
  ['n=17', '/v1/completions', '{"prompt":"a","n":17}', 400],
  ['logprobs 1000', '/v1/completions', '{"prompt":"a","logprobs":1000}', 400],
  ['token id out of vocab', '/v1/completions', '{"prompt":[1,2,99999999]}', 400],
  ['messages not array', '/v1/chat/completions', '{"messages":"hi"}', 400],
  ['bad role', '/v1/chat/completions', '{"messages":[{"role":"wizard","content":"x"}]}', 400],
  ['stop not strings', '/v1/completions', '{"prompt":"a","stop":[1,2]}', 400],
  ['stream not bool', '/v1/completions', '{"prompt":"a","stream":"yes"}', 400],
  ['prompt over context', '/v1/completions', null, 400],  // filled in below
  ['unknown model', '/v1/chat/completions', '{"model":"gpt-17","messages":[{"role":"user","content":"x"}]}', 404],
  ['unknown route', '/v1/engines/tiny/completions', '{"prompt":"a"}', 404],
  ['oversize body', '/v1/completions', null, 413],
  ['oversize chunked body', '/v1/completions', null, 413],
];
const MALFORMED_MIX = MALFORMED.filter(([name]) => !SKIP.has(slug(name)));
async function doMalformed() {
  const [name, path, body0, want] = pick(MALFORMED_MIX);
  let body = body0;
  const opts = {};
  if (name === 'prompt over context') body = JSON.stringify({ prompt: Array.from({ length: MAX_LEN + 10 }, () => 7) });
  if (name.startsWith('oversize')) body = JSON.stringify({ prompt: 'x'.repeat(BODY_LIMIT + ri(1, 3 * BODY_LIMIT)) });
  if (name === 'oversize chunked body') opts.chunkedUpload = true;
  // An oversize body may be refused before it is read: the server answers 413
  // and closes; the client can see the reset before the answer.
  if (name.startsWith('oversize')) opts.agent = false;
  const r = await request('POST', path, body, opts);
  const action = 'malformed';
  if (name.startsWith('oversize') && !r.status && ['ECONNRESET', 'EPIPE'].includes(r.error))
    return record(action, 'refused_early', null, r.ms);
  const bad = classifyHttp(r, want);
  if (bad) return record(action, bad[0], { ...bad[1], case: name }, r.ms);
  let j = null;
  try { j = JSON.parse(r.body); } catch {}
  if (typeof j?.error?.message !== 'string') return record(action, 'bad_body', { type: 'error not in OpenAI shape', case: name, body: r.body.slice(0, 200) }, r.ms);
  record(action, `4xx:${r.status}`, null, r.ms);
}

// ---------------------------------------------------------------- raw sockets
// A raw connection; collects what the server sends and when it closes.
function rawConn() {
  return new Promise((resolveP) => {
    const sock = net.connect({ host: '127.0.0.1', port: server.port });
    const c = { sock, data: '', closed: false, error: null, closedAt: 0 };
    sock.setEncoding('latin1');
    sock.on('data', (d) => { c.data += d; });
    sock.on('close', () => { c.closed = true; c.closedAt = Date.now(); });
    sock.on('error', (e) => { c.error = e.code || e.message; });
    sock.on('connect', () => resolveP(c));
    sock.on('error', () => resolveP(c));
  });
}
const waitUntil = async (pred, ms) => {
  const end = Date.now() + ms;
  while (Date.now() < end) { if (pred()) return true; await sleep(20); }
  return pred();
};
const statusOf = (s) => Number((s.match(/^HTTP\/1\.[01] (\d{3})/) || [])[1] || 0);
const responseComplete = (s) => {
  const i = s.indexOf('\r\n\r\n');
  if (i < 0) return false;
  const head = s.slice(0, i).toLowerCase();
  const rest = s.slice(i + 4);
  const cl = head.match(/content-length: *(\d+)/);
  if (cl) return Buffer.byteLength(rest, 'latin1') >= Number(cl[1]);
  if (head.includes('transfer-encoding: chunked')) return /(^|\r\n)0\r\n\r\n$/.test(rest);
  return false;
};

let partialWaitInFlight = 0;
async function doRaw(remainingMs) {
  const kind = weighted([
    ['slow_request', 3], ['partial_close', 3], ['partial_wait', remainingMs > 75000 && partialWaitInFlight < 2 ? 1 : 0],
    ['idle_keepalive', 3], ['idle_connect', 1], ['garbage', 2], ['pipelined', 1.5],
  ].map(([k, w]) => [k, SKIP.has(slug(k)) ? 0 : w]));
  const t0 = Date.now();
  const c = await rawConn();
  const action = `raw_${kind}`;
  const done = (outcome, detail = null) => { try { c.sock.destroy(); } catch {} record(action, outcome, detail, Date.now() - t0); };
  if (c.error) return done('conn_error', { type: `connect ${c.error}` });
  const host = `Host: 127.0.0.1:${server.port}\r\n`;
  const post = (body, extra = '') => `POST /v1/completions HTTP/1.1\r\n${host}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;
  try {
    if (kind === 'slow_request') {
      // A valid request trickled in 4..12 pieces over up to ~3 s; must be answered.
      // Bytes, not string indices: a cut inside a UTF-16 surrogate pair would
      // send invalid UTF-8 (a client bug, rightly 400); a cut inside a UTF-8
      // sequence is what a slow client does.
      const msg = Buffer.from(post(JSON.stringify({ prompt: text(5, 80), max_tokens: ri(1, 16) }), 'Connection: close\r\n'));
      const pieces = ri(4, 12);
      const step = Math.ceil(msg.length / pieces);
      for (let k = 0; k < msg.length; k += step) {
        if (c.closed) break;
        c.sock.write(msg.subarray(k, k + step));
        await sleep(ri(20, 250));
      }
      const ok = await waitUntil(() => responseComplete(c.data) || c.closed, DEADLINE_MS);
      if (!ok) return done('timeout', { type: 'slow request not answered' });
      const st = statusOf(c.data);
      if (st >= 500) return done(`5xx:${st}`, { type: String(st) });
      if (st !== 200 || !responseComplete(c.data)) return done('unexpected_status', { type: `slow request got ${st || 'no answer'}${c.error ? ' ' + c.error : ''}`, data: c.data.slice(0, 200) });
      return done('completed');
    }
    if (kind === 'partial_close') {
      // Part of a request, then the client goes away.
      const body = JSON.stringify({ prompt: text(5, 50), max_tokens: 8 });
      const msg = Buffer.from(post(body));
      const cut = rand() < 0.5 ? ri(1, msg.indexOf('\r\n\r\n')) : ri(msg.indexOf('\r\n\r\n') + 4, msg.length - 1);
      c.sock.write(msg.subarray(0, cut));
      await sleep(ri(10, 2000));
      if (c.data && statusOf(c.data) >= 500) return done(`5xx:${statusOf(c.data)}`, { type: 'partial request' });
      return done('client_aborted');
    }
    if (kind === 'partial_wait') {
      // Headers promise a body that never comes; the server must give up on its own.
      partialWaitInFlight++;
      try {
        const half = rand() < 0.5;
        c.sock.write(half ? `POST /v1/completions HTTP/1.1\r\n${host}Content-Type: appl`
          : `POST /v1/completions HTTP/1.1\r\n${host}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"prompt":`);
        const ok = await waitUntil(() => c.closed || statusOf(c.data) > 0, 60000);
        const ms = Date.now() - t0;
        if (!ok) return done('hung', { type: `${half ? 'partial headers' : 'partial body'}: connection still open after 60 s` });
        const st = statusOf(c.data);
        if (st >= 500) return done(`5xx:${st}`, { type: 'partial request' });
        stats.partialWaitMs = (stats.partialWaitMs ?? []);
        stats.partialWaitMs.push(ms);
        return done(st ? `server_answered_${st}` : 'server_closed');
      } finally { partialWaitInFlight--; }
    }
    if (kind === 'idle_keepalive') {
      // A request, an idle keep-alive socket, then another request if the server kept it.
      c.sock.write(`GET /health HTTP/1.1\r\n${host}\r\n`);
      if (!await waitUntil(() => responseComplete(c.data) || c.closed, DEADLINE_MS)) return done('timeout', { type: 'health not answered' });
      if (statusOf(c.data) !== 200) return done('unexpected_status', { type: `health ${statusOf(c.data)}` });
      await sleep(ri(500, 12000));
      if (c.closed) return done('idle_closed_by_server');
      c.data = '';
      c.sock.write(`GET /v1/models HTTP/1.1\r\n${host}\r\n`);
      if (!await waitUntil(() => responseComplete(c.data) || c.closed, DEADLINE_MS)) return done('timeout', { type: 'second request not answered' });
      if (!c.data && c.closed) return done('idle_closed_by_server');  // closed while we wrote: a keep-alive race, not an error
      if (statusOf(c.data) !== 200) return done('unexpected_status', { type: `after idle ${statusOf(c.data)}` });
      return done('completed');
    }
    if (kind === 'idle_connect') {
      await sleep(ri(200, 5000));
      return done('client_aborted');
    }
    if (kind === 'garbage') {
      const g = pick([
        'GARBAGE\r\n\r\n',
        'GET / HTTP/9.9\r\n\r\n',
        `POST /v1/completions HTTP/1.1\r\n${host}Content-Length: -1\r\n\r\n`,
        `POST /v1/completions HTTP/1.1\r\n${host}Content-Length: 99999999999999999999\r\n\r\n`,
        `POST /v1/completions HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\n\r\nzz\r\n`,
        `GET /health HTTP/1.1\r\n${host}X-Long: ${'a'.repeat(ri(1000, 20000))}\r\n\r\n`,
        Buffer.from(Array.from({ length: ri(1, 512) }, () => ri(0, 255))).toString('latin1'),
      ]);
      c.sock.write(Buffer.from(g, 'latin1'));
      await waitUntil(() => c.closed || responseComplete(c.data), 10000);
      const st = statusOf(c.data);
      if (st >= 500) return done(`5xx:${st}`, { type: 'garbage', sent: g.slice(0, 80) });
      return done(st ? `answered_${st}` : (c.closed ? 'server_closed' : 'client_aborted'));
    }
    if (kind === 'pipelined') {
      c.sock.write(`GET /health HTTP/1.1\r\n${host}\r\nGET /v1/models HTTP/1.1\r\n${host}\r\n` +
        post(JSON.stringify({ prompt: 'pipelined', max_tokens: 3 }), 'Connection: close\r\n'));
      await waitUntil(() => c.closed, DEADLINE_MS);
      const n = (c.data.match(/HTTP\/1\.1 200/g) || []).length;
      if (!c.closed) return done('timeout', { type: 'pipelined not finished' });
      if (n !== 3) return done('unexpected_status', { type: `pipelined: ${n} of 3 answered`, data: c.data.slice(0, 200) });
      return done('completed');
    }
  } catch (e) {
    return done('conn_error', { type: `raw ${kind}: ${e.message}` });
  }
}

// ---------------------------------------------------------------- sampling
const samples = [];  // { t, rss_kb, threads, fds, pages_used, cache_pages, running, waiting }
async function metrics() {
  const r = await request('GET', '/metrics', null, { deadline: 10000 });
  if (r.status !== 200) return null;
  const out = {};
  for (const line of r.body.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}
let healthFailures = 0, healthWorstMs = 0;
async function sampleOnce() {
  const ps = procStatus(server.pid);
  const m = await metrics().catch(() => null);
  const h = await request('GET', '/health', null, { deadline: 10000 });
  if (h.status !== 200) healthFailures++;
  healthWorstMs = Math.max(healthWorstMs, h.ms);
  const s = { t: +((Date.now() - T0) / 1000).toFixed(1), ...(ps || {}),
    pages_used: m?.ferrite_kv_pages_used, cache_pages: m?.ferrite_prefix_cache_pages,
    running: m?.ferrite_num_requests_running, waiting: m?.ferrite_num_requests_waiting };
  samples.push(s);
  return s;
}

// ---------------------------------------------------------------- main
server = await startServer();
log(`server pid ${server.pid} on ${server.url}: ${server.kvPages} KV pages of ${server.pageSize} tokens; seed ${SEED}`);
const m0 = await metrics();
const start = { ...procStatus(server.pid), t: 0 };
let warm = null;
const loadStart = Date.now();
const loadEnd = loadStart + DURATION * 1000;
let stopping = false;
let crashed = null;

const sampler = (async () => {
  let lastPrint = 0;
  while (!stopping) {
    if (server.exited) { crashed = server.exited; stopping = true; log(`the server exited: code ${crashed.code} signal ${crashed.signal}`); break; }
    const s = await sampleOnce();
    if (!warm && Date.now() - loadStart >= WARMUP * 1000) { warm = s; log(`warm-up done: RSS ${(s.rss_kb / 1024).toFixed(1)} MiB, ${s.threads} threads, ${s.fds} fds`); }
    if (Date.now() - lastPrint > (DURATION > 900 ? 60000 : 15000)) {
      lastPrint = Date.now();
      log(`requests ${stats.total}, RSS ${(s.rss_kb / 1024).toFixed(1)} MiB, fds ${s.fds}, pages ${s.pages_used}/${server.kvPages} (cache ${s.cache_pages}), running ${s.running}, waiting ${s.waiting}, errors ${Object.values(stats.errors).reduce((x, y) => x + y, 0)}`);
    }
    const until = Date.now() + SAMPLE_MS;
    while (!stopping && Date.now() < until) await sleep(100);
  }
})();

async function genWorker() {
  while (!stopping && Date.now() < loadEnd) {
    const what = weighted([['valid', 74], ['abort_stream', 9], ['cancel', 6], ['malformed', 11]]);
    try {
      if (what === 'valid') {
        const v = validRequest();
        await doValid(v, `${v.chat ? 'chat' : 'completions'}_${v.stream ? 'stream' : 'whole'}`);
      } else if (what === 'abort_stream') await doAbortStream();
      else if (what === 'cancel') await doCancel();
      else await doMalformed();
    } catch (e) {
      record(what, 'conn_error', { type: `client exception ${e.message}` });
    }
    if (server.exited) { crashed = server.exited; stopping = true; }
  }
}
async function rawWorker() {
  await sleep(ri(0, 2000));
  while (!stopping && Date.now() < loadEnd - 5000) {
    await doRaw(loadEnd - Date.now());
    await sleep(ri(0, 300));
    if (server.exited) { crashed = server.exited; stopping = true; }
  }
}
log(`load: ${CONC} generation workers + ${HOSTILE} raw-socket workers for ${DURATION} s (warm-up ${WARMUP} s)`);
await Promise.all([...Array.from({ length: CONC }, genWorker), ...Array.from({ length: HOSTILE }, rawWorker)]);
const loadMs = Date.now() - loadStart;
log(`load stopped after ${(loadMs / 1000).toFixed(1)} s, ${stats.total} requests`);

// Settle: no client connections left; wait until the engine is idle and the pages are back.
agent.destroy();
agent = new http.Agent({ keepAlive: false });
stopping = true;
await sampler;
let idle = null, mEnd = null;
const settleStart = Date.now();
if (!crashed && !server.exited) {
  await sleep(Math.min(3000, SETTLE * 1000));
  while (Date.now() - settleStart < SETTLE * 1000) {
    mEnd = await metrics().catch(() => null);
    if (mEnd && mEnd.ferrite_num_requests_running === 0 && mEnd.ferrite_num_requests_waiting === 0 &&
        mEnd.ferrite_kv_pages_used - mEnd.ferrite_prefix_cache_pages === 0) break;
    await sleep(500);
  }
  await sleep(500);
  mEnd = await metrics().catch(() => null);
  idle = { ...procStatus(server.pid), t: +((Date.now() - T0) / 1000).toFixed(1) };
}
if (server.exited && !crashed) crashed = server.exited;

// Shutdown: SIGTERM, bounded wait.
let shutdown = { signal: 'SIGTERM', exit_code: null, exit_signal: null, ms: null, within_limit: false };
if (!server.exited) {
  const t = Date.now();
  server.proc.kill('SIGTERM');
  await waitUntil(() => server.exited, SHUTDOWN_LIMIT_MS);
  if (server.exited) {
    shutdown = { signal: 'SIGTERM', exit_code: server.exited.code, exit_signal: server.exited.signal, ms: server.exited.at - t, within_limit: true };
  } else {
    shutdown.ms = Date.now() - t;
    server.proc.kill('SIGKILL');
    await waitUntil(() => server.exited, 5000);
  }
}

// ---------------------------------------------------------------- verdict
const checks = [];
const check = (name, ok, detail) => { checks.push({ name, ok: !!ok, detail }); };
const MiB = (kb) => (kb / 1024).toFixed(1);
check('server stayed up', !crashed, crashed ? `exited during the run: code ${crashed.code} signal ${crashed.signal}\n${serverLog.slice(-3000)}` : 'no exit');
check('no 5xx', !stats.outcomes['5xx'], `${stats.outcomes['5xx'] || 0} 5xx responses`);
const unclean = ['timeout', 'hung', 'conn_error', 'sse_incomplete', 'bad_body', 'unexpected_status']
  .reduce((n, k) => n + (stats.outcomes[k] || 0), 0);
check('every request finished or failed cleanly', unclean === 0,
  `${unclean} unclean (timeouts ${stats.outcomes.timeout || 0}, hung ${stats.outcomes.hung || 0}, connection errors ${stats.outcomes.conn_error || 0}, incomplete streams ${stats.outcomes.sse_incomplete || 0}, bad bodies ${stats.outcomes.bad_body || 0}, unexpected statuses ${stats.outcomes.unexpected_status || 0})`);
const races = stats.outcomes.keepalive_race || 0;
check('keep-alive races rare', races <= Math.max(3, stats.total * 0.002), `${races} resets of a reused keep-alive socket before any answer (bound max(3, 0.2 % of requests))`);
check('/health answered throughout', healthFailures === 0, `${healthFailures} failed health probes, slowest ${healthWorstMs} ms`);
if (warm && idle) {
  const bound = warm.rss_kb + Math.max(RSS_SLACK_KB, RSS_SLACK_FRAC * warm.rss_kb);
  check('RSS bounded after warm-up', idle.rss_kb <= bound,
    `start ${MiB(start.rss_kb)} MiB, after warm-up ${MiB(warm.rss_kb)} MiB, end ${MiB(idle.rss_kb)} MiB (bound ${MiB(bound)} MiB), peak ${MiB(idle.hwm_kb)} MiB`);
  check('no fd leak', idle.fds <= start.fds + 4, `fds at start ${start.fds}, after warm-up ${warm.fds}, idle at end ${idle.fds}`);
  check('no thread leak', idle.threads <= warm.threads + 4, `threads after warm-up ${warm.threads}, idle at end ${idle.threads}`);
} else if (!crashed) {
  check('RSS bounded after warm-up', false, 'no samples (warm-up not reached or no idle sample)');
}
if (mEnd) {
  const leaked = mEnd.ferrite_kv_pages_used - mEnd.ferrite_prefix_cache_pages;
  check('KV pages returned when idle', leaked === 0,
    `ferrite_kv_pages_used ${mEnd.ferrite_kv_pages_used} - ferrite_prefix_cache_pages ${mEnd.ferrite_prefix_cache_pages} = ${leaked} (running ${mEnd.ferrite_num_requests_running}, waiting ${mEnd.ferrite_num_requests_waiting})`);
  const fin = ['length', 'stop', 'cancelled', 'error'].reduce((n, k) => n + (mEnd[`ferrite_requests_finished_total{reason="${k}"}`] || 0), 0);
  check('every submitted request finished', fin === mEnd.ferrite_requests_submitted_total && mEnd.ferrite_num_requests_running === 0 && mEnd.ferrite_num_requests_waiting === 0,
    `submitted ${mEnd.ferrite_requests_submitted_total}, finished ${fin}`);
  check('no engine errors', !mEnd['ferrite_requests_finished_total{reason="error"}'], `${mEnd['ferrite_requests_finished_total{reason="error"}'] || 0} finished with reason error`);
} else if (!crashed) {
  check('KV pages returned when idle', false, '/metrics did not answer at the end');
}
if (crashed) shutdown = { signal: null, exit_code: crashed.code, exit_signal: crashed.signal, ms: null, within_limit: false, crashed: true };
else check('SIGTERM: exit 0 within 30 s', shutdown.within_limit && shutdown.exit_code === 0,
  shutdown.within_limit ? `exit code ${shutdown.exit_code}${shutdown.exit_signal ? ' signal ' + shutdown.exit_signal : ''} after ${shutdown.ms} ms` : `still running ${shutdown.ms} ms after SIGTERM (killed)`);
const completed = Object.values(stats.byAction).reduce((n, o) => n + (o.completed || 0), 0);
check('load happened', completed > 0 && (stats.byAction.abort_stream?.client_aborted || 0) > 0,
  `${completed} completed, ${stats.outcomes.client_aborted || 0} client-aborted`);

const delta = (k) => (mEnd?.[k] ?? NaN) - (m0?.[k] ?? 0);
const rssPost = samples.filter((s) => warm && s.t >= warm.t && Number.isFinite(s.rss_kb));
let slope = null;
if (rssPost.length >= 3) {
  const n = rssPost.length, mx = rssPost.reduce((x, s) => x + s.t, 0) / n, my = rssPost.reduce((x, s) => x + s.rss_kb, 0) / n;
  const sxy = rssPost.reduce((x, s) => x + (s.t - mx) * (s.rss_kb - my), 0), sxx = rssPost.reduce((x, s) => x + (s.t - mx) ** 2, 0);
  slope = sxx ? (sxy / sxx) * 3600 / 1024 : null;  // MiB per hour
}
const lat = {};
for (const [k, xs] of Object.entries(stats.latency)) lat[k] = { p50: pct(xs, 0.5), p99: pct(xs, 0.99), max: Math.max(...xs) };
const summary = {
  ok: checks.every((c) => c.ok),
  binary: a.binary, server_args: server.args, seed: SEED, skipped: [...SKIP],
  duration_s: DURATION, load_s: +(loadMs / 1000).toFixed(1), warmup_s: WARMUP, concurrency: CONC, hostile_workers: HOSTILE,
  kv_pages: server.kvPages, page_size: server.pageSize,
  requests_total: stats.total, requests_per_s: +(stats.total / (loadMs / 1000)).toFixed(1),
  outcomes: stats.outcomes, by_action: stats.byAction, errors: stats.errors, first_failures: stats.failures,
  latency_ms: lat,
  partial_wait_close_ms: stats.partialWaitMs ? { n: stats.partialWaitMs.length, min: Math.min(...stats.partialWaitMs), max: Math.max(...stats.partialWaitMs) } : null,
  rss_mib: { start: +MiB(start.rss_kb), after_warmup: warm ? +MiB(warm.rss_kb) : null, end: idle ? +MiB(idle.rss_kb) : null,
    peak: idle ? +MiB(idle.hwm_kb) : null, max_sampled: +MiB(Math.max(...samples.map((s) => s.rss_kb || 0))), slope_after_warmup_mib_per_h: slope === null ? null : +slope.toFixed(1) },
  threads: { start: start.threads, after_warmup: warm?.threads, end: idle?.threads },
  fds: { start: start.fds, after_warmup: warm?.fds, end: idle?.fds },
  pages_after: mEnd ? { used: mEnd.ferrite_kv_pages_used, prefix_cache: mEnd.ferrite_prefix_cache_pages, total: mEnd.ferrite_kv_pages_total } : null,
  engine: mEnd ? {
    submitted: delta('ferrite_requests_submitted_total'), preemptions: delta('ferrite_preemptions_total'),
    client_disconnects: delta('ferrite_client_disconnects_total'), generated_tokens: delta('ferrite_generation_tokens_total'),
    prefix_cache_hit_tokens: delta('ferrite_prefix_cache_hits_total'), rejected_queue_full: delta('ferrite_requests_rejected_total'),
    finished: Object.fromEntries(['length', 'stop', 'cancelled', 'error'].map((k) => [k, delta(`ferrite_requests_finished_total{reason="${k}"}`)])),
  } : null,
  health: { failures: healthFailures, slowest_ms: healthWorstMs },
  shutdown,
  checks,
  samples,
};
writeFileSync(OUT, JSON.stringify(summary, null, 1));

// ---------------------------------------------------------------- table
const pad = (s, n) => String(s).padEnd(n);
const lines = [];
lines.push('', `ferrite soak: ${summary.load_s} s load, ${CONC} streams + ${HOSTILE} raw sockets, ${server.kvPages} KV pages, seed ${SEED}`);
lines.push(`requests ${stats.total} (${summary.requests_per_s}/s)${SKIP.size ? `; skipped cases: ${[...SKIP].join(', ')}` : ''}`);
const outcomesSeen = [...new Set(Object.values(stats.byAction).flatMap((o) => Object.keys(o)))].sort();
lines.push(pad('action', 22) + outcomesSeen.map((o) => pad(o, Math.max(9, o.length + 1))).join('') + 'p50/p99 ms');
for (const [act, o] of Object.entries(stats.byAction).sort()) {
  lines.push(pad(act, 22) + outcomesSeen.map((k) => pad(o[k] || 0, Math.max(9, k.length + 1))).join('') + `${lat[act]?.p50}/${lat[act]?.p99}`);
}
lines.push('outcomes: ' + Object.entries(stats.outcomes).map(([k, v]) => `${k} ${v}`).join(', '));
lines.push('errors: ' + (Object.keys(stats.errors).length ? Object.entries(stats.errors).map(([k, v]) => `${k} ${v}`).join(', ') : 'none'));
if (summary.engine) lines.push(`engine: preemptions ${summary.engine.preemptions}, client disconnects ${summary.engine.client_disconnects}, generated tokens ${summary.engine.generated_tokens}, prefix-cache hit tokens ${summary.engine.prefix_cache_hit_tokens}, 429s ${summary.engine.rejected_queue_full}`);
lines.push(`RSS MiB: start ${summary.rss_mib.start}, after warm-up ${summary.rss_mib.after_warmup}, end ${summary.rss_mib.end}, peak ${summary.rss_mib.peak}, slope after warm-up ${summary.rss_mib.slope_after_warmup_mib_per_h} MiB/h`);
if (summary.pages_after) lines.push(`pages after: used ${summary.pages_after.used}, prefix cache ${summary.pages_after.prefix_cache}, of ${summary.pages_after.total}`);
lines.push(`shutdown: ${shutdown.crashed ? `none: the server had died (code ${shutdown.exit_code}, signal ${shutdown.exit_signal})` : shutdown.within_limit ? `exit ${shutdown.exit_code ?? shutdown.exit_signal} after ${shutdown.ms} ms` : 'did not exit within 30 s of SIGTERM'}`);
{
  const seen = new Set();
  for (const f of stats.failures) {
    const k = `${f.action} ${f.outcome} ${f.type}`;
    if (seen.has(k)) continue;
    seen.add(k);
    lines.push(`  first ${k}: ${JSON.stringify(f).slice(0, 400)}`);
  }
}
for (const c of checks) lines.push(`${c.ok ? 'PASS' : 'FAIL'}  ${c.name}: ${c.detail}`);
lines.push(`summary JSON: ${OUT}`);
lines.push(summary.ok ? 'SOAK PASSED' : `SOAK FAILED: ${checks.filter((c) => !c.ok).map((c) => c.name).join('; ')}`);
console.log(lines.join('\n'));
process.exit(summary.ok ? 0 : 1);
