// End-to-end tests of the bizrq portal: a real `bizrq serve` (standalone,
// fresh SQLite) driven by headless Chromium with JavaScript DISABLED — every
// page must work as plain HTML forms and links. Screenshots of every step go
// to e2e/artifacts/.
//
//   cargo build -p bizrq && (cd e2e && npm ci && node run.mjs)
//
// Environment: BIZRQ_BIN (default ../target/debug/bizrq), CHROMIUM (default
// /usr/bin/chromium).

import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const here = new URL('.', import.meta.url).pathname;
const BIN = process.env.BIZRQ_BIN || join(here, '..', 'target', 'debug', 'bizrq');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = join(here, 'artifacts');
const TOKEN = 'e2e-admin-token';
const ADMIN_PASSWORD = 'e2e-admin-password-0123';
const USER_PASSWORD = 'e2e-user-password-0123';

rmSync(ARTIFACTS, { recursive: true, force: true });
mkdirSync(ARTIFACTS, { recursive: true });

function startServer() {
  const dir = mkdtempSync(join(tmpdir(), 'bizrq-e2e-'));
  const child = spawn(BIN, [
    'serve', '--standalone',
    '--listen', '127.0.0.1:0', '--webhook-listen', '127.0.0.1:0',
    '--database-url', `sqlite://${join(dir, 'bizrq.db')}`,
    '--admin-token', TOKEN,
  ], {
    env: { ...process.env, BIZRQ_ADMIN_PASSWORD: ADMIN_PASSWORD, BIZRQ_LOG: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('bizrq did not get ready in 60 s')), 60_000);
    child.on('exit', (code) => reject(new Error(`bizrq exited with ${code} before it was ready`)));
    const lines = createInterface({ input: child.stdout });
    lines.on('line', (line) => {
      const m = line.match(/^bizrq ready http=(\S+) webhook=(\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ child, http: `http://${m[1]}`, dir });
      }
    });
  });
}

async function api(base, method, path, body) {
  const r = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

let n = 0;
let page;
async function step(name, fn) {
  n += 1;
  const shot = join(ARTIFACTS, `${String(n).padStart(2, '0')}-${name}.png`);
  process.stdout.write(`e2e ${n}. ${name} … `);
  try {
    await fn();
    await page.screenshot({ path: shot, fullPage: true });
    console.log('ok');
  } catch (e) {
    try { await page.screenshot({ path: shot.replace('.png', '-FAILED.png'), fullPage: true }); } catch { /* ignore */ }
    console.log('FAILED');
    throw e;
  }
}

function expect(cond, message) {
  if (!cond) throw new Error(message);
}

async function submit(selector) {
  await Promise.all([page.waitForLoadState('load'), page.click(selector)]);
}

async function login(base, username, password) {
  await page.goto(`${base}/logout`).catch(() => {});
  await page.context().clearCookies();
  await page.goto(`${base}/login`);
  await page.fill('input[name=username]', username);
  await page.fill('input[name=password]', password);
  await submit('form button[type=submit]');
  expect(!page.url().includes('/login'), `login as ${username} failed: still on ${page.url()}`);
}

const server = await startServer();
const base = server.http;
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'],
});
let failed = false;
try {
  const context = await browser.newContext({ javaScriptEnabled: false, viewport: { width: 1280, height: 900 } });
  page = await context.newPage();

  // The organisation, set up through the JSON API.
  await api(base, 'POST', '/api/v1/quotas', { metadata: { name: 'ai-platform' }, spec: { parent: '', hard: { 'requests.nvidia.com/gpu': '32', 'cash/requests.nvidia.com/gpu': '1000' } } });
  await api(base, 'POST', '/api/v1/quotas', { metadata: { name: 'nlp' }, spec: { parent: 'ai-platform', hard: { 'requests.nvidia.com/gpu': '16', 'cash/requests.nvidia.com/gpu': '400' } } });
  await api(base, 'POST', '/api/v1/quotas', { metadata: { name: 'cv' }, spec: { parent: 'ai-platform', hard: { 'requests.nvidia.com/gpu': '8', 'cash/requests.nvidia.com/gpu': '200' } } });

  await step('login-as-admin', async () => {
    await login(base, 'admin', ADMIN_PASSWORD);
    await page.goto(`${base}/tree`);
    expect(await page.isVisible('text=nlp'), 'the tree shows nlp');
  });

  await step('admin-creates-an-owner', async () => {
    await page.goto(`${base}/users`);
    await page.fill('form[action="/users"] input[name=username]', 'olivia');
    await page.fill('form[action="/users"] input[name=password]', USER_PASSWORD);
    await submit('form[action="/users"] button[type=submit]');
    expect(await page.isVisible('text=olivia'), 'olivia is listed');
    await page.fill('form[action="/users/olivia/roles"] input[name=quota]', 'nlp');
    await page.selectOption('form[action="/users/olivia/roles"] select[name=role]', 'owner');
    await submit('form[action="/users/olivia/roles"] button[type=submit]');
  });

  // Steps for the quota and transfer pages are added with those pages.
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  await browser.close();
  server.child.kill();
  rmSync(server.dir, { recursive: true, force: true });
}
if (failed) process.exit(1);
console.log(`e2e: all ${n} steps passed; screenshots in e2e/artifacts/`);
