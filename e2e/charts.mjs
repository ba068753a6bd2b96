// End-to-end tests of the quota page's charts and the portal's islands, in
// headless Chromium at 1440×900 and 390×844, with JavaScript off and (when
// the server has the islands bundle) on. Screenshots go to e2e/artifacts/.
//
//   BIZRQ_BIN=… [BIZRQ_ISLANDS_DIR=dir] node charts.mjs
//
// With BIZRQ_ISLANDS_DIR (wasm-bindgen's output, docs/portal.md "Portal islands")
// the JS-on tests run too; E2E_REQUIRE_JS=1 makes its absence a failure.

import { chromium } from 'playwright-core';
import { ARTIFACTS, BIN, CHROMIUM, ISLANDS, PASSWORD, TOKEN, expect, readable, readability, requireBundle, startServer as start } from './common.mjs';
import { rmSync } from 'node:fs';
import { join } from 'node:path';

requireBundle();
const startServer = () => start('charts');

let n = 0;
let failed = false;
async function step(page, name, fn) {
  n += 1;
  process.stdout.write(`charts ${n}. ${name} … `);
  try {
    await fn();
    console.log('ok');
  } catch (e) {
    failed = true;
    console.log('FAILED');
    console.error(e);
    try { await page.screenshot({ path: join(ARTIFACTS, `charts-${n}-${name}-FAILED.png`), fullPage: true }); } catch { /* ignore */ }
  }
}

async function login(page, base) {
  await page.goto(`${base}/login`);
  await page.fill('input[name=username]', 'admin');
  await page.fill('input[name=password]', PASSWORD);
  await Promise.all([page.waitForLoadState('load'), page.click('form button[type=submit]')]);
}

/** Chart text as rendered: font size × the SVG's scale, for visible SVGs. */
async function smallestChartText(page) {
  return page.evaluate(() => {
    let min = Infinity;
    for (const svg of document.querySelectorAll('svg.chart')) {
      const r = svg.getBoundingClientRect();
      if (r.width === 0) continue;
      const scale = r.width / svg.viewBox.baseVal.width;
      for (const t of svg.querySelectorAll('text')) {
        const size = parseFloat(t.getAttribute('font-size') || getComputedStyle(t).fontSize);
        min = Math.min(min, size * scale);
      }
    }
    return min;
  });
}

async function overflow(page) {
  return page.evaluate(() => ({
    page: document.documentElement.scrollWidth - window.innerWidth,
    charts: [...document.querySelectorAll('.chart-section')].map((s) => s.scrollWidth - s.clientWidth).reduce((a, b) => Math.max(a, b), 0),
  }));
}

