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
import { readability } from './common.mjs';
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
const DEMO_PASSWORD = 'e2e-demo-password-0123';

rmSync(ARTIFACTS, { recursive: true, force: true });
mkdirSync(ARTIFACTS, { recursive: true });

function startServer() {
  const dir = mkdtempSync(join(tmpdir(), 'bizrq-e2e-'));
  const child = spawn(BIN, [
    'serve', '--standalone',
    '--listen', '127.0.0.1:0', '--webhook-listen', '127.0.0.1:0', '--probe-listen', '127.0.0.1:0',
    '--database-url', `sqlite://${join(dir, 'bizrq.db')}`,
    '--admin-token', TOKEN, '--demo',
  ], {
    env: { ...process.env, BIZRQ_ADMIN_PASSWORD: ADMIN_PASSWORD, BIZRQ_DEMO_PASSWORD: DEMO_PASSWORD, BIZRQ_LOG: 'warn' },
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

  // The demo organisation (`--demo`): a tree, users, a pending transfer and
  // four weeks of usage history, so the charts have data.

  await step('login-as-admin', async () => {
    await login(base, 'admin', ADMIN_PASSWORD);
    await page.goto(`${base}/tree`);
    expect(await page.isVisible('text=nlp'), 'the tree shows nlp');
  });

  await step('child-that-does-not-fit-is-refused', async () => {
    await page.goto(`${base}/quotas/nlp/children/new`);
    await page.fill('input[name=name]', 'nlp-eval');
    // The short form: GPU keys and budgets at 0, the rest folded (each
    // takes the parent's idle room unless chosen).
    expect(await page.$('details.more-keys') !== null, 'the other keys are folded under "More keys"');
    await page.fill('input[name="hard:requests.nvidia.com/gpu.A100"]', '100');
    await submit('form.quota-form button[type=submit]');
    const text = await page.innerText('body');
    expect(/A100 GPUs: 100 asked, \d+ left of 32 in nlp: ask research's owners for more, or lower it to \d+/.test(text), `the refusal names the key and the amount, and says what to do: ${text.slice(0, 600)}`);
    expect(!/requests\.nvidia\.com\/gpu\.A100 asks/.test(text), `no raw key in the refusal: ${text.slice(0, 600)}`);
    const beside = await page.$('tr.refused input[name="hard:requests.nvidia.com/gpu.A100"][aria-invalid="true"]');
    expect(beside !== null, 'the refusal sits beside the A100 field');
    expect(/100 asked/.test(await page.innerText('tr.refused small.field-error')), 'the message beside the field');
  });

  await step('create-a-child-quota', async () => {
    await page.fill('input[name="hard:requests.nvidia.com/gpu.A100"]', '1');
    await page.fill('input[name="hard:requests.nvidia.com/gpu"]', '1');
    await submit('form.quota-form button[type=submit]');
    expect(page.url().endsWith('/quotas/nlp-eval'), `on the new quota's page: ${page.url()}`);
  });

  await step('see-a-chart', async () => {
    await page.goto(`${base}/quotas/nlp`);
    const charts = await page.$$('svg.chart');
    expect(charts.length >= 2, `the detail page draws its charts (${charts.length})`);
    expect((await page.innerText('body')).includes('runs out in'), 'the burn-down forecast is stated');
  });

  let transferUrl;
  await step('owner-requests-a-transfer', async () => {
    await login(base, 'owner-research', DEMO_PASSWORD);
    await page.goto(`${base}/transfers`);
    await page.selectOption('form.request select[name=from]', 'speech');
    await page.fill('form.request input[name=to]', 'vision');
    // Keys are chosen from the quota's keys by name, not typed.
    const keys = await page.$$('form.request select[name=key]');
    const amounts = await page.$$('form.request input[name=amount]');
    expect((await keys[0].innerText()).includes('V100 GPUs'), 'the key list names the keys');
    await keys[0].selectOption('requests.nvidia.com/gpu.V100');
    await amounts[0].fill('2');
    await page.fill('form.request textarea[name=reason]', 'e2e: vision needs two V100 for a week');
    await submit('form.request button[type=submit]');
    transferUrl = page.url();
    expect(/\/transfers\/\d+$/.test(transferUrl), `on the new transfer: ${transferUrl} ${(await page.innerText('body')).slice(0, 600)}`);
  });

  await step('owner-invites-a-member', async () => {
    await page.goto(`${base}/quotas/speech`);
    await page.fill('form[action="/quotas/speech/members"] input[name=username]', 'member-nlp');
    await submit('form[action="/quotas/speech/members"] button[type=submit]');
    const text = await page.innerText('body');
    expect(text.includes('member-nlp is now member of speech'), `the invitation is confirmed: ${text.slice(0, 400)}`);
  });

  await step('admin-approves-it', async () => {
    await login(base, 'admin', ADMIN_PASSWORD);
    await page.goto(transferUrl);
    expect(await page.isVisible('text=What approving now would do'), 'the plan shows before approving');
    await page.check('form[action$="/approve"] input[name=confirm]');
    await submit('form[action$="/approve"] button[type=submit]');
    await page.goto(transferUrl);
    const text = await page.innerText('body');
    expect(/\bdone\b/.test(text), `the transfer is done: ${text.slice(0, 600)}`);
  });

  await step('audit-shows-the-approval', async () => {
    await page.goto(`${base}/audit`);
    const text = await page.innerText('body');
    expect(text.includes('transfer.approve'), 'the approval is in the audit log');
    expect(text.includes('transfer.request'), 'the request is in the audit log');
    expect(text.includes('quota.create'), 'the child quota creation is in the audit log');
  });

  await step('phone-width-tree', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${base}/tree`);
    expect(await page.isVisible('text=acme'), 'the tree renders on a phone');
  });

  // Every page a user opens, at desktop and phone width, for an admin and a
  // member: no text under 12 px (chart SVGs are checked by their own step),
  // nothing wider than the screen (wide tables scroll inside themselves).
  const PAGES = {
    admin: ['/', '/tree', '/quotas/research', '/quotas/nlp', '/quotas/nlp/edit', '/transfers', '/alerts', '/audit', '/users', '/tokens', '/account'],
    'member-nlp': ['/', '/tree', '/quotas/nlp', '/transfers', '/alerts', '/tokens', '/account'],
  };
  for (const [who, paths] of Object.entries(PAGES)) {
    await step(`readable-for-${who}-at-both-widths`, async () => {
      await page.setViewportSize({ width: 1440, height: 900 });
      await login(base, who, who === 'admin' ? ADMIN_PASSWORD : DEMO_PASSWORD);
      for (const [w, h] of [[1440, 900], [390, 844]]) {
        await page.setViewportSize({ width: w, height: h });
        for (const path of paths) {
          await page.goto(`${base}${path}`);
          const r = await readability(page);
          expect(r.small.length === 0, `${who} ${path} at ${w} px: text under 12 px: ${r.small.join('; ')}`);
          expect(r.overflow <= 0, `${who} ${path} at ${w} px: the page is ${r.overflow} px wider than the screen`);
        }
      }
      await page.setViewportSize({ width: 1280, height: 900 });
    });
  }
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
