// Starts `ferrite serve` on a free loopback port with a tiny model made by
// `ferrite create-model`, and always stops it.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const BIN = process.env.FERRITE_BIN ||
  join(dirname(fileURLToPath(import.meta.url)), '../../build/ferrite');

let modelDir = null;
export function tinyModel() {
  if (modelDir) return modelDir;
  const dir = mkdtempSync(join(tmpdir(), 'ferrite-server-test-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  modelDir = join(dir, 'tiny');
  execFileSync(BIN, ['create-model', '--out', modelDir, '--hidden', '64', '--layers', '2',
    '--heads', '4', '--kv-heads', '2', '--head-dim', '16', '--intermediate', '128',
    '--vocab', '512'], { stdio: 'ignore' });
  return modelDir;
}

export async function startServer(extraArgs = [], { model = tinyModel() } = {}) {
  if (!existsSync(BIN)) throw new Error(`no ferrite binary at ${BIN}`);
  // model null: the embedded default model.
  const args = ['serve', ...(model ? ['--model', model] : []), '--host', '127.0.0.1', '--port', '0',
    '--threads', '1', '--max-model-len', '1024', ...extraArgs];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start:\n' + log)), 60000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}:\n${log}`)); });
  });
  proc.removeAllListeners('exit');
  const kill = () => { try { proc.kill('SIGKILL'); } catch {} };
  process.on('exit', kill);
  const url = `http://127.0.0.1:${port}`;
  return {
    url, port, proc,
    log: () => log,
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill('SIGTERM');
      const code = await Promise.race([
        new Promise((r) => proc.on('exit', (c) => r(c))),
        new Promise((r) => setTimeout(() => r('timeout'), 10000)),
      ]);
      kill();
      return code;
    },
  };
}

export async function metrics(url) {
  const text = await (await fetch(url + '/metrics')).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export async function waitFor(pred, ms = 5000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

export async function postRaw(url, path, body, headers = {}) {
  const res = await fetch(url + path, {
    method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body,
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch {}
  return { status: res.status, text, json };
}

export async function loadOpenAI() {
  return (await import('openai')).default;  // scripts/install_npm_deps.sh installs it
}