const { child, base, dir } = await startServer();
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
try {
  // research is a parent (its children stacked), speech a leaf.
  const pages = [['parent', '/quotas/research'], ['leaf', '/quotas/speech']];
  for (const js of ISLANDS ? [false, true] : [false]) {
    for (const [w, h] of [[1440, 900], [390, 844]]) {
      const ctx = await browser.newContext({ javaScriptEnabled: js, viewport: { width: w, height: h } });
      const page = await ctx.newPage();
      await login(page, base);
      const tag = `${js ? 'js' : 'nojs'}-${w}`;
      for (const [kind, path] of pages) {
        await step(page, `${kind}-${tag}-readable-with-values`, async () => {
          await page.goto(`${base}${path}`);
          if (js) await page.waitForFunction(() => document.documentElement.dataset.islands === 'ready', null, { timeout: 30_000 });
          const panels = await page.$$('.chart-panel');
          expect(panels.length >= 1, `${path} has charts (${panels.length})`);
          const tables = await page.$$eval('.chart-panel details.values table tbody tr', (r) => r.length);
          expect(tables >= panels.length, `every chart has a values table (${tables} rows for ${panels.length} charts)`);
          const min = await smallestChartText(page);
          expect(min >= 11.95, `no chart text under 12 px (smallest ${min.toFixed(2)} px)`);
          const o = await overflow(page);
          expect(o.page <= 0 && o.charts <= 0, `no horizontal overflow (page ${o.page} px, charts ${o.charts} px)`);
          if (kind === 'parent') expect(await page.$('.chart-panel[data-chart=children]'), 'a parent stacks its children');
          await page.screenshot({ path: join(ARTIFACTS, `quota-${kind}-${w}-${js ? 'js' : 'nojs'}.png`), fullPage: true });
        });
      }
      await step(page, `range-picker-${tag}`, async () => {
        await page.goto(`${base}/quotas/research`);
        if (js) await page.waitForFunction(() => document.documentElement.dataset.islands === 'ready', null, { timeout: 30_000 });
        const before = await page.$eval('.chart-panel svg.chart', (s) => s.getAttribute('data-t0'));
        const firstRow = () => page.$eval('.chart-panel details.values tbody tr', (r) => r.textContent);
        const rowsBefore = await firstRow();
        await page.evaluate(() => { window.__stayed = true; });
        if (js) {
          await page.click('a[data-range="30d"]');
          await page.waitForFunction((b) => {
            const s = document.querySelector('.chart-panel svg.chart');
            return s && s.getAttribute('data-t0') !== b && !document.querySelector('.chart-panel[aria-busy]');
          }, before, { timeout: 20_000 });
          expect(await page.evaluate(() => window.__stayed === true), 'no navigation: the page stayed');
        } else {
          await Promise.all([page.waitForLoadState('load'), page.click('a[data-range="30d"]')]);
        }
        expect(page.url().includes('range=30d'), `the address names the range: ${page.url()}`);
        expect((await page.getAttribute('a[data-range="30d"]', 'aria-current')) === 'true', '30 d is marked current');
        expect((await page.innerText('.chart-head h3')).includes('last 30 days'), 'the heading names the range');
        const after = await page.$eval('.chart-panel svg.chart', (s) => s.getAttribute('data-t0'));
        expect(after !== before, 'the chart covers another span');
        const rowsAfter = await firstRow();
        expect(rowsAfter !== rowsBefore, `the values table follows (first row ${rowsBefore} → ${rowsAfter})`);
        // The links to the other keys' charts open them in the range shown.
        const others = await page.$$eval('.other-charts a[href*="/charts"]', (as) => as.map((a) => a.getAttribute('href')));
        expect(others.length > 0, 'research links its other keys\' charts');
        const stale = others.filter((h) => !h.includes('range=30d') || h.includes('range=7d'));
        expect(stale.length === 0, `the other charts' links name 30 d: ${stale.join(' ')}`);
        await page.screenshot({ path: join(ARTIFACTS, `range-30d-${tag}.png`), fullPage: false });
      });
      if (js) {
        await step(page, `hover-readout-${tag}`, async () => {
          const svg = (await page.$$('.chart-panel svg.chart')).find(async (s) => (await s.boundingBox())?.width > 0);
          const panel = await page.$('.chart-panel');
          const shown = await panel.$$('svg.chart');
          let box;
          for (const s of shown) { const b = await s.boundingBox(); if (b && b.width > 0) { box = b; break; } }
          expect(svg && box, 'a chart is shown');
          await page.mouse.move(box.x + box.width * 0.6, box.y + box.height * 0.5);
          await page.mouse.move(box.x + box.width * 0.62, box.y + box.height * 0.5);
          await page.waitForFunction(() => (document.querySelector('.chart-panel .readout')?.textContent || '').includes('UTC'), null, { timeout: 10_000 });
          const text = await page.innerText('.chart-panel .readout');
          expect(/UTC · /.test(text), `the readout names a time and values: ${text}`);
        });
      }
      // Allocated against used (docs/real-usage.md) on the demo: mlops's
      // notebook pool was left open on Friday evening. Its chart is a panel
      // of the page's grid, sized as the others, with figures in units; the
      // overview lists the notebook under "Idle now" in human words.
      await step(page, `real-usage-${tag}`, async () => {
        await page.goto(`${base}/quotas/mlops`);
        if (js) await page.waitForFunction(() => document.documentElement.dataset.islands === 'ready', null, { timeout: 30_000 });
        const grid = await page.evaluate(() => {
          const panels = [...document.querySelectorAll('.chart-panels > .chart-panel')];
          const eff = panels.find((p) => p.dataset.chart === 'efficiency');
          const width = (p) => p.getBoundingClientRect().width;
          const shown = (p) => [...p.querySelectorAll('svg.chart')].find((s) => s.getBoundingClientRect().width > 0);
          return eff && {
            widths: panels.map(width),
            eff: width(eff),
            viewBox: shown(eff)?.getAttribute('viewBox'),
            others: panels.filter((p) => p !== eff).map((p) => shown(p)?.getAttribute('viewBox')),
            title: eff.querySelector('h4').innerText,
            summary: eff.querySelector('.hint')?.innerText || '',
            rows: [...eff.querySelectorAll('details.values tbody tr')].map((r) => [...r.cells].map((c) => c.textContent)),
          };
        });
        expect(grid, 'the efficiency chart is a panel of the chart grid');
        expect(grid.others.every((v) => v === grid.viewBox), `drawn in the others' frame: ${grid.viewBox} vs ${grid.others}`);
        expect(grid.widths.every((w) => Math.abs(w - grid.eff) <= 1), `as wide as the other panels: ${grid.eff} vs ${grid.widths}`);
        expect(/allocated against busy/.test(grid.title), `its heading: ${grid.title}`);
        expect(/^[\d,.]+\scard-hours allocated, [\d,.]+\scard-hours busy: [\d.]+\s% efficiency, [\d,.]+\scard-hours idle/.test(grid.summary), `its figures with units: ${grid.summary}`);
        expect(grid.rows.length > 0, 'its values table has rows');
        const unitless = grid.rows.filter((r) => !(/card-hours$/.test(r[1]) && /card-hours$/.test(r[2]) && /%$|^unknown$/.test(r[3]) && /card-hours$/.test(r[4])));
        expect(unitless.length === 0, `every value with its unit: ${JSON.stringify(unitless.slice(0, 3))}`);
        const section = await page.innerText('section.real-usage');
        expect(section.startsWith('Allocated against used'), `the section: ${section.slice(0, 80)}`);
        expect(!(await page.$('section.real-usage figure')), 'no chart of its own outside the grid');
        const totals = await page.$$eval('dl.efficiency-total dd', (d) => d.map((e) => e.textContent));
        expect(totals.length === 4 && /card-hours$/.test(totals[0]) && /%$/.test(totals[2]), `totals with units: ${totals}`);
        expect(/notebook-pool[^\n]*idle for [\d.]+ days: [\d,.]+ card-hours/.test(section), `the notebook idle for days: ${section}`);
        expect(!/\d+d\d+h|\d+h\d+m/.test(section), `no compact durations: ${section}`);
        expect(await smallestChartText(page) >= 11.95, 'no chart text under 12 px');
        await readable(page, `mlops at ${w} px`);
        if (js) {
          // The island: the range switches the efficiency chart in place too,
          // and the pointer reads out cards allocated and busy.
          const t0 = () => page.$eval('.chart-panel[data-chart=efficiency] svg.chart', (s) => s.getAttribute('data-t0'));
          const before = await t0();
          await page.click('a[data-range="30d"]');
          await page.waitForFunction((b) => {
            const s = document.querySelector('.chart-panel[data-chart=efficiency] svg.chart');
            return s && s.getAttribute('data-t0') !== b && !document.querySelector('.chart-panel[aria-busy]');
          }, before, { timeout: 20_000 });
          // The pointer is moved in the viewport: the panel is brought into it.
          await page.$eval('.chart-panel[data-chart=efficiency]', (p) => p.scrollIntoView({ block: 'center' }));
          const shown = await page.$$('.chart-panel[data-chart=efficiency] svg.chart');
          let box;
          for (const sv of shown) { const b = await sv.boundingBox(); if (b && b.width > 0) { box = b; break; } }
          await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.5);
          await page.mouse.move(box.x + box.width * 0.52, box.y + box.height * 0.5);
          await page.waitForFunction(() => /allocated .* cards?, busy/.test(document.querySelector('.chart-panel[data-chart=efficiency] .readout')?.textContent || ''), null, { timeout: 10_000 });
        }
        await page.screenshot({ path: join(ARTIFACTS, `real-usage-mlops-${tag}.png`), fullPage: true });
        await page.goto(`${base}/`);
        if (js) await page.waitForFunction(() => document.documentElement.dataset.islands === 'ready', null, { timeout: 30_000 });
        const idle = await page.innerText('section.idle-now-section');
        expect(/^Idle now/.test(idle), `the overview's Idle now: ${idle.slice(0, 80)}`);
        expect(/notebook-pool in mlops[^\n]*: \d+ A30 GPUs idle for (2\.\d|3) days: [\d,.]+ card-hours/.test(idle), `the weekend notebook, in human words with its card-hours: ${idle}`);
        expect(!/\d+d\d+h|\d+h\d+m/.test(idle), `no compact durations: ${idle}`);
        await readable(page, `the overview at ${w} px`);
        await page.screenshot({ path: join(ARTIFACTS, `real-usage-overview-${tag}.png`), fullPage: true });
      });
      if (js && w === 1440) {
        await step(page, 'alerts-badge-updates-without-reload', async () => {
          await page.goto(`${base}/quotas/speech`);
          await page.waitForFunction(() => document.documentElement.dataset.islands === 'ready', null, { timeout: 30_000 });
          const count = async () => page.evaluate(() => {
            const b = document.querySelector('nav .badge');
            return b && !b.hidden ? Number(b.textContent.trim()) : 0;
          });
          const before = await count();
          await page.evaluate(() => { window.__stayed = true; });
          // Open an alert: a quota's hard set to what it uses (100 %).
          const auth = { Authorization: `Bearer ${TOKEN}` };
          const list = await (await fetch(`${base}/api/v1/quotas`, { headers: auth })).json();
          const items = list.items || list;
          let changed = null;
          for (const q of items) {
            const hard = q.spec.hard || {};
            const used = (q.status && q.status.used) || {};
            // A GPU key: the default alert rules watch GPUs and budgets.
            const key = Object.keys(hard).find((k) => /^requests\.nvidia\.com\/gpu/.test(k) && used[k] && used[k] !== '0' && used[k] !== hard[k]
              && !items.some((c) => c.spec.parent === q.metadata.name));
            if (key) {
              q.spec.hard[key] = used[key];
              const r = await fetch(`${base}/api/v1/quotas/${q.metadata.name}`, { method: 'PUT', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify({ apiVersion: q.apiVersion, kind: q.kind, metadata: { name: q.metadata.name, resourceVersion: q.metadata.resourceVersion }, spec: q.spec }) });
              if (r.ok) { changed = `${q.metadata.name} ${key}`; break; }
            }
          }
          expect(changed, 'a quota could be brought to 100 % of a key');
          await page.waitForFunction((b) => {
            const e = document.querySelector('nav .badge');
            return e && !e.hidden && Number(e.textContent.trim()) > b;
          }, before, { timeout: 45_000, polling: 500 });
          expect(await page.evaluate(() => window.__stayed === true), 'no reload');
          console.log(`(badge ${before} → ${await count()} after ${changed}) `);
        });
      }
      await ctx.close();
    }
  }
} finally {
  await browser.close();
  child.kill();
  rmSync(dir, { recursive: true, force: true });
}
if (failed) { console.error('charts e2e: FAILED'); process.exit(1); }
console.log(`charts e2e: all ${n} steps passed (JavaScript ${ISLANDS ? 'off and on' : 'off only: no BIZRQ_ISLANDS_DIR'})`);
