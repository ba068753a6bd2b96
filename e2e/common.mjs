// What the e2e files share: where things are, starting the real server on
// the demo data, logging in, and the readability check (no text under
// 12 px, nothing wider than the screen).

import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const here = new URL('.', import.meta.url).pathname;
export const BIN = process.env.BIZRQ_BIN || join(here, '..', 'target', 'debug', 'bizrq');
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const ISLANDS = process.env.BIZRQ_ISLANDS_DIR || '';
export const ARTIFACTS = join(here, 'artifacts');
export const TOKEN = 'e2e-admin-token';
export const PASSWORD = 'e2e-admin-password-0123';
mkdirSync(ARTIFACTS, { recursive: true });

/** E2E_REQUIRE_JS=1 without the islands bundle is a failure, not a skip. */
export function requireBundle() {
  if (process.env.E2E_REQUIRE_JS === '1' && !ISLANDS) {
    console.error('E2E_REQUIRE_JS=1 but BIZRQ_ISLANDS_DIR is not set');
    process.exit(1);
  }
}

/** The real bizrq on a fresh SQLite file with the demo data (and the
 *  islands bundle when BIZRQ_ISLANDS_DIR is set). */
export function startServer(name) {
  const dir = mkdtempSync(join(tmpdir(), `bizrq-e2e-${name}-`));
  const args = ['serve', '--standalone', '--listen', '127.0.0.1:0', '--webhook-listen', '127.0.0.1:0',
    '--probe-listen', '127.0.0.1:0', '--database-url', `sqlite://${join(dir, 'bizrq.db')}`,
    '--admin-token', TOKEN, '--demo'];
  if (ISLANDS) args.push('--islands-dir', ISLANDS);
  const child = spawn(BIN, args, {
    env: { ...process.env, BIZRQ_ADMIN_PASSWORD: PASSWORD, BIZRQ_DEMO_PASSWORD: PASSWORD, BIZRQ_LOG: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('bizrq did not get ready in 90 s')), 90_000);
    child.on('exit', (code) => reject(new Error(`bizrq exited with ${code} before it was ready`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const m = line.match(/^bizrq ready http=(\S+)/);
      if (m) { clearTimeout(timer); resolve({ child, base: `http://${m[1]}`, dir }); }
    });
  });
}

export function expect(cond, message) { if (!cond) throw new Error(message); }

/** Text under 12 px (the first five) and how far the page is wider than the screen. */
export async function readability(page) {
  return page.evaluate(() => {
    const small = [];
    for (const el of document.querySelectorAll('body *')) {
      if (el.closest('svg') || el.closest('.sr-only')) continue;
      if (![...el.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim())) continue;
      const st = getComputedStyle(el);
      const box = el.getBoundingClientRect();
      if (st.display === 'none' || st.visibility === 'hidden' || box.width === 0) continue;
      if (parseFloat(st.fontSize) < 12) small.push(`${el.tagName.toLowerCase()}.${el.className} "${el.textContent.trim().slice(0, 30)}" ${st.fontSize}`);
    }
    return { small: small.slice(0, 5), overflow: document.documentElement.scrollWidth - window.innerWidth };
  });
}

/** No text under 12 px, nothing wider than the screen. */
export async function readable(page, what) {
  const r = await readability(page);
  expect(r.small.length === 0, `${what}: text under 12 px: ${r.small.join('; ')}`);
  expect(r.overflow <= 0, `${what}: the page is ${r.overflow} px wider than the screen`);
}
