// Screenshots of the main pages at desktop and phone width, for looking at
// what users see (not a test): node shots.mjs OUT_DIR.
// BIZRQ_BIN and CHROMIUM as for run.mjs; COLOR_SCHEME=dark for dark mode.
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const BIN = process.env.BIZRQ_BIN;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const OUT = process.argv[2] || 'shots';
const PASSWORD = 'shots-admin-password-0123';
mkdirSync(OUT, { recursive: true });

// BASE: shoot a server already running (started with BIZRQ_ADMIN_PASSWORD
// set to PASSWORD below, e.g. to set something up through the API first).
let child = null;
const base = process.env.BASE || await new Promise((resolve, reject) => {
  const dir = mkdtempSync(join(tmpdir(), 'bizrq-shots-'));
  child = spawn(BIN, ['serve', '--standalone', '--listen', '127.0.0.1:0', '--webhook-listen', '127.0.0.1:0',
    '--probe-listen', '127.0.0.1:0', '--database-url', `sqlite://${join(dir, 'bizrq.db')}`, '--demo'], {
    env: { ...process.env, BIZRQ_ADMIN_PASSWORD: PASSWORD, BIZRQ_DEMO_PASSWORD: PASSWORD, BIZRQ_LOG: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  setTimeout(() => reject(new Error('not ready in 60 s')), 60_000);
  createInterface({ input: child.stdout }).on('line', (l) => {
    const m = l.match(/^bizrq ready http=(\S+)/);
    if (m) resolve(`http://${m[1]}`);
  });
});
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
try {
  for (const [w, h] of [[1440, 900], [390, 844]]) {
    const colorScheme = process.env.COLOR_SCHEME || 'light';
    const page = await (await browser.newContext({ javaScriptEnabled: false, viewport: { width: w, height: h }, colorScheme })).newPage();
    await page.goto(`${base}/login`);
    await page.fill('input[name=username]', 'admin');
    await page.fill('input[name=password]', PASSWORD);
    await Promise.all([page.waitForLoadState('load'), page.click('form button[type=submit]')]);
    for (const path of (process.env.PAGES || '/,/tree,/quotas/research,/quotas/nlp').split(',')) {
      await page.goto(`${base}${path}`);
      const name = path === '/' ? 'overview' : path.replaceAll('/', '_').replace(/^_/, '');
      await page.screenshot({ path: join(OUT, `${name}-${w}${colorScheme === 'dark' ? '-dark' : ''}.png`), fullPage: true });
    }
  }
} finally {
  await browser.close();
  child?.kill();
}
