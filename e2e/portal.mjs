// End-to-end tests of what issue 12 asked of the portal, as a user sees it,
// in headless Chromium at 1440×900 and 390×844, with JavaScript off and
// (when the server has the islands bundle) on: idle parents read idle,
// numbers read as amounts, the overview is a to-do list, risky actions need
// a second look, approvals show both ends, error pages keep the navigation,
// a user changes their password, dark mode, CSV exports, and the users page
// and key names on a phone; and what "one truth on every screen" asked of
// reports (they open on an answer, their CSV in card-hours, errors in
// words) and of forms (a 2-T4 child from the fields a person cares about,
// a refusal that says what to do, a transfer's key from a list).
// Screenshots go to e2e/artifacts/portal-*.png.
//
//   BIZRQ_BIN=… [BIZRQ_ISLANDS_DIR=dir] [E2E_REQUIRE_JS=1] node portal.mjs
//
// Without BIZRQ_ISLANDS_DIR only the JavaScript-off half runs;
// E2E_REQUIRE_JS=1 makes that a failure, and also fails when the bundle
// does not hydrate a page.

import { chromium } from 'playwright-core';
import { ARTIFACTS, BIN, CHROMIUM, ISLANDS, PASSWORD, TOKEN, expect, readable, readability, requireBundle, startServer as start } from './common.mjs';
import { readFileSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

requireBundle();
for (const f of readdirSync(ARTIFACTS)) if (f.startsWith('portal-')) rmSync(join(ARTIFACTS, f));
const startServer = () => start('portal');

let n = 0;
let failed = false;
async function step(page, name, fn) {
  n += 1;
  process.stdout.write(`portal ${n}. ${name} … `);
  const shot = join(ARTIFACTS, `portal-${String(n).padStart(2, '0')}-${name}`);
  try {
    await fn();
    await page.screenshot({ path: `${shot}.png`, fullPage: true });
    console.log('ok');
  } catch (e) {
    failed = true;
    console.log('FAILED');
    console.error(e);
    try { await page.screenshot({ path: `${shot}-FAILED.png`, fullPage: true }); } catch { /* ignore */ }
  }
}

async function login(page, base, user = 'admin', password = PASSWORD) {
  await page.context().clearCookies();
  await page.goto(`${base}/login`);
  await page.fill('input[name=username]', user);
  await page.fill('input[name=password]', password);
  await Promise.all([page.waitForLoadState('load'), page.click('form button[type=submit]')]);
  return !page.url().includes('/login');
}

/** Loads `path`; with scripts, waits until the bundle hydrated the page. */
async function open(page, base, path, js) {
  const r = await page.goto(`${base}${path}`);
  if (js) await page.waitForFunction(() => document.documentElement.dataset.islands === 'ready', null, { timeout: 30_000 });
  return r;
}

async function submit(page, selector) {
  await Promise.all([page.waitForLoadState('load'), page.click(selector)]);
}

/** With scripts: waits until the bundle hydrated the page. */
async function hydrated(page) {
  await page.waitForFunction(() => document.documentElement.dataset.islands === 'ready', null, { timeout: 30_000 });
}

/** Clicks the link `selector` as a person would and waits for the page it opens. */
async function follow(page, selector, js) {
  const to = new URL(await page.getAttribute(selector, 'href'), page.url());
  await Promise.all([page.waitForURL((u) => u.pathname === to.pathname && u.search === to.search), page.click(selector)]);
  if (js) await hydrated(page);
}


/** What a user reads: the visible text nodes outside charts (a line each),
 *  and the values and placeholders of the visible form fields. */
async function visibleText(page) {
  return page.evaluate(() => {
    const out = [];
    const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let t; (t = w.nextNode());) {
      const el = t.parentElement;
      if (!t.textContent.trim() || el.closest('svg, script, style, template') || !el.checkVisibility()) continue;
      out.push(t.textContent.trim());
    }
    for (const i of document.querySelectorAll('input:not([type=hidden]):not([type=checkbox]), textarea')) {
      if (!i.checkVisibility()) continue;
      if (i.value) out.push(`${i.name}: value ${i.value}`);
      if (i.placeholder) out.push(`${i.name}: placeholder ${i.placeholder}`);
    }
    return out;
  });
}

/** Lines a user would call raw numbers: nano-quantities (`5760024904445n`),
 *  long or ungrouped integers (`1099511627776`, `15000`), times not written
 *  `YYYY-MM-DD HH:MM UTC`. */
