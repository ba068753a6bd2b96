// End-to-end tests of the portal's sortable tables, the tree opening in
// place and the overview refreshing itself (docs/portal.md "Portal islands"), in
// headless Chromium at 1440×900 and 390×844, with JavaScript off and (when
// the server has the islands bundle) on. Each step's screenshot goes to
// e2e/artifacts/islands-*.png.
//
//   BIZRQ_BIN=… [BIZRQ_ISLANDS_DIR=dir] [E2E_REQUIRE_JS=1] node islands.mjs
//
// Without BIZRQ_ISLANDS_DIR only the JavaScript-off half runs (every page
// must work with links and forms alone); E2E_REQUIRE_JS=1 makes that a
// failure, and also fails when the bundle does not hydrate a page.

import { chromium } from 'playwright-core';
import { ARTIFACTS, BIN, CHROMIUM, ISLANDS, PASSWORD, TOKEN, expect, readable, readability, requireBundle, startServer as start } from './common.mjs';
import { rmSync } from 'node:fs';
import { join } from 'node:path';

requireBundle();
const startServer = () => start('islands');

let n = 0;
let failed = false;
async function step(page, name, fn) {
  n += 1;
  process.stdout.write(`islands ${n}. ${name} … `);
  try {
    await fn();
    await page.screenshot({ path: join(ARTIFACTS, `islands-${String(n).padStart(2, '0')}-${name}.png`), fullPage: true });
    console.log('ok');
  } catch (e) {
    failed = true;
    console.log('FAILED');
    console.error(e);
    try { await page.screenshot({ path: join(ARTIFACTS, `islands-${String(n).padStart(2, '0')}-${name}-FAILED.png`), fullPage: true }); } catch { /* ignore */ }
  }
}

async function login(page, base, user = 'admin') {
  await page.goto(`${base}/login`);
  await page.fill('input[name=username]', user);
  await page.fill('input[name=password]', PASSWORD);
  await Promise.all([page.waitForLoadState('load'), page.click('form button[type=submit]')]);
}

/** Loads `path`; with scripts, waits until the bundle hydrated the page. */
async function open(page, base, path, js) {
  await page.goto(`${base}${path}`);
  if (js) await page.waitForFunction(() => document.documentElement.dataset.islands === 'ready', null, { timeout: 30_000 });
  await page.evaluate(() => { window.__stayed = true; });
}

async function stayed(page) {
  return page.evaluate(() => window.__stayed === true);
}


/** The cells of column `col` of the first table matching `sel`: each one's
 *  data-sort-value (or its text). */
async function column(page, sel, col) {
  return page.$eval(sel, (t, col) => [...t.tBodies[0].rows]
    .filter((r) => !r.hasAttribute('data-static'))
    .map((r) => { const c = r.cells[col]; return c.dataset.sortValue ?? c.textContent.trim(); }), col);
}

/** Whether `values` are in order (numbers exactly, as BigInt; blanks last). */
function ordered(values, numeric, desc) {
  const blank = (v) => v === '' || v === '—';
  for (let i = 1; i < values.length; i++) {
    const [a, b] = [values[i - 1], values[i]];
    if (blank(b)) continue;
    if (blank(a)) return false;
    let c;
    if (numeric) { const [x, y] = [BigInt(a), BigInt(b)]; c = x < y ? -1 : x > y ? 1 : 0; } else c = a.toLowerCase() < b.toLowerCase() ? -1 : a.toLowerCase() > b.toLowerCase() ? 1 : 0;
    if (desc ? c < 0 : c > 0) return false;
  }
  return true;
}

const api = (base) => async (method, path, body) => {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: r.status, json: r.headers.get('content-type')?.includes('json') ? await r.json() : await r.text() };
};

/** Sets `key` of quota `name` to `value` (the quota as stored, version kept). */
async function setHard(call, name, key, value) {
  const { json: q } = await call('GET', `/api/v1/quotas/${name}`);
  q.spec.hard[key] = value;
  const r = await call('PUT', `/api/v1/quotas/${name}`, { apiVersion: q.apiVersion, kind: q.kind, metadata: { name, resourceVersion: q.metadata.resourceVersion }, spec: q.spec });
  expect(r.status < 300, `PUT ${name} ${key}=${value}: ${r.status} ${JSON.stringify(r.json).slice(0, 300)}`);
}

const { child, base, dir } = await startServer();
const call = api(base);
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
try {
  // Open alerts to sort: leaves of the demo with a key in use, brought to
  // 100 % of it (each opens a critical usage alert within 250 ms).
  const { json: list } = await call('GET', '/api/v1/quotas');
  const quotas = list.items || list;
  const leaves = quotas.filter((q) => !quotas.some((c) => c.spec.parent === q.metadata.name));
  let raised = 0;
  for (const q of leaves) {
    const used = (q.status && q.status.used) || {};
    const key = Object.keys(q.spec.hard || {}).find((k) => !k.startsWith('cash/') && /^\d+$/.test(used[k] || '') && Number(used[k]) > 0 && used[k] !== q.spec.hard[k]);
    if (key && raised < 4) { await setHard(call, q.metadata.name, key, used[key]); raised += 1; }
  }
  expect(raised >= 3, `three leaves brought to 100 % (${raised})`);
  await new Promise((r) => setTimeout(r, 1500));

  for (const js of ISLANDS ? [false, true] : [false]) {
    for (const [w, h] of [[1440, 900], [390, 844]]) {
      const ctx = await browser.newContext({ javaScriptEnabled: js, viewport: { width: w, height: h } });
      const page = await ctx.newPage();
      await login(page, base);
      const tag = `${js ? 'js' : 'nojs'}-${w}`;
      const OPEN = 'table.alerts';

      // ---- /alerts, sorted on the server (links, or the form on a phone) and in place ----
      if (w === 1440) {
        await step(page, `alerts-sort-by-header-${tag}`, async () => {
          await open(page, base, '/alerts', js);
          const rows = await page.$$eval(`${OPEN} tbody tr`, (r) => r.length);
          expect(rows >= 3, `at least three open alerts (${rows})`);
          expect(await page.getAttribute(`${OPEN} th[data-sort-key=level]`, 'aria-sort') === 'descending', 'worst first by default');
          // Quota, A to Z; then again: Z to A.
          for (const [dir, desc] of [['asc', false], ['desc', true]]) {
            if (js) {
              await page.click(`${OPEN} th[data-sort-key=quota]`);
              expect(await stayed(page), 'sorted in place: no reload');
            } else {
              await Promise.all([page.waitForLoadState('load'), page.click(`${OPEN} th[data-sort-key=quota] a`)]);
            }
            expect(page.url().includes(`sort=quota`) && page.url().includes(`dir=${dir}`), `the address says quota ${dir}: ${page.url()}`);
            expect(await page.getAttribute(`${OPEN} th[data-sort-key=quota]`, 'aria-sort') === (desc ? 'descending' : 'ascending'), 'aria-sort follows');
            const names = await column(page, OPEN, 1);
            expect(ordered(names, false, desc), `quotas ${dir}: ${names.join(', ')}`);
          }
          // Opened: newest first, by the exact time.
          if (js) await page.click(`${OPEN} th[data-sort-key=since]`);
          else await Promise.all([page.waitForLoadState('load'), page.click(`${OPEN} th[data-sort-key=since] a`)]);
          const times = await column(page, OPEN, 4);
          expect(times.every((t) => /^\d+$/.test(t)), `opened cells carry their time in ms: ${times.slice(0, 3)}`);
          expect(ordered(times, true, true), `newest first: ${times.join(', ')}`);
          // The server's order after a reload is the order shown.
          await page.reload();
          expect(ordered(await column(page, OPEN, 4), true, true), 'the reloaded page keeps the order');
          await readable(page, `/alerts ${tag}`);
        });
      } else {
        await step(page, `alerts-sort-by-form-${tag}`, async () => {
          await open(page, base, '/alerts', js);
          expect(!(await page.isVisible(`${OPEN} thead`)), 'a phone shows cards, no header row');
          await page.selectOption('select[name=sort]', 'since');
          await page.selectOption('select[name=dir]', 'asc');
          await Promise.all([page.waitForLoadState('load'), page.click('form.card.inline button[type=submit]')]);
          expect(page.url().includes('sort=since') && page.url().includes('dir=asc'), `the address says since asc: ${page.url()}`);
          const times = await column(page, OPEN, 4);
          expect(ordered(times, true, false), `oldest first: ${times.join(', ')}`);
          expect(await page.$eval('select[name=sort]', (s) => s.value) === 'since', 'the form shows the sort');
          await readable(page, `/alerts ${tag}`);
        });
      }
      if (!js && w === 1440) {
        await step(page, 'alerts-sort-parameters-are-checked', async () => {
          for (const [q, want] of [['sort=bogus', 422], ['dir=up', 422], ['sort=level&dir=asc', 200], ['open_from=x', 400], ['open_from=999999999&sort=state', 200]]) {
            const r = await page.request.get(`${base}/alerts?${q}`, { maxRedirects: 0 });
            expect(r.status() === want, `/alerts?${q}: ${r.status()}, wanted ${want}`);
            if (want === 422) expect((await r.text()).includes('must be'), `/alerts?${q} says what it takes`);
          }
        });
      }

      // ---- flat tables sorted in place by exact values (scripts on) ----
      if (js && w === 1440) {
        await step(page, 'tables-sort-in-place-by-exact-values', async () => {
          const cases = [
            ['/quotas/research', 'table.keys-table', 2, true, 'Hard'],
            ['/quotas/research', 'table.keys-table', 0, false, 'Key'],
            ['/users', 'table.users', 0, false, 'User'],
            ['/audit', 'table.audit', 1, false, 'Who'],
            ['/transfers', 'table.transfers', 0, true, '#'],
          ];
          for (const [path, sel, col, numeric, label] of cases) {
            await open(page, base, path, true);
            const th = `${sel} thead th:nth-child(${col + 1})`;
            const first = await page.getAttribute(th, 'data-sort-first');
            await page.click(th);
            let desc = first === 'desc';
            expect(await page.getAttribute(th, 'aria-sort') === (desc ? 'descending' : 'ascending'), `${path} ${label}: aria-sort after a click`);
            expect(ordered(await column(page, sel, col), numeric, desc), `${path} ${label} sorted ${desc ? 'down' : 'up'}: ${(await column(page, sel, col)).join(', ')}`);
            await page.click(th);
            desc = !desc;
            expect(await page.getAttribute(th, 'aria-sort') === (desc ? 'descending' : 'ascending'), `${path} ${label}: the other way on a second click`);
            expect(ordered(await column(page, sel, col), numeric, desc), `${path} ${label} sorted the other way`);
            expect(await stayed(page), `${path}: no reload`);
            await readable(page, `${path} sorted`);
          }
        });
        await step(page, 'tables-sort-by-keyboard', async () => {
          // A header with no link of the server's is focusable once the
          // island runs, and Enter or Space sorts as a click does.
          await open(page, base, '/users', true);
          const th = 'table.users thead th:nth-child(1)';
          await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('tabindex') === '0', th, { timeout: 15_000 });
          await page.focus(th);
          await page.keyboard.press('Enter');
          const after = await page.getAttribute(th, 'aria-sort');
          expect(after === 'ascending' || after === 'descending', `Enter sorts: aria-sort ${after}`);
          await page.keyboard.press(' ');
          const again = await page.getAttribute(th, 'aria-sort');
          expect(again && again !== after, `Space sorts the other way: ${after} then ${again}`);
          expect(await stayed(page), 'no reload, no scroll by Space');
        });
      }

      // ---- the tree: ▸/▾ in place, each level sorted, children under their parent ----
      await step(page, `tree-open-and-fold-${tag}`, async () => {
        await open(page, base, '/tree?depth=1', js);
        const folded = await page.$eval('table.tree', (t) => {
          const r = [...t.tBodies[0].rows].find((r) => r.querySelector('a.toggle[aria-expanded=false]'));
          return r && { name: r.id, depth: Number(r.dataset.depth), children: Number(r.dataset.children) };
        });
        expect(folded, 'a folded row');
        const link = `tr[id="${folded.name}"] a.toggle`;
        const under = () => page.$eval('table.tree', (t, name) => {
          const rows = [...t.tBodies[0].rows];
          const i = rows.findIndex((r) => r.id === name);
          const d = Number(rows[i].dataset.depth);
          const out = [];
          for (const r of rows.slice(i + 1)) { if (Number(r.dataset.depth) <= d) break; out.push(`${r.id}@${r.dataset.depth}`); }
          return out;
        }, folded.name);
        expect((await under()).length === 0, 'nothing shown under a folded row');
        if (js) await page.click(link);
        else await Promise.all([page.waitForLoadState('load'), page.click(link)]);
        if (js) await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('aria-expanded') === 'true', link, { timeout: 15_000 });
        const shown = await under();
        expect(shown.length === folded.children, `its ${folded.children} children shown: ${shown}`);
        expect(page.url().includes(`open=${folded.name}`), `the address says it is open: ${page.url()}`);
        // What the page without scripts shows under it: the same rows.
        const server = await page.evaluate(async (u) => {
          const html = await (await fetch(u)).text();
          const doc = new DOMParser().parseFromString(html, 'text/html');
          return [...doc.querySelectorAll('table.tree tbody tr')].map((r) => `${r.id}@${r.dataset.depth}`);
        }, `/tree?depth=1&open=${encodeURIComponent(folded.name)}`);
        const i = server.findIndex((s) => s.startsWith(`${folded.name}@`));
        expect(JSON.stringify(server.slice(i + 1, i + 1 + shown.length)) === JSON.stringify(shown), `the rows are the server's: ${shown} vs ${server.slice(i + 1, i + 1 + shown.length)}`);
        if (js) expect(await stayed(page), 'opened in place: no reload');
        await readable(page, `/tree opened ${tag}`);
        // ▾ folds it again.
        if (js) await page.click(link);
        else await Promise.all([page.waitForLoadState('load'), page.click(link)]);
        expect((await under()).length === 0, 'folded again');
        expect(await page.getAttribute(link, 'aria-expanded') === 'false', 'the toggle says folded');
        expect((await page.innerText(`tr[id="${folded.name}"] small.folded`)).includes('below'), 'the row says how many are below');
        expect(!page.url().includes(`open=${folded.name}`), `the address no longer opens it: ${page.url()}`);
        if (js) expect(await stayed(page), 'folded in place: no reload');
      });

      await step(page, `tree-sort-keeps-children-under-parents-${tag}`, async () => {
        await open(page, base, '/tree', js);
        const shape = () => page.$eval('table.tree', (t) => {
          const rows = [...t.tBodies[0].rows];
          const parent = {};
          const stack = [];
          for (const r of rows) {
            const d = Number(r.dataset.depth);
            while (stack.length && Number(stack[stack.length - 1].dataset.depth) >= d) stack.pop();
            parent[r.id] = stack.length ? stack[stack.length - 1].id : '';
            stack.push(r);
          }
          return { parent, rows: rows.map((r) => ({ id: r.id, depth: Number(r.dataset.depth), w: r.querySelector('td.workloads').dataset.sortValue })) };
        });
        const before = await shape();
        const th = 'table.tree th[data-sort-key=workloads]';
        if (w < 640) {
          // A phone shows no header row: "Sort by" in the form.
          await page.selectOption('form.filters select[name=sort]', 'workloads');
          await Promise.all([page.waitForLoadState('load'), page.click('form.filters button[type=submit]')]);
        } else if (js) await page.click(th);
        else await Promise.all([page.waitForLoadState('load'), page.click(`${th} a`)]);
        const after = await shape();
        expect(page.url().includes('sort=workloads'), `the address says workloads: ${page.url()}`);
        expect(await page.getAttribute(th, 'aria-sort') === 'descending', 'aria-sort: busiest first');
        const parents = (p) => JSON.stringify(Object.entries(p).sort());
        expect(parents(after.parent) === parents(before.parent), 'every quota keeps its parent');
        // Siblings: busiest first.
        const sibs = {};
        for (const r of after.rows) (sibs[after.parent[r.id]] ||= []).push(r.w);
        for (const [p, ws] of Object.entries(sibs)) expect(ordered(ws, true, true), `children of ${p || 'the top'} busiest first: ${ws}`);
        if (js && w >= 640) expect(await stayed(page), 'sorted in place: no reload');
        await readable(page, `/tree sorted ${tag}`);
      });

      // A GPU model's column sorts like the others, from the keyboard
      // too (Enter on the header's link): fullest first, quotas without
      // the model last, children under their parent.
      await step(page, `tree-sort-by-a-gpu-model-${tag}`, async () => {
        await open(page, base, '/tree', js);
        const key = 'model:A100';
        const th = `table.tree th[data-sort-key="${key}"]`;
        if (w < 640) {
          await page.selectOption('form.filters select[name=sort]', key);
          await Promise.all([page.waitForLoadState('load'), page.click('form.filters button[type=submit]')]);
        } else {
          await page.focus(`${th} a`);
          if (js) await page.keyboard.press('Enter');
          else await Promise.all([page.waitForURL(/sort=model/), page.keyboard.press('Enter')]);
        }
        expect(/sort=model(%3A|:)A100/.test(page.url()), `the address says the A100 column: ${page.url()}`);
        expect(await page.getAttribute(th, 'aria-sort') === 'descending', 'aria-sort: fullest first');
        const sibs = await page.$eval('table.tree', (t, key) => {
          const col = [...t.tHead.rows[0].cells].findIndex((h) => h.dataset.sortKey === key);
          const out = {};
          const stack = [];
          for (const r of t.tBodies[0].rows) {
            const d = Number(r.dataset.depth);
            while (stack.length && Number(stack[stack.length - 1].dataset.depth) >= d) stack.pop();
            const parent = stack.length ? stack[stack.length - 1].id : '';
            const v = r.cells[col].dataset.sortValue;
            (out[parent] ||= []).push(v === '' || v === undefined ? -1 : Number(v));
            stack.push(r);
          }
          return out;
        }, key);
        for (const [p, vs] of Object.entries(sibs)) {
          expect(vs.every((v, i) => i === 0 || vs[i - 1] >= v), `children of ${p || 'the top'} fullest A100 first: ${vs}`);
        }
        if (js && w >= 640) expect(await stayed(page), 'sorted in place: no reload');
      });

      if (!js && w === 1440) {
        await step(page, 'tree-rows-endpoint-checks-what-it-is-asked', async () => {
          for (const [q, want] of [['parent=', 422], ['parent=no-such-quota', 404], ['parent=research&at=99999', 422], ['parent=research&at=1&depth=x', 400], ['parent=research&at=1&depth=1', 200]]) {
            const r = await page.request.get(`${base}/tree/rows?${q}`, { maxRedirects: 0 });
            expect(r.status() === want, `/tree/rows?${q}: ${r.status()}, wanted ${want}`);
          }
          const rows = await (await page.request.get(`${base}/tree/rows?parent=research&at=1&depth=1`)).text();
          expect(rows.startsWith('<tr') && rows.includes('data-depth="2"'), `rows under research at depth 2: ${rows.slice(0, 120)}`);
          // Nobody signed in: the login page, never the rows.
          const anon = await fetch(`${base}/tree/rows?parent=research&at=1`, { redirect: 'manual' });
          expect(anon.status === 303 || anon.status === 302 || anon.status === 307, `anonymous: ${anon.status}`);
          // A member sees only its subtree: another team's rows are not found.
          const member = await browser.newContext({ javaScriptEnabled: false });
          const mp = await member.newPage();
          await login(mp, base, 'member-nlp');
          const other = await mp.request.get(`${base}/tree/rows?parent=vision&at=0`, { maxRedirects: 0 });
          expect(other.status() === 404, `member-nlp asking for vision's rows: ${other.status()}`);
          await member.close();
          const noauth = await fetch(`${base}/api/v1/live/overview`);
          expect(noauth.status === 401, `the overview's live parts need a caller: ${noauth.status}`);
          const { status, json } = await call('GET', '/api/v1/live/overview');
          expect(status === 200 && Array.isArray(json.cards) && json.attention.includes('Needs attention'), `the live overview: ${status} ${JSON.stringify(json).slice(0, 200)}`);
        });
      }

      // ---- the overview redraws itself ----
      await step(page, `overview-refreshes-${tag}`, async () => {
        await open(page, base, '/', js);
        await readable(page, `/ ${tag}`);
        if (!js) {
          expect(await page.$('section.quota-card[data-quota] .keys'), 'cards with their bars');
          return;
        }
        const root = await page.getAttribute('section.quota-card[data-quota]', 'data-quota');
        const { json: q } = await call('GET', `/api/v1/quotas/${root}`);
        const key = Object.keys(q.spec.hard).find((k) => /^\d+$/.test(q.spec.hard[k]) && !k.startsWith('cash/'));
        expect(key, `${root} has a key with a whole-number hard`);
        const next = String(Number(q.spec.hard[key]) + (js && w === 390 ? 2 : 1));
        // An over-quota leaf for "needs attention".
        const leaf = leaves.find((l) => /^\d+$/.test(l.status?.used?.['requests.nvidia.com/gpu'] || '') && Number(l.status.used['requests.nvidia.com/gpu']) >= 2 && !l.__over);
        // textContent: the key may sit in the card's closed "Other keys" fold.
        const cardText = () => page.textContent(`section.quota-card[data-quota="${root}"] .keys`);
        const before = await cardText();
        // A fold the person opened stays open through the redraw.
        const fold = `section.quota-card[data-quota="${root}"] .keys details`;
        const folded = await page.$(fold);
        if (folded) await page.$eval(fold, (d) => { d.open = true; });
        await setHard(call, root, key, next);
        if (leaf) {
          leaf.__over = true;
          await setHard(call, leaf.metadata.name, 'requests.nvidia.com/gpu', String(Number(leaf.status.used['requests.nvidia.com/gpu']) - 1));
        }
        await page.waitForFunction(([sel, b]) => document.querySelector(sel)?.textContent !== b, [`section.quota-card[data-quota="${root}"] .keys`, before], { timeout: 45_000, polling: 500 });
        expect((await cardText()).includes(`of ${Number(next).toLocaleString('en-US')}`), `the card shows the new hard ${next}: ${(await cardText()).slice(0, 300)}`);
        if (leaf) {
          await page.waitForFunction((name) => (document.querySelector('section.attention')?.innerText || '').includes(`${name} is over quota`), leaf.metadata.name, { timeout: 45_000, polling: 500 });
        }
        if (folded) expect(await page.$eval(fold, (d) => d.open), 'the opened fold stays open after the refresh');
        expect(await stayed(page), 'no reload');
        await readable(page, `/ refreshed ${tag}`);
      });

      await ctx.close();
    }
  }
} finally {
  await browser.close();
  child.kill();
  rmSync(dir, { recursive: true, force: true });
}
if (failed) { console.error('islands e2e: FAILED'); process.exit(1); }
console.log(`islands e2e: all ${n} steps passed (JavaScript ${ISLANDS ? 'off and on' : 'off only: no BIZRQ_ISLANDS_DIR'})`);