function rawNumbers(lines) {
  const bad = [];
  for (const line of lines) {
    const plain = line.replace(/\d{4}-\d\d-\d\d \d\d:\d\d UTC/g, '').replace(/\d{4}-\d\d-\d\d/g, '');
    if (/\d{10,}/.test(line)) bad.push(`long integer: ${line}`);
    else if (/\d+(?:n|u)\b/.test(plain)) bad.push(`nano/micro quantity: ${line}`);
    else if (/(^|[^\d.,\-#/])\d{5,}(?![\d-])/.test(plain) && !/: (value|placeholder) /.test(line)) bad.push(`ungrouped number: ${line}`);
    else if (!/: placeholder /.test(line) && /\d{4}-\d\d-\d\dT\d\d|\d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d(?! UTC)/.test(line)) bad.push(`time not as YYYY-MM-DD HH:MM UTC: ${line}`);
  }
  return bad;
}

const INTERNAL = /resourceVersion|internal error|ServiceError|sqlx|Conflict\(|Store\(|anyhow|panicked|\bErr\(|\{"/;

async function badgeCount(page) {
  return page.evaluate(() => {
    const b = document.querySelector('header nav .badge');
    return b && !b.hidden ? Number(b.textContent.trim()) : 0;
  });
}

async function hasNav(page) {
  return page.evaluate(() => ['/', '/tree', '/transfers', '/alerts'].every((h) => document.querySelector(`header nav a[href="${h}"]`)));
}

const api = (base) => async (method, path, body) => {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: r.status, json: r.headers.get('content-type')?.includes('json') ? await r.json() : await r.text() };
};

async function setHard(call, name, changes) {
  const { json: q } = await call('GET', `/api/v1/quotas/${name}`);
  Object.assign(q.spec.hard, changes);
  const r = await call('PUT', `/api/v1/quotas/${name}`, { apiVersion: q.apiVersion, kind: q.kind, metadata: { name, resourceVersion: q.metadata.resourceVersion }, spec: q.spec });
  expect(r.status < 300, `PUT ${name} ${JSON.stringify(changes)}: ${r.status} ${JSON.stringify(r.json).slice(0, 300)}`);
}

/** A Kubernetes quantity as an exact decimal (`5760024904445n` → `5760.024904445`,
 *  `20k` → `20000`), for comparing with the CSV exports. */
function exactDecimal(q) {
  const m = String(q).match(/^(\d+)(n|u|m|k|M|G)?$/);
  if (!m) throw new Error(`not a quantity this test reads: ${q}`);
  const exp = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9 }[m[2]] ?? 0;
  let digits = m[1];
  if (exp >= 0) return (BigInt(digits) * 10n ** BigInt(exp)).toString();
  digits = digits.padStart(-exp + 1, '0');
  const int = digits.slice(0, exp).replace(/^0+(?=\d)/, '');
  const frac = digits.slice(exp).replace(/0+$/, '');
  return frac ? `${int}.${frac}` : int;
}

const csrfOf = (page) => page.getAttribute('form.whoami input[name=csrf]', 'value');

const { child, base, dir } = await startServer();
const call = api(base);
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
// One demo user per run changes its password (JS off/on × two widths).
const passwordUsers = ['member-rl', 'member-infra', 'member-data', 'member-mlops'];
// One team per pass whose alerts the acknowledge step quiets.
const quietTeams = ['rl', 'infra', 'data', 'mlops'];
try {
  for (const js of ISLANDS ? [false, true] : [false]) {
    for (const [w, h] of [[1440, 900], [390, 844]]) {
      const ctx = await browser.newContext({ javaScriptEnabled: js, viewport: { width: w, height: h }, acceptDownloads: true });
      const page = await ctx.newPage();
      await login(page, base);
      const tag = `${js ? 'js' : 'nojs'}-${w}`;

      // ---- 1. A parent that carved out for children reads idle, not full ----
      await step(page, `parents-read-idle-not-full-${tag}`, async () => {
        await open(page, base, '/quotas/research', js);
        const legend = await page.$$eval('main p.legend i', (is) => is.map((i) => [i.className, getComputedStyle(i).backgroundColor]));
        expect(legend.map(([c]) => c).join(' ') === 'use idle free', `the legend names in use, allocated idle, unallocated: ${JSON.stringify(legend)}`);
        const colours = Object.fromEntries(legend);
        expect(new Set(Object.values(colours)).size === 3, `three distinct legend colours: ${JSON.stringify(colours)}`);
        // The GPU row: what runs, what the children hold idle, what is left.
        const row = await page.evaluate(() => {
          const tr = [...document.querySelectorAll('table.keys-table tbody tr')].find((r) => r.cells[0].getAttribute('title') === 'requests.nvidia.com/gpu');
          const bar = tr.querySelector('.bar');
          const seg = (c) => { const i = bar.querySelector(`i.${c}`); return i && { w: parseFloat(i.style.width), bg: getComputedStyle(i).backgroundColor }; };
          return { text: tr.innerText, use: seg('use'), idle: seg('idle'), bar: getComputedStyle(bar).backgroundColor, cls: bar.className };
        });
        expect(/\d+ allocated to children, idle · \d+ unallocated/.test(row.text), `the row says allocated-idle and unallocated: ${row.text}`);
        expect(row.use && row.idle && row.idle.w > 0, `the bar has an idle segment: ${JSON.stringify(row)}`);
        expect(row.use.w < 100 && row.use.w + row.idle.w < 100, `research's GPUs are not full: ${JSON.stringify(row)}`);
        expect(row.idle.bg === colours.idle, `idle in the legend's colour (${row.idle.bg} vs ${colours.idle})`);
        expect(row.bar === colours.free, `unallocated: the track in the legend's colour (${row.bar} vs ${colours.free})`);
        expect(/\bwarn\b|\bover\b/.test(row.cls) || row.use.bg === colours.use, `in use in the legend's colour (${row.use.bg} vs ${colours.use})`);
        // The overview: the same legend, and no allocation warnings as if GPUs ran.
        await open(page, base, '/', js);
        const overviewLegend = await page.$$eval('main p.legend i', (is) => is.map((i) => getComputedStyle(i).backgroundColor));
        expect(JSON.stringify(overviewLegend) === JSON.stringify(legend.map(([, c]) => c)), `the overview's legend has the same colours: ${overviewLegend}`);
        const att = await page.innerText('section.attention');
        expect(!/allocat/i.test(att), `the overview's "needs attention" has no allocation warnings: ${att.slice(0, 400)}`);
        const card = await page.innerText('section.quota-card[data-quota=acme] .keys');
        expect(/allocated to children, idle · [\d,]+ unallocated/.test(card), `acme's card shows allocated-idle and unallocated: ${card.slice(0, 200)}`);
        const { json: alerts } = await call('GET', '/api/v1/alerts?state=open&kind=allocation');
        const items = alerts.items || alerts;
        expect(Array.isArray(items) && items.length === 0, `no allocation alerts open on the demo: ${JSON.stringify(items).slice(0, 200)}`);
        await readable(page, `/ ${tag}`);
      });

      // ---- 2. Numbers read as amounts; times as YYYY-MM-DD HH:MM UTC ----
      await step(page, `no-raw-numbers-${tag}`, async () => {
        const paths = ['/', '/tree', '/quotas/research', '/quotas/nlp', '/quotas/nlp/edit', '/quotas/research/children/new',
          '/quotas/nlp/alerts', '/quotas/nlp/shares', '/quotas/research/shares?scope=subtree', '/alerts', '/transfers', '/transfers/1', '/audit', '/account'];
        const bad = [];
        for (const path of paths) {
          await open(page, base, path, js);
          for (const b of rawNumbers(await visibleText(page))) bad.push(`${path}: ${b}`);
          // Prefills are exact quantities a person can read: never nanos or 10+ digits.
          const values = await page.$$eval('input:not([type=hidden])', (is) => is.map((i) => `${i.name}=${i.value}`));
          for (const v of values) if (/\d{10,}|\d+n$/.test(v)) bad.push(`${path}: prefill ${v}`);
        }
        expect(bad.length === 0, `raw numbers a user reads:\n  ${bad.slice(0, 15).join('\n  ')}`);
        // Dates in the tables that show them.
        await open(page, base, '/alerts', js);
        const opened = await page.$$eval('table.alerts tbody td.num', (c) => c.map((x) => x.textContent.trim()));
        expect(opened.length > 0 && opened.every((t) => /^\d{4}-\d\d-\d\d \d\d:\d\d UTC$/.test(t)), `alerts' opening times: ${opened.slice(0, 3)}`);
        await open(page, base, '/transfers/1', js);
        expect(/by \S+ at \d{4}-\d\d-\d\d \d\d:\d\d UTC/.test(await page.innerText('dl.facts')), 'the transfer says when it was requested');
      });

      // ---- 3. The overview as a to-do list; alerts filtered, quieted ----
      await step(page, `overview-is-a-to-do-list-${tag}`, async () => {
        await open(page, base, '/', js);
        const items = await page.$$eval('section.attention > ul.attention:first-of-type > li', (ls) => ls.map((l) => l.innerText));
        expect(items.length >= 2, `items that need attention: ${items}`);
        expect(items.some((t) => /transfer request awaits? your decision/.test(t)), `the transfer awaiting me: ${items}`);
        const dated = items.filter((t) => /runs out in .* \(\d{4}-\d\d-\d\d\)/.test(t));
        expect(dated.length >= 1, `budgets running out, with their dates: ${items}`);
        const groups = await page.$$eval('section.attention h4 + ul.attention > li', (ls) => ls.map((l) => ({
          quota: l.querySelector('a.name')?.textContent.trim(), href: l.querySelector('a.name')?.getAttribute('href'), hint: l.querySelector('.hint')?.textContent || '',
        })));
        expect(groups.length >= 2, `open alerts grouped by quota: ${JSON.stringify(groups)}`);
        expect(new Set(groups.map((g) => g.quota)).size === groups.length, `one group per quota: ${groups.map((g) => g.quota)}`);
        expect(groups.every((g) => g.href === `/alerts?quota=${g.quota}` && /\d+ (warning|critical|info)/.test(g.hint)), `each group counts its alerts and links to them: ${JSON.stringify(groups[0])}`);
        // Filtered by level.
        for (const level of ['warning', 'info']) {
          await open(page, base, `/alerts?level=${level}`, js);
          const levels = await page.$$eval('table.alerts tbody tr span.level', (s) => s.map((x) => x.textContent.trim()));
          expect(levels.length > 0 && levels.every((l) => l === level), `/alerts?level=${level} lists only ${level}: ${levels}`);
          expect(await page.$eval('select[name=level]', (s) => s.value) === level, 'the filter shows the level');
        }
        await open(page, base, '/alerts', js);
        const kinds = await page.$$eval('table.alerts tbody tr td:nth-child(3)', (c) => c.map((x) => x.textContent.trim()));
        expect(kinds.every((k) => /^[A-Z][a-z]+( ([a-z]+|GPUs))*$/.test(k)), `alert kinds by name: ${[...new Set(kinds)]}`);
      });

      // ---- 3b. Queued work (the demo records nlp's queue) ----
      await step(page, `queued-work-is-shown-${tag}`, async () => {
        await open(page, base, '/', js);
        // Before the quota cards: what waits is what a tenant acts on.
        const before = await page.$eval('#queued', (q) => {
          const card = document.querySelector('section.quota-card');
          return !card || !!(q.compareDocumentPosition(card) & Node.DOCUMENT_POSITION_FOLLOWING);
        });
        expect(before, 'the overview lists queued work before the quota cards');
        const rows = await page.$$eval('#queued table.queue tbody tr', (rs) => rs.map((r) => ({
          quota: r.querySelector('td.quota a')?.getAttribute('href'), pos: r.querySelector('td.position').textContent.trim(),
          by: r.querySelector('td.submitter').textContent.trim(), why: r.querySelector('td.reason').textContent.trim(),
          start: r.querySelector('td.estimate').textContent.trim(),
        })));
        expect(rows.length === 3 && rows.every((r) => r.quota === '/quotas/nlp#queue'), `nlp's three queued jobs, linked to its queue: ${JSON.stringify(rows)}`);
        expect(rows.map((r) => r.pos).join() === '1,2,3', `in place order: ${rows.map((r) => r.pos)}`);
        // The demo's weekday batch runs at half over weekends, so what is
        // free depends on the day: short + free = the 16 A100s it needs.
        // A borrower's room reads as its page: free now, more to borrow.
        const short = rows[0].why.match(/waits for (\d+) × A100 GPUs: (\d+) free(?: now, (\d+) more to borrow)?, 16 needed/);
        expect(short && Number(short[1]) + Number(short[2]) + Number(short[3] || 0) === 16, `the first waits for A100s, in units: ${rows[0].why}`);
        expect(/^starts by about \d{4}-\d\d-\d\d \d\d:\d\d UTC$/.test(rows[0].start), `an estimated start: ${rows[0].start}`);
        expect(/waits for card-hours of GPU card-hours: needs 8,640/.test(rows[2].why), `the third waits for card-hours, by name: ${rows[2].why}`);
        expect(rows[0].by === 'dana@acme.example', `who submitted it: ${rows[0].by}`);
        await open(page, base, '/quotas/nlp', js);
        const queue = await page.$$eval('#queue ~ table.queue tbody tr', (rs) => rs.map((r) => r.querySelector('td.workload').textContent.trim()));
        expect(queue.join() === 'batch/Job/nlp/finetune-13b,batch/Job/nlp/eval-harness,batch/Job/nlp/continual-pretrain', `the quota page's queue in order: ${queue}`);
        // Whole names: a workload is never broken mid-word on a wide screen.
        if (w > 640) {
          const lines = await page.$$eval('#queue ~ table.queue td.workload', (c) => c.map((x) => { const r = document.createRange(); r.selectNodeContents(x); return r.getClientRects().length; }));
          expect(lines.every((n) => n <= 1), `workload names on one line: ${lines}`);
        }
      });

      await step(page, `acknowledge-and-snooze-${tag}`, async () => {
        // A team of its own per pass, brought over its pods and to its
        // CPU: a threshold warning and critical (over both keys, one
        // row each) and an over-quota alert — three rows to quiet. By
        // default only GPUs and budgets warn (the rules page says so):
        // the team watches every key first, by a '*' rule.
        const team = quietTeams.shift();
        await open(page, base, `/quotas/${team}/alerts`, js);
        const said = await page.innerText('main');
        expect(said.includes('By default: GPU models and budgets at 80 % and 100 %'), `the rules page says the default: ${said.slice(0, 300)}`);
        const everyKey = await page.request.post(`${base}/quotas/${team}/alerts`, { form: { csrf: await csrfOf(page), key: '*', warn_percent: '80', crit_percent: '100' }, maxRedirects: 0 });
        expect(everyKey.status() === 303, `the '*' rule is saved: ${everyKey.status()}`);
        const { json: q } = await call('GET', `/api/v1/quotas/${team}`);
        const pods = Number(q.status.self_used?.pods ?? q.status.selfUsed?.pods ?? q.status.used.pods);
        expect(pods >= 2, `${team} runs pods: ${pods}`);
        await setHard(call, team, { pods: String(pods - 1), 'requests.cpu': q.status.used['requests.cpu'] });
        // (The demo's own idle-GPU alert, on mlops, is not this step's.)
        const listed = async () => page.$$eval('table.alerts form[action="/alerts/quiet"] button[value=ack]', (bs) => bs
          .filter((b) => b.closest('tr')?.querySelector('td:nth-child(3)')?.textContent.trim() !== 'Idle GPUs')
          .map((b) => b.form.querySelector('input[name=id]').value));
        let ids = [];
        for (let i = 0; i < 40 && ids.length < 3; i++) {
          await new Promise((r) => setTimeout(r, 250));
          await open(page, base, `/alerts?quota=${team}`, js);
          ids = await listed();
        }
        expect(ids.length === 3, `${team}'s three rows to quiet: ${ids}`);
        const keyed = await page.$$eval('table.alerts tbody td:nth-child(4)', (c) => c.map((x) => x.textContent));
        // One alert per condition: its title the worst key, then both keys by name.
        expect(keyed.some((m) => /; 2 keys: /.test(m) && /pods \d/.test(m) && /CPU cores \d/.test(m)), `one row lists both keys: ${keyed}`);
        await open(page, base, '/alerts', js);
        const before = await badgeCount(page);
        const n = (s) => s.split(',').length;
        const row = (id) => `table.alerts form[action="/alerts/quiet"]:has(input[name=id][value="${id}"])`;
        await open(page, base, `/alerts?quota=${team}`, js);
        await submit(page, `${row(ids[0])} button[value=ack]`);
        expect(await hasNav(page), 'the page after the post keeps the navigation');
        await open(page, base, '/alerts', js);
        const afterAck = await badgeCount(page);
        expect(afterAck === before - n(ids[0]), `acknowledged: the badge says ${afterAck}, was ${before}`);
        // Bulk: tick the other two rows, snooze them together.
        await open(page, base, `/alerts?quota=${team}`, js);
        for (const id of ids.slice(1)) await page.check(`table.alerts input[type=checkbox][form=bulk-quiet][value="${id}"]`);
        await page.selectOption('form#bulk-quiet select[name=hours]', '4');
        await submit(page, 'form#bulk-quiet button[value=snooze]');
        const count = n(ids[1]) + n(ids[2]);
        const flash = await page.innerText('main');
        expect(flash.includes(`${count} alerts snoozed`), `bulk snoozed ${count}: ${flash.slice(0, 300)}`);
        await open(page, base, '/alerts', js);
        expect(await badgeCount(page) === afterAck - count, `the badge after the bulk snooze: ${await badgeCount(page)}`);
        await open(page, base, `/alerts?quota=${team}`, js);
        const rows = await page.$$eval('table.alerts tbody tr td.state', (c) => c.map((x) => x.innerText));
        expect(rows.some((t) => /acknowledged by admin/i.test(t)), `still listed, acknowledged by admin: ${rows}`);
        expect(rows.filter((t) => /snoozed by admin until \d{4}-\d\d-\d\d \d\d:\d\d UTC/i.test(t)).length === 2, `still listed, snoozed by admin until a time: ${rows}`);
      });

      // ---- One truth: the budget's run-out, names, GPUs first ----
      await step(page, `one-run-out-per-budget-${tag}`, async () => {
        const { json: b } = await call('GET', '/api/v1/quotas/nlp/budgets');
        const words = b.budgets[0].runway;
        expect(/^runs out in .* \(\d{4}-\d\d-\d\d\)$/.test(words), `the API's run-out: ${words}`);
        await open(page, base, '/quotas/nlp', js);
        const text = await page.innerText('main');
        const said = [...text.matchAll(/runs out in [^(]*\(\d{4}-\d\d-\d\d\)/g)].map((m) => m[0]);
        expect(said.length >= 2 && said.every((s) => s === words), `every run-out on nlp's page says ${words}: ${said}`);
        const { json: al } = await call('GET', '/api/v1/alerts?state=open&kind=cash_forecast&quota=nlp');
        const items = al.items || al;
        // The alert was worded when it opened: the same day (its "in N days" was then).
        const day = words.match(/\((\d{4}-\d\d-\d\d)\)$/)[1];
        expect(items.length === 1 && items[0].message.endsWith(`(${day})`), `the forecast alert names ${day}: ${JSON.stringify(items).slice(0, 300)}`);
      });

      await step(page, `names-and-gpus-first-${tag}`, async () => {
        await open(page, base, '/quotas/research', js);
        const keys = await page.$$eval('table.keys-table tbody td.key', (c) => c.map((x) => [x.textContent.trim(), x.getAttribute('title')]));
        expect(keys[0][0] === 'GPUs' && keys[0][1] === 'requests.nvidia.com/gpu', `GPUs first, the raw key in the tooltip: ${JSON.stringify(keys.slice(0, 3))}`);
        const firstOther = keys.findIndex(([, k]) => !/gpu/.test(k));
        expect(keys.slice(firstOther).every(([, k]) => !/gpu/.test(k)), `GPU keys and budgets before CPU, memory, pods: ${keys.map(([n]) => n)}`);
        expect(keys.every(([n]) => !/requests\.|limits\.|cash\//.test(n)), `names, not raw keys: ${keys.map(([n]) => n)}`);
        await open(page, base, '/', js);
        const card = await page.$$eval('section.quota-card[data-quota=acme] .keys span.key', (s) => s.map((x) => x.textContent.trim()));
        expect(card[0] === 'GPUs' && card.indexOf('pods') === card.length - 1, `acme's card: GPUs first, pods last: ${card}`);
        const left = await page.innerText('section.quota-card[data-quota=acme] .keys');
        expect(/ left/.test(left), `N left on the card: ${left.slice(0, 200)}`);
        await open(page, base, '/alerts', js);
        const messages = await page.$$eval('table.alerts tbody td:nth-child(4)', (c) => c.map((x) => x.textContent));
        expect(messages.every((m) => !/requests\.nvidia|cash\//.test(m)), `alerts by name: ${messages.slice(0, 3)}`);
      });

      // ---- One line per quota; CPU, memory and pods folded below ----
      await step(page, `one-line-and-other-keys-folded-${tag}`, async () => {
        await open(page, base, '/quotas/nlp', js);
        // The line right under the heading: GPU models first, then the budget.
        const line = await page.$eval('h1', (h) => { const p = h.nextElementSibling; return p && p.matches('p.strip') ? p.innerText : null; });
        expect(line && /^A100 GPUs: \d+ of [\d,]+ free( \(\+\d+ borrowable\))?/.test(line), `nlp's line under its heading: ${line}`);
        expect(/\s·\s[\d,.]+ card-hours left · (runs out \d{4}-\d\d-\d\d|.+)$/.test(line), `nlp's line ends with its budget: ${line}`);
        const { json: b } = await call('GET', '/api/v1/quotas/nlp/budgets');
        if (b.budgets[0].runsOutAt) expect(line.endsWith(`runs out ${b.budgets[0].runsOutAt.slice(0, 10)}`), `the budgets API's day: ${line}`);
        // CPU, memory and pods: in the fold, closed, opened by its summary.
        const fold = await page.$eval('details#other-keys', (d) => ({
          open: d.open, summary: d.querySelector('summary').innerText,
          keys: [...d.querySelectorAll('td.key')].map((k) => k.getAttribute('title')),
          shown: [...d.querySelectorAll('td.key')].some((k) => k.checkVisibility()),
          lead: [...document.querySelectorAll('table.keys-table:not(.other-keys) td.key')].map((k) => k.getAttribute('title')),
        }));
        expect(!fold.open && !fold.shown, `the other keys start folded: ${JSON.stringify(fold)}`);
        expect(/^Other keys: CPU cores, .*memory, pods$/.test(fold.summary), `the fold names what it holds: ${fold.summary}`);
        expect(['requests.cpu', 'requests.memory', 'pods'].every((k) => fold.keys.includes(k) && !fold.lead.includes(k)), `CPU, memory and pods in the fold only: ${JSON.stringify(fold)}`);
        expect(fold.lead.length > 0 && fold.lead.every((k) => /nvidia\.com\/gpu/.test(k)), `the first table: GPUs and budgets: ${fold.lead}`);
        await page.click('details#other-keys > summary');
        const cpu = await page.$eval('details#other-keys td.key[title="requests.cpu"]', (k) => ({ shown: k.checkVisibility(), row: k.closest('tr').innerText }));
        expect(cpu.shown && /\d+ in use|\d/.test(cpu.row), `the summary opens the fold, CPU's figures inside: ${JSON.stringify(cpu)}`);
        // The cards: the line first in each card's keys, the rest folded.
        await open(page, base, '/', js);
        const card = await page.$eval('section.quota-card[data-quota=acme]', (c) => ({
          first: c.querySelector('.keys > *')?.className,
          line: c.querySelector('.keys > p.strip')?.innerText || '',
          fold: c.querySelector('.keys details.other-keys:not([open]) summary')?.innerText || '',
          hidden: [...c.querySelectorAll('details.other-keys span.key')].map((k) => [k.textContent, k.checkVisibility()]),
        }));
        expect(card.first === 'strip' && /^A100 GPUs: \d+ of [\d,]+ free/.test(card.line) && /card-hours left/.test(card.line), `acme's card leads with its line: ${JSON.stringify(card)}`);
        expect(/^Other keys: CPU cores/.test(card.fold) && card.hidden.some(([k]) => k === 'pods') && card.hidden.every(([, v]) => !v), `acme's CPU, memory and pods folded: ${JSON.stringify(card)}`);
        await readable(page, `/ ${tag}`);
      });

      await step(page, `every-page-has-a-heading-and-labels-${tag}`, async () => {
        for (const path of ['/', '/tree', '/quotas/research', '/alerts', '/reports', '/transfers', '/audit', '/users', '/account', '/tokens']) {
          await open(page, base, path, js);
          expect(await page.$$eval('h1', (h) => h.length) === 1, `${path}: one h1`);
        }
        for (const path of ['/users', '/account']) {
          await open(page, base, path, js);
          const unlabeled = await page.$$eval('main input:not([type=hidden]), main select', (is) => is
            .filter((i) => !i.closest('label') && !i.getAttribute('aria-label') && !(i.id && document.querySelector(`label[for="${i.id}"]`)))
            .map((i) => i.name));
          expect(unlabeled.length === 0, `${path}: inputs without a label: ${unlabeled}`);
        }
        await open(page, base, '/reports', js);
        const first = await page.evaluate(() => {
          const t = document.querySelector('main .report-total');
          const c = document.querySelector('main figure.report-chart');
          return !!t && !!c && !!(t.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING) && t.textContent;
        });
        expect(first && /^Total: [\d,.]+ card-hours/.test(first), `the report's total first: ${first}`);
      });

      // ---- One truth, 2: reports open on an answer ----
      // The navigation's Reports and a budget's Report link: this month in
      // whole UTC days, by child (by workload under a leaf); the CSV in
      // decimal card-hours with the exact integer beside; by user, no
      // "(unknown)"; a wrong parameter said in a person's words.
      await step(page, `reports-open-on-an-answer-${tag}`, async () => {
        const ymd = (d) => d.toISOString().slice(0, 10);
        const now = new Date();
        const from = `${ymd(now).slice(0, 8)}01`;
        const end = ymd(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1)));
        const thisMonth = `${from} 00:00 UTC – ${end} 00:00 UTC (UTC)`;
        const { json: all } = await call('GET', '/api/v1/quotas');
        const childrenOf = (name) => (all.items || all).filter((q) => q.spec.parent === name).map((q) => q.metadata.name);
        const shown = () => page.evaluate(() => ({
          title: document.querySelector('main h3')?.textContent.trim() || '',
          total: document.querySelector('main .report-total')?.textContent.trim() || '',
          groups: [...document.querySelectorAll('main table.report tbody td[data-label=Group]')].map((c) => c.textContent.trim()),
          error: document.querySelector('main .flash.error')?.textContent.trim() || '',
          notes: [...document.querySelectorAll('main .report-note')].map((n) => n.textContent.trim()),
          from: document.querySelector('form.report-form input[name=from]')?.value,
          to: document.querySelector('form.report-form input[name=to]')?.value,
        }));
        // The navigation's link: under the admin's top quota, acme.
        await open(page, base, '/', js);
        await follow(page, 'header nav a[href="/reports"]', js);
        let r = await shown();
        expect(r.error === '' && r.title === `Spending by child per day under acme, ${thisMonth}`, `Reports opens on this month by child: ${JSON.stringify(r)}`);
        expect(r.from === from && r.to === ymd(now), `the form shows the days reported on: ${r.from} – ${r.to}`);
        const acme = childrenOf('acme');
        expect(r.groups.length > 0 && r.groups.every((g) => acme.includes(g)), `one row per child of acme: ${r.groups} (${acme})`);
        expect(/^Total: [\d,.]+ card-hours$/.test(r.total) && !/^Total: 0 /.test(r.total), `a total in card-hours: ${r.total}`);
        const pageTotal = Number(r.total.replace(/^Total: |,| card-hours$/g, ''));
        // Its CSV: decimal card-hours, then the ledger's exact integer (acc:
        // 3.6e12 to a nano card-hour, quota::budget's ACC_PER_NANO_HOUR),
        // the decimal being it rounded up to the nano card-hour.
        const [dl] = await Promise.all([page.waitForEvent('download'), page.click('form.report-form a.button:text-is("CSV")')]);
        const lines = readFileSync(await dl.path(), 'utf8').trim().split(/\r?\n/).map((l) => l.split(','));
        // The demo reads real usage, so each row carries its efficiency too.
        expect(lines[0].join() === 'bucket,bucket_start,child,amount_card-hours,amount_exact_acc,gpu_hours_allocated,gpu_hours_busy,efficiency_percent,idle_card_hours', `the CSV's header: ${lines[0]}`);
        const body = lines.slice(1, -1);
        const [totalLine] = lines.slice(-1);
        expect(body.length === r.groups.length && body.every((c) => acme.includes(c[2])), `the CSV's rows are the page's: ${body.map((c) => c[2])}`);
        const nanos = (d) => { const [i, f = ''] = d.split('.'); return BigInt(i) * 10n ** 9n + BigInt((f + '000000000').slice(0, 9)); };
        const ACC_PER_NANO_HOUR = 3_600_000_000_000n;
        const upToNano = (acc) => (BigInt(acc) + ACC_PER_NANO_HOUR - 1n) / ACC_PER_NANO_HOUR;
        for (const c of [...body, totalLine]) {
          expect(/^\d+(\.\d{1,9})?$/.test(c[3]) && /^\d+$/.test(c[4]), `a decimal and an exact integer: ${c}`);
          expect(nanos(c[3]) === upToNano(c[4]), `the decimal is the exact integer in card-hours: ${c}`);
        }
        expect(totalLine[0] === 'total' && body.reduce((s, c) => s + BigInt(c[4]), 0n) === BigInt(totalLine[4]), `the rows add up to the total exactly: ${totalLine}`);
        // Read a moment after the page: what ran since is in it too.
        const csvTotal = Number(totalLine[3]);
        expect(csvTotal >= pageTotal - 0.01 && csvTotal - pageTotal < 1, `the CSV's total (${csvTotal}) is the page's (${pageTotal})`);
        // By user: the demo's submitters, none unknown.
        await page.selectOption('form.report-form select[name=by]', 'user');
        await submit(page, 'form.report-form button[type=submit]');
        if (js) await hydrated(page);
        r = await shown();
        expect(r.error === '' && r.title.startsWith('Spending by user per day under acme') && r.groups.length > 0, `by user: ${JSON.stringify(r)}`);
        expect(!r.groups.includes('(unknown)') && r.groups.every((g) => /^(member|owner)-/.test(g)), `spending by who submitted it: ${r.groups}`);
        // A quota page's Report link: under research, by child; under nlp
        // (no children), by workload, said in words.
        for (const [name, by] of [['research', 'child'], ['nlp', 'workload']]) {
          await open(page, base, `/quotas/${name}`, js);
          await follow(page, 'main a:text-is("Report")', js);
          r = await shown();
          expect(r.error === '' && r.title === `Spending by ${by} per day under ${name}, ${thisMonth}`, `${name}'s Report link opens on this month by ${by}: ${JSON.stringify(r)}`);
          if (by === 'child') expect(r.groups.every((g) => childrenOf(name).includes(g)), `research's children: ${r.groups}`);
          else expect(r.notes.some((n) => n === 'nlp has no child quotas, so its spending is shown by workload.'), `nlp's note: ${r.notes}`);
        }
        // A wrong parameter: the form again, with what is wrong in words.
        const JARGON = /`|unknown field|expected one of|duplicate field|RFC|\.\d{3}Z|utcOffsetMinutes|serde|Invalid|Unprocessable|\{"/;
        for (const query of ['from=yesterday', 'colour=red', 'by=colour', 'from=2026-11-02&to=2026-11-01', 'utcOffsetMinutes=900', 'from=2026-11-01&from=2026-11-02']) {
          const resp = await open(page, base, `/reports?${query}`, js);
          r = await shown();
          expect(resp.status() === 422 && r.error && await hasNav(page) && await page.$('form.report-form'), `${query}: 422, the form and the navigation: ${resp.status()} ${JSON.stringify(r)}`);
          expect(!JARGON.test(r.error) && !INTERNAL.test(r.error), `${query}: in a person's words: ${r.error}`);
        }
        await readable(page, `/reports ${tag}`);
      });

      // ---- 4. Risky actions need a second look ----
      await step(page, `cutting-below-use-needs-confirmation-${tag}`, async () => {
        const key = 'requests.nvidia.com/gpu.A100';
        const { json: nlp } = await call('GET', '/api/v1/quotas/nlp');
        const hard = nlp.spec.hard[key];
        const used = Number(nlp.status.used[key]);
        const cut = String(used - 4);
        await open(page, base, '/quotas/nlp/edit', js);
        await page.fill(`input[name="hard:${key}"]`, cut);
        await submit(page, 'form.quota-form button[type=submit]');
        const box = await page.$('form.quota-form .consequences input[name=confirm_lower]');
        expect(box, 'the form comes back with a box to tick');
        const said = await page.innerText('form.quota-form .consequences');
        expect(/nlp is over quota by 4/.test(said) && /refused/.test(said), `what saving would do: ${said}`);
        expect(!INTERNAL.test(said), `no internals in the message: ${said}`);
        expect(await hasNav(page), 'the navigation after the post');
        expect((await call('GET', '/api/v1/quotas/nlp')).json.spec.hard[key] === hard, 'nothing changed without the box');
        // The server refuses without the box too (the browser's `required` aside).
        const form = Object.fromEntries(await page.$$eval('form.quota-form input[name]:not([type=checkbox])', (is) => is.map((i) => [i.name, i.value])));
        const r = await page.request.post(`${base}/quotas/nlp/edit`, { form, maxRedirects: 0 });
        expect(r.status() === 409 && (await r.text()).includes('Saving this would'), `without the box the server asks again: ${r.status()}`);
        expect((await call('GET', '/api/v1/quotas/nlp')).json.spec.hard[key] === hard, 'nothing changed when the box was left out of the post');
        await page.check('form.quota-form input[name=confirm_lower]');
        await submit(page, 'form.quota-form button[type=submit]');
        expect(page.url().endsWith('/quotas/nlp'), `saved with the box ticked: ${page.url()}`);
        expect((await call('GET', '/api/v1/quotas/nlp')).json.spec.hard[key] === cut, 'the cut is saved');
        // The audit row lists the field it changed.
        await open(page, base, '/audit', js);
        const changes = await page.$$eval('ul.changes li', (l) => l.map((x) => x.textContent.trim()));
        expect(changes.some((c) => c === `spec.hard.${key}: ${hard} → ${cut}`), `the update's changed field: ${changes.slice(0, 4)}`);
        await setHard(call, 'nlp', { [key]: hard });
      });

      await step(page, `errors-beside-their-fields-${tag}`, async () => {
        await open(page, base, '/quotas/nlp/edit', js);
        await page.fill('input[name="hard:pods"]', 'lots');
        await submit(page, 'form.quota-form button[type=submit]');
        const beside = await page.$('tr.refused input[name="hard:pods"][aria-invalid="true"]');
        expect(beside, 'the bad amount is marked beside its field');
        const msg = await page.innerText('tr.refused small.field-error');
        expect(/pods/.test(msg) && /lots/.test(msg) && !INTERNAL.test(msg), `the message beside the field: ${msg}`);
        // A stale form: someone else saved in between.
        await open(page, base, '/quotas/nlp/edit', js);
        await setHard(call, 'nlp', { pods: '201' });
        await page.fill('input[name="hard:pods"]', '202');
        await submit(page, 'form.quota-form button[type=submit]');
        const text = await page.innerText('main');
        expect(/someone else changed/i.test(text), `a stale form says someone else changed it: ${text.slice(0, 300)}`);
        expect(!INTERNAL.test(text), `no resourceVersion or internals shown: ${text.slice(0, 300)}`);
        await setHard(call, 'nlp', { pods: '200' });
      });

      await step(page, `confirmations-are-required-${tag}`, async () => {
        // Delete of a leaf with workloads: the box, and the server refuses without it.
        await open(page, base, '/quotas/nlp', js);
        expect(await page.$('form.delete input[name=confirm][required]'), 'Delete has its box');
        const rv = await page.getAttribute('form.delete input[name=resourceVersion]', 'value');
        const csrf = await csrfOf(page);
        const del = await page.request.post(`${base}/quotas/nlp/delete`, { form: { csrf, resourceVersion: rv }, maxRedirects: 0 });
        expect(del.status() >= 400, `Delete without the box: ${del.status()}`);
        expect((await call('GET', '/api/v1/quotas/nlp')).status === 200, 'nlp is still there');
        // Disable, Make admin.
        await open(page, base, '/users', js);
        for (const action of ['disabled', 'admin']) {
          expect(await page.$(`form[action="/users/member-search/${action}"] input[name=confirm][required]`), `${action} has its box`);
          const form = action === 'disabled' ? { csrf, disabled: 'true' } : { csrf, admin: 'true' };
          const r = await page.request.post(`${base}/users/member-search/${action}`, { form, maxRedirects: 0 });
          expect(r.status() >= 400, `${action} without the box: ${r.status()}`);
        }
        await open(page, base, '/users', js);
        const row = await page.$eval('table.users td[data-sort-value="member-search"]', (td) => td.innerText);
        expect(/active/.test(row) && !/admin/.test(row.replace('member-search', '')), `member-search is still an active non-admin: ${row}`);
        // Revoke a token.
        await open(page, base, '/tokens', js);
        await page.fill('form[action="/tokens"] input[name=name]', `e2e-${tag}`);
        await submit(page, 'form[action="/tokens"] button[type=submit]');
        await open(page, base, '/tokens', js);
        const revoke = await page.getAttribute('form[action^="/tokens/"][action$="/revoke"]', 'action');
        expect(await page.$(`form[action="${revoke}"] input[name=confirm][required]`), 'Revoke has its box');
        const rr = await page.request.post(`${base}${revoke}`, { form: { csrf }, maxRedirects: 0 });
        expect(rr.status() >= 400, `Revoke without the box: ${rr.status()}`);
        await open(page, base, '/tokens', js);
        expect(await page.$(`form[action="${revoke}"]`), 'the token is still active');
        await page.check(`form[action="${revoke}"] input[name=confirm]`);
        await submit(page, `form[action="${revoke}"] button`);
        expect(await hasNav(page), 'the navigation after the post');
        await open(page, base, '/tokens', js);
        expect(!(await page.$(`form[action="${revoke}"]`)) && /revoked \d{4}-\d\d-\d\d \d\d:\d\d UTC/.test(await page.innerText('main')), 'revoked with the box ticked');
        // Approve.
        await open(page, base, '/transfers/1', js);
        expect(await page.$('form[action$="/approve"] input[name=confirm][required]'), 'Approve has its box');
        const ap = await page.request.post(`${base}/transfers/1/approve`, { form: { csrf }, maxRedirects: 0 });
        expect(ap.status() >= 400, `Approve without the box: ${ap.status()}`);
        expect((await call('GET', '/api/v1/transfers/1')).json.status === 'requested', 'the transfer is still requested');
      });

      // ---- 5. Approving with eyes open ----
      await step(page, `approval-shows-both-ends-${tag}`, async () => {
        await open(page, base, '/transfers/1', js);
        expect(await page.$('dl.facts a[href="/quotas/speech"]') && await page.$('dl.facts a[href="/quotas/vision"]'), 'From and To are links');
        const ends = await page.$$eval('table.pairs tbody tr', (rs) => rs.map((r) => r.innerText));
        expect(ends.length === 2 && ends.every((t) => /in use of [\d,]+/.test(t) && /unallocated/.test(t)), `both ends' usage: ${ends}`);
        const plan = await page.$$eval('table.plan tbody tr', (rs) => rs.map((r) => [...r.cells].map((c) => c.innerText.trim())));
        const gives = plan.find((r) => r[1] === 'speech');
        const gets = plan.find((r) => r[1] === 'vision');
        expect(gives && /V100 GPUs 8/.test(gives[3]) && /V100 GPUs 4/.test(gives[4]), `speech's V100 8 → 4, by name: ${gives}`);
        expect(gets && /V100 GPUs 16/.test(gets[3]) && /V100 GPUs 20/.test(gets[4]), `vision's V100 16 → 20, by name: ${gets}`);
        await open(page, base, '/transfers', js);
        const awaiting = await page.innerText('p.awaiting');
        expect(/^1 request awaits your decision/.test(awaiting), `the count awaiting me: ${awaiting}`);
        await page.check('input[name=awaiting]');
        await submit(page, 'form[action="/transfers"][method=get] button[type=submit]');
        expect(page.url().includes('awaiting=me'), `the filter in the address: ${page.url()}`);
        const rows = await page.$$eval('table.transfers tbody tr', (r) => r.map((x) => x.cells[0].innerText.trim()));
        expect(rows.length === 1 && rows[0] === '#1', `only #1 awaits me: ${rows}`);
        expect(await page.$('table.transfers a[href="/quotas/speech"]'), 'ends link to their quotas in the list');
      });

      // ---- One truth, 5: forms for people ----
      // An owner makes a 2-T4 child with the name, two GPU numbers and a
      // budget (every other key folded); a child that does not fit is
      // refused in words that say what to do; a transfer's key is chosen
      // from a list of names.
      await step(page, `forms-for-people-${tag}`, async () => {
        expect(await login(page, base, 'owner-research'), 'owner-research logs in');
        await open(page, base, '/quotas/research', js);
        await follow(page, 'main a[href="/quotas/research/children/new"]', js);
        const form = await page.evaluate(() => {
          const fold = document.querySelector('form.quota-form details.more-keys');
          const shown = [...document.querySelectorAll('form.quota-form input:not([type=hidden]), form.quota-form select')].filter((i) => i.checkVisibility());
          return {
            folded: !!fold && !fold.open,
            asked: shown.filter((i) => i.required).map((i) => i.name),
            empty: shown.filter((i) => i.required && !i.value).map((i) => i.name),
            inFold: fold ? [...fold.querySelectorAll('input[name^="hard:"]')].map((i) => i.name.slice(5)) : [],
          };
        });
        expect(form.folded, 'the other keys start folded');
        expect(form.asked.every((n) => n === 'name' || /^hard:(requests\.nvidia\.com\/gpu|cash\/)/.test(n)), `only the name, GPUs and budgets asked for: ${form.asked}`);
        expect(form.empty.join() === 'name', `only the name is empty (no "Please fill out this field" first): ${form.empty}`);
        expect(['requests.cpu', 'requests.memory', 'pods'].every((k) => form.inFold.includes(k)), `CPU, memory and pods in the fold: ${form.inFold}`);
        const name = `t4-${tag}`;
        const T4 = 'input[name="hard:requests.nvidia.com/gpu.T4"]';
        // Too many T4s: refused beside the field, in words, with what to do.
        await page.fill('input[name=name]', name);
        await page.fill('input[name="hard:requests.nvidia.com/gpu"]', '2');
        await page.fill(T4, '100');
        await submit(page, 'form.quota-form button[type=submit]');
        if (js) await hydrated(page);
        const said = await page.innerText(`tr.refused:has(${T4}) small.field-error`);
        expect(/^.*T4 GPUs: 100 asked, \d+ left of \d+ in research: ask acme's owners for more, or lower it to \d+$/.test(said.trim()), `the refusal says what to do: ${said}`);
        expect(!/requests\.|nvidia\.com|asks \d/.test(said) && !INTERNAL.test(said), `in words, no raw key: ${said}`);
        expect(await page.$(`tr.refused ${T4}[aria-invalid="true"]`) && await page.inputValue('input[name=name]') === name, 'beside its field, the name kept');
        expect((await call('GET', `/api/v1/quotas/${name}`)).status === 404, 'nothing was made');
        // Two T4s and a budget: made.
        await page.fill(T4, '2');
        await page.fill('input[name="hard:cash/requests.nvidia.com/gpu"]', '100');
        await submit(page, 'form.quota-form button[type=submit]');
        expect(page.url().endsWith(`/quotas/${name}`), `on the new quota's page: ${page.url()}`);
        const { json: q } = await call('GET', `/api/v1/quotas/${name}`);
        const { json: research } = await call('GET', '/api/v1/quotas/research');
        const h = q.spec.hard;
        expect(q.spec.parent === 'research' && h['requests.nvidia.com/gpu.T4'] === '2' && h['requests.nvidia.com/gpu'] === '2'
          && h['cash/requests.nvidia.com/gpu'] === '100' && h['requests.nvidia.com/gpu.A100'] === '0', `2 T4s and 100 card-hours: ${JSON.stringify(q.spec)}`);
        // A folded key takes the parent's idle room: hard 0, borrowing up to the parent's hard.
        expect(h['requests.cpu'] === '0' && q.spec.max?.['requests.cpu'] === research.spec.hard['requests.cpu'], `CPU from the parent's idle room: ${JSON.stringify(q.spec)}`);
        // Removed again: each pass makes its own out of research's four T4s.
        const del = await call('DELETE', `/api/v1/quotas/${name}`);
        expect(del.status < 300, `${name} deleted: ${del.status} ${JSON.stringify(del.json).slice(0, 200)}`);
        // A transfer's key: a list of names, never typed.
        await open(page, base, '/transfers', js);
        const keys = await page.evaluate(() => ({
          lists: document.querySelectorAll('form.request select[name=key]').length,
          typed: document.querySelectorAll('form.request input[name=key], form.request textarea[name=key]').length,
          options: [...document.querySelectorAll('form.request select[name=key]')[0].options].map((o) => [o.value, o.textContent.trim()]),
        }));
        expect(keys.lists >= 1 && keys.typed === 0, `keys chosen from lists: ${JSON.stringify(keys).slice(0, 200)}`);
        const v100 = keys.options.find(([v]) => v === 'requests.nvidia.com/gpu.V100');
        expect(v100 && v100[1].startsWith('V100 GPUs') && keys.options.find(([v]) => v === 'requests.nvidia.com/gpu.T4')?.[1].startsWith('T4 GPUs'), `keys by name: ${keys.options.map(([, l]) => l)}`);
        await page.selectOption('form.request select[name=from]', 'speech');
        await page.fill('form.request input[name=to]', 'vision');
        await page.selectOption('form.request select[name=key] >> nth=0', { label: v100[1] });
        await page.fill('form.request input[name=amount] >> nth=0', '1');
        await page.fill('form.request textarea[name=reason]', `e2e ${tag}: a V100 chosen from the list`);
        await submit(page, 'form.request button[type=submit]');
        const id = page.url().match(/\/transfers\/(\d+)$/)?.[1];
        expect(id, `on the new transfer: ${page.url()} ${(await page.innerText('main')).slice(0, 300)}`);
        const { json: t } = await call('GET', `/api/v1/transfers/${id}`);
        expect(JSON.stringify(t.amounts) === '{"requests.nvidia.com/gpu.V100":"1"}', `the key chosen: ${JSON.stringify(t.amounts)}`);
        expect(/V100 GPUs/.test(await page.innerText('main')), 'the request names the key');
        // #1 stays the one request awaiting a decision (other steps count on it).
        const rejected = await call('POST', `/api/v1/transfers/${id}/reject`, { note: 'e2e: only the form was tried' });
        expect(rejected.status < 300, `#${id} rejected: ${rejected.status}`);
        await readable(page, `/transfers/${id} ${tag}`);
        await login(page, base);
      });

      // ---- 6. Small things ----
      await step(page, `error-pages-keep-the-navigation-${tag}`, async () => {
        await open(page, base, '/alerts', js);
        const count = await badgeCount(page);
        const r404 = await page.goto(`${base}/no/such/page`);
        expect(r404.status() === 404, `an unknown URL: ${r404.status()}`);
        expect(/404/.test(await page.innerText('main h1')) && await hasNav(page), 'a 404 page with the navigation');
        expect(await badgeCount(page) === count, `the badge on the 404 page: ${await badgeCount(page)}, elsewhere ${count}`);
        const q404 = await page.goto(`${base}/quotas/no-such-quota`);
        expect(q404.status() === 404 && await hasNav(page), `an unknown quota: ${q404.status()}`);
        expect(!INTERNAL.test(await page.innerText('main')), 'no internals on the 404 page');
        await login(page, base, 'member-nlp');
        const r403 = await page.goto(`${base}/quotas/nlp/edit`);
        expect(r403.status() === 403 && await hasNav(page), `a member editing: ${r403.status()} with the navigation`);
        await readable(page, `403 ${tag}`);
        await login(page, base);
      });

      // An owner of a department sees the work queued in its teams (nlp's
      // queue for research's owner), with who submitted it.
      await step(page, `owner-sees-teams-queue-${tag}`, async () => {
        expect(await login(page, base, 'owner-research'), 'owner-research logs in');
        await open(page, base, '/', js);
        const text = await page.innerText('main');
        expect(/Queued in your quotas \(\d+\)/.test(text), `the owner's overview lists its teams' queues: ${text.slice(0, 600)}`);
        for (const want of ['finetune-13b', 'dana@acme.example']) expect(text.includes(want), `${want} on the owner's overview`);
        expect(await page.$('a[href="/quotas/nlp#queue"]'), 'a link to nlp\'s queue');
        await readable(page, `owner overview ${tag}`);
        await login(page, base);
      });

      await step(page, `own-password-change-${tag}`, async () => {
        const user = passwordUsers.shift();
        const fresh = `new-${tag}-password-0123`;
        expect(await login(page, base, user), `${user} logs in`);
        await open(page, base, '/account', js);
        await submit(page, 'a[href="/account/password"]');
        await page.fill('input[name=current]', PASSWORD);
        await page.fill('input[name=new]', fresh);
        await page.fill('input[name=confirm]', fresh);
        await submit(page, 'form[action="/account/password"] button[type=submit]');
        expect(await hasNav(page), 'the navigation after the post');
        expect(!(await login(page, base, user, PASSWORD)), 'the old password no longer works');
        expect(await login(page, base, user, fresh), 'the new password works');
        await login(page, base);
      });

      await step(page, `readable-names-${tag}`, async () => {
        await open(page, base, '/account', js);
        const prefs = await page.$$eval('table.prefs tbody td:first-child', (c) => c.map((x) => x.textContent.trim()));
        expect(prefs.length >= 5 && prefs.every((p) => /^[A-Z][a-z]+( ([a-z]+|[A-Z]{2,}s?))*$/.test(p)), `preferences by name: ${prefs}`);
        await open(page, base, '/alerts', js);
        const filter = await page.$$eval('select[name=kind] option', (o) => o.map((x) => x.textContent.trim()));
        expect(filter.every((k) => !/_/.test(k)), `kinds in the filter by name: ${filter}`);
      });

      await step(page, `dark-mode-${tag}`, async () => {
        await page.emulateMedia({ colorScheme: 'dark' });
        for (const path of ['/', '/quotas/research', '/alerts']) {
          await open(page, base, path, js);
          const bg = await page.evaluate(() => {
            const c = getComputedStyle(document.body).backgroundColor;
            const [r, g, b] = c.match(/\d+(\.\d+)?/g).map(Number);
            const fg = getComputedStyle(document.querySelector('main')).color.match(/\d+(\.\d+)?/g).map(Number);
            return { c, lum: (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255, fg: (0.2126 * fg[0] + 0.7152 * fg[1] + 0.0722 * fg[2]) / 255 };
          });
          expect(bg.lum < 0.25, `${path} dark: the background is dark (${bg.c})`);
          expect(bg.fg > 0.6, `${path} dark: the text is light (${bg.fg.toFixed(2)})`);
          if (path === '/quotas/research') {
            // Every chart shown (usage, children, burn-down, by model) is
            // inverted with its hues turned back: a dark ground, series in
            // their colours.
            const filters = await page.$$eval('main svg.chart', (ss) => ss.filter((s) => s.checkVisibility()).map((s) => getComputedStyle(s).filter));
            expect(filters.length >= 3 && filters.every((f) => /invert\(0?\.9\)/.test(f) && /hue-rotate\(180deg\)/.test(f)), `dark charts: ${[...new Set(filters)]}`);
          }
          await readable(page, `${path} dark ${tag}`);
        }
        await page.screenshot({ path: join(ARTIFACTS, `portal-dark-alerts-${tag}.png`), fullPage: true });
        await page.emulateMedia({ colorScheme: 'light' });
        await open(page, base, '/quotas/research', js);
        const light = await page.$$eval('main svg.chart', (ss) => ss.filter((s) => s.checkVisibility()).map((s) => getComputedStyle(s).filter));
        expect(light.length >= 3 && light.every((f) => f === 'none'), `light charts are drawn as they are: ${[...new Set(light)]}`);
      });

      await step(page, `csv-exports-${tag}`, async () => {
        await open(page, base, '/alerts', js);
        const [dl] = await Promise.all([page.waitForEvent('download'), page.click('a[href^="/alerts.csv"]')]);
        const alertsCsv = readFileSync(await dl.path(), 'utf8');
        expect(/^id,|level|quota/.test(alertsCsv.split('\n')[0]) && alertsCsv.split('\n').length > 3, `alerts.csv: ${alertsCsv.slice(0, 200)}`);
        // The stored object first: the export, read after it, accrues from it.
        const { json: nlp } = await call('GET', '/api/v1/quotas/nlp');
        const tree = await page.request.get(`${base}/tree.csv`);
        expect(tree.status() === 200 && /text\/csv/.test(tree.headers()['content-type']) && /attachment/.test(tree.headers()['content-disposition'] || ''), `tree.csv downloads: ${tree.status()} ${JSON.stringify(tree.headers())}`);
        const lines = (await tree.text()).trim().split(/\r?\n/);
        const head = lines[0].split(',');
        // Each line names its unit (cards, cores, bytes, card-hours): keys
        // of one quota count in different units, so a column says which.
        const col = (name) => head.indexOf(name);
        expect(col('unit') === 3 && col('hard') > 3 && col('spent') > 3, `tree.csv's header: ${lines[0]}`);
        const rows = lines.slice(1).map((l) => l.split(','));
        expect(rows.every((c) => c[col('unit')]), 'every line names its unit');
        const unitOf = (key) => rows.find((c) => c[2] === key)?.[col('unit')];
        expect(unitOf('requests.nvidia.com/gpu') === 'cards' && unitOf('requests.memory') === 'bytes'
          && unitOf('cash/requests.nvidia.com/gpu') === 'card-hours', `units: ${unitOf('requests.nvidia.com/gpu')}, ${unitOf('requests.memory')}, ${unitOf('cash/requests.nvidia.com/gpu')}`);
        // nlp's memory hard: exactly 1 TiB, in bytes.
        const row = rows.find((c) => c[0] === 'nlp' && c[2] === 'requests.memory');
        expect(row && row[col('hard')] === '1099511627776', `nlp's memory hard exactly: ${row}`);
        // nlp's card-hours spent: an exact decimal of nano-units, as of the
        // export's own moment (one working copy per request: the stored
        // spending accrued to then, so at or a little above what the
        // stored object says, never below); its hard exactly the spec's.
        const stored = exactDecimal(nlp.status.used['cash/requests.nvidia.com/gpu']);
        const cash = rows.find((c) => c[0] === 'nlp' && c[2] === 'cash/requests.nvidia.com/gpu');
        const ahead = cash ? Number(cash[col('spent')]) - Number(stored) : NaN;
        expect(cash && /^\d+(\.\d{1,9})?$/.test(cash[col('spent')]) && ahead >= 0 && ahead < 1
          && cash[col('hard')] === exactDecimal(nlp.spec.hard['cash/requests.nvidia.com/gpu']), `nlp's budget exactly (${stored} stored): ${cash}`);
        const amounts = rows.flatMap((c) => c.slice(col('hard')));
        const odd = amounts.filter((a) => a !== '' && !/^-?\d+(\.\d+)?$/.test(a));
        expect(odd.length === 0, `amounts are plain exact decimals (no nanos, no grouping): ${odd.slice(0, 5)}`);
        const audit = await page.request.get(`${base}/audit.csv`);
        expect(audit.status() === 200 && /text\/csv/.test(audit.headers()['content-type']) && (await audit.text()).split('\n').length > 2, `audit.csv: ${audit.status()}`);
      });

      // ---- 7. Phones: no wall of buttons, keys that do not wrap letter by letter ----
      await step(page, `users-and-keys-fit-${tag}`, async () => {
        await open(page, base, '/users', js);
        const u = await page.evaluate(() => ({
          users: document.querySelectorAll('table.users tbody tr').length,
          closed: document.querySelectorAll('table.users details.manage:not([open])').length,
          buttons: [...document.querySelectorAll('table.users button')].filter((b) => b.checkVisibility()).length,
        }));
        expect(u.closed === u.users, `each user's actions folded behind Manage: ${JSON.stringify(u)}`);
        expect(u.buttons <= u.users * 2, `not a wall of buttons: ${JSON.stringify(u)}`);
        await page.click('table.users details.manage summary >> nth=1');
        expect(await page.isVisible('table.users details.manage[open] button:has-text("Make admin")'), 'Manage opens the actions');
        await readable(page, `/users ${tag}`);
        // A rule on nlp, so its rules page has a table (the defaults' own
        // thresholds: nothing else changes); tokens exist by now.
        await open(page, base, '/quotas/nlp/alerts', js);
        if (!(await page.$('table.rules'))) {
          await page.selectOption('form[action="/quotas/nlp/alerts"] select[name=key]', 'requests.nvidia.com/gpu');
          await submit(page, 'form[action="/quotas/nlp/alerts"] button[type=submit]');
        }
        for (const path of ['/users', '/quotas/research', '/quotas/nlp', '/quotas/nlp/edit', '/tree', '/audit', '/transfers', '/reports',
          '/transfers/1', '/tokens', '/quotas/nlp/alerts']) {
          await open(page, base, path, js);
          // A transfer's plan, the tokens and the alert rules are cards on a
          // phone (table.cards): none scrolls sideways inside itself.
          const cards = { '/transfers/1': 'table.plan', '/tokens': 'table.tokens', '/quotas/nlp/alerts': 'table.rules' }[path];
          if (cards) {
            const t = await page.$eval(cards, (t) => ({ cls: t.className, right: t.getBoundingClientRect().right, sw: t.scrollWidth, cw: t.clientWidth, shown: getComputedStyle(t.querySelector('thead')).display, w: window.innerWidth }));
            expect(/\bcards\b/.test(t.cls), `${path}: ${cards} has the card layout: ${t.cls}`);
            expect(t.right <= t.w + 0.5 && t.sw <= t.cw + 1, `${path}: ${cards} fits the screen without scrolling: ${JSON.stringify(t)}`);
            if (w === 390) expect(t.shown === 'none', `${path}: ${cards} reads as cards on a phone (its header hidden)`);
          }
          const r = await page.evaluate(() => {
            const bad = [];
            for (const el of document.querySelectorAll('main .key, main td.name, main table.keys-table td:first-child')) {
              if (!el.checkVisibility() || el.closest('svg')) continue;
              // Each word of its own text: on how many lines, how many letters a line.
              const st = getComputedStyle(el);
              const lh = parseFloat(st.lineHeight) || parseFloat(st.fontSize) * 1.2;
              for (const t of el.childNodes) {
                if (t.nodeType !== 3) continue;
                for (const m of t.textContent.matchAll(/\S{4,}/g)) {
                  const range = document.createRange();
                  range.setStart(t, m.index);
                  range.setEnd(t, m.index + m[0].length);
                  const r = range.getBoundingClientRect();
                  const lines = Math.round(r.height / lh);
                  if (lines > 1 && m[0].length / lines < 5) bad.push(`"${m[0]}" on ${lines} lines, ${Math.round(el.getBoundingClientRect().width)} px wide`);
                }
              }
            }
            const over = [];
            for (const t of document.querySelectorAll('main table')) {
              if (!t.checkVisibility()) continue;
              let box = t.getBoundingClientRect();
              for (let p = t.parentElement; p && p !== document.body; p = p.parentElement) {
                const ox = getComputedStyle(p).overflowX;
                if (ox === 'auto' || ox === 'scroll' || ox === 'hidden') { box = p.getBoundingClientRect(); break; }
              }
              if (box.right > window.innerWidth + 0.5) over.push(`${t.className || 'table'} reaches ${Math.round(box.right)} px`);
            }
            return { bad: bad.slice(0, 5), over };
          });
          expect(r.bad.length === 0, `${path}: key names wrapped letter by letter: ${r.bad.join('; ')}`);
          expect(r.over.length === 0, `${path}: tables wider than the screen: ${r.over.join('; ')}`);
          await readable(page, `${path} ${tag}`);
        }
      });

      await ctx.close();
    }
  }

  // ---- 3 (cont.). /alerts in pages: more than 100 open alerts ----
  // Every key in use at every leaf brought to exactly its use: a critical
  // usage alert each (last, as it changes what the other steps see).
  const { json: list } = await call('GET', '/api/v1/quotas');
  const quotas = list.items || list;
  for (const q of quotas.filter((q) => !quotas.some((c) => c.spec.parent === q.metadata.name))) {
    const used = q.status?.used || {};
    const at = {};
    for (const k of Object.keys(q.spec.hard)) if (!k.startsWith('cash/') && used[k] && used[k] !== '0') at[k] = used[k];
    await setHard(call, q.metadata.name, at);
  }
  await new Promise((r) => setTimeout(r, 2000));
  for (const js of ISLANDS ? [false, true] : [false]) {
    for (const [w, h] of [[1440, 900], [390, 844]]) {
      const ctx = await browser.newContext({ javaScriptEnabled: js, viewport: { width: w, height: h } });
      const page = await ctx.newPage();
      await login(page, base);
      const tag = `${js ? 'js' : 'nojs'}-${w}`;
      await step(page, `alerts-in-pages-${tag}`, async () => {
        await open(page, base, '/alerts', js);
        // The first table holds the open alerts; the resolved history follows.
        const ids = async () => page.$eval('table.alerts', (t) => [...t.tBodies[0].rows].map((r) => r.innerText.replace(/\s+/g, ' ')));
        // A row is one quota's alerts of one condition: its box names them all.
        const alertsShown = async () => page.$eval('table.alerts', (t) => [...t.tBodies[0].rows].reduce((a, r) => a + r.dataset.ids.split(',').length, 0));
        const first = await alertsShown();
        const one = await ids();
        // One alert per quota and condition: the demo may have fewer than a
        // page open; then they are all on the first page, with no next one.
        const { json: openNow } = await call('GET', '/api/v1/alerts?state=open&limit=1000');
        const total = openNow.items.length;
        if (total <= 100) {
          expect(first === total && !(await page.$('main a:text-matches("more open alerts")')), `all ${total} open alerts on one page (${first})`);
          await open(page, base, '/alerts?level=critical', js);
          const levels = await page.$$eval('table.alerts tbody tr span.level', (s) => s.map((x) => x.textContent.trim()));
          expect(levels.length > 0 && levels.every((l) => l === 'critical'), `critical only: ${[...new Set(levels)]}`);
          return;
        }
        expect(first === 100, `the first page holds 100 open alerts (${first}, in ${one.length} rows)`);
        const more = await page.$('main a:text-matches("more open alerts")');
        expect(more, 'a link to the next page');
        await Promise.all([page.waitForLoadState('load'), more.click()]);
        if (js) await page.waitForFunction(() => document.documentElement.dataset.islands === 'ready', null, { timeout: 30_000 });
        expect(page.url().includes('open_from=100'), `the next page's address: ${page.url()}`);
        const two = await ids();
        const twice = two.filter((x) => one.includes(x));
        expect(two.length > 0 && twice.length === 0, `the next page shows the rest (${two.length}), none twice: ${twice.slice(0, 3).join(' | ')}`);
        await readable(page, `/alerts page 2 ${tag}`);
        // Critical only: the filter keeps to its level across pages.
        await open(page, base, '/alerts?level=critical', js);
        const levels = await page.$$eval('table.alerts tbody tr span.level', (s) => s.map((x) => x.textContent.trim()));
        expect(levels.length > 0 && levels.every((l) => l === 'critical'), `critical only: ${[...new Set(levels)]}`);
      });
      await ctx.close();
    }
  }
} finally {
  await browser.close();
  child.kill();
  rmSync(dir, { recursive: true, force: true });
}
if (failed) { console.error('portal e2e: FAILED'); process.exit(1); }
console.log(`portal e2e: all ${n} steps passed (JavaScript ${ISLANDS ? 'off and on' : 'off only: no BIZRQ_ISLANDS_DIR'})`);
