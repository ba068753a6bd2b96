// Sign-in with a real OpenID provider: npm's oidc-provider, configured
// here with a client, people and a groups claim, and a real bizrq (demo
// data) in headless Chromium with JavaScript OFF. A person signs in through
// the provider's own pages, gets the roles their groups map to, is removed
// from a group and loses the role, and logs out of both. Then what the
// provider can produce of the hostile cases: a code replayed, a callback
// in another browser, a state bizrq never made, the provider rotating its
// keys, the provider down. (Forged tokens — another key, alg none, wrong
// audience, expired — are the Rust tests' job: server/tests/it/oidc, with
// a provider of their own that can sign them.)
//
//   cargo build -p bizrq && (cd e2e && npm ci && node oidc.mjs)
//
// BIZRQ_BIN and CHROMIUM as for run.mjs. Screenshots in e2e/artifacts/oidc/.

import Provider from 'oidc-provider';
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { BIN, CHROMIUM, ARTIFACTS, PASSWORD, expect, readable } from './common.mjs';

const OUT = join(ARTIFACTS, 'oidc');
mkdirSync(OUT, { recursive: true });
const SECRET = 'e2e-oidc-client-secret-0123456789';

/** A free port on 127.0.0.1 (bizrq's redirect URI must be known first). */
function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// The provider's people. Groups are read when a token is issued, at
// sign-in and at each refresh, so changing them here is "the IdP admin
// removed alice from a group".
const people = {
  alice: { email: 'alice@example.com', groups: ['team-nlp'] },
  root: { email: 'root@example.com', groups: ['platform-admins'] },
};

function signingKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomBytes(6).toString('hex'), use: 'sig', alg: 'RS256' };
}

/** The provider on `port`, serving `issuer`, signing with `key`. */
async function startProvider(port, issuer, bizrq, key) {
  const provider = new Provider(issuer, {
    clients: [{
      client_id: 'bizrq', client_secret: SECRET,
      redirect_uris: [`${bizrq}/login/oidc/callback`],
      post_logout_redirect_uris: [`${bizrq}/login`],
      grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }],
    jwks: { keys: [key] },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['preferred_username'], groups: ['groups'] },
    scopes: ['openid', 'email', 'profile', 'groups', 'offline_access'],
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    issueRefreshToken: async () => true,
    features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
    cookies: { keys: ['e2e-cookie-key-0123456789'] },
    ttl: { IdToken: 300, AccessToken: 300, RefreshToken: 3600, Session: 3600, Grant: 3600, Interaction: 600 },
    async findAccount(_ctx, id) {
      const p = people[id];
      if (!p) return undefined;
      return {
        accountId: id,
        async claims() {
          return { sub: id, preferred_username: id, email: p.email, email_verified: true, groups: [...p.groups] };
        },
      };
    },
  });
  provider.on('server_error', (_ctx, err) => console.error('oidc-provider:', err));
  const server = createServer(provider.callback());
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  return server;
}

function stop(server) {
  return new Promise((resolve) => { server.closeAllConnections?.(); server.close(() => resolve()); });
}

const opPort = await freePort();
const bizrqPort = await freePort();
const issuer = `http://127.0.0.1:${opPort}`;
const base = `http://127.0.0.1:${bizrqPort}`;
const dir = mkdtempSync(join(tmpdir(), 'bizrq-e2e-oidc-'));
const rules = join(dir, 'group-roles.yaml');
writeFileSync(rules, [
  'groupRoles:',
  '  - {group: platform-admins, role: admin}',
  '  - {group: team-nlp, role: member, quota: nlp}',
  '  - {group: nlp-leads, role: owner, quota: nlp}',
  '',
].join('\n'));

let op = await startProvider(opPort, issuer, base, signingKey());
const child = spawn(BIN, ['serve', '--standalone', '--listen', `127.0.0.1:${bizrqPort}`,
  '--webhook-listen', '127.0.0.1:0', '--probe-listen', '127.0.0.1:0',
  '--database-url', `sqlite://${join(dir, 'bizrq.db')}`, '--admin-token', 'e2e-admin-token', '--demo',
  '--public-url', base, '--oidc-issuer', issuer, '--oidc-client-id', 'bizrq',
  '--oidc-scopes', 'openid,email,profile,groups', '--oidc-display-name', 'Acme SSO',
  '--oidc-group-roles', rules, '--oidc-refresh-seconds', '2', '--oidc-jwks-refetch-seconds', '1',
  '--oidc-kube-username-claim', 'email', '--oidc-kube-username-prefix', 'oidc:'], {
  env: { ...process.env, BIZRQ_ADMIN_PASSWORD: PASSWORD, BIZRQ_DEMO_PASSWORD: PASSWORD,
    BIZRQ_OIDC_CLIENT_SECRET: SECRET, BIZRQ_LOG: process.env.BIZRQ_LOG || 'warn' },
  stdio: ['ignore', 'pipe', 'inherit'],
});
await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error('bizrq did not get ready in 90 s')), 90_000);
  child.on('exit', (code) => reject(new Error(`bizrq exited with ${code} before it was ready`)));
  createInterface({ input: child.stdout }).on('line', (line) => {
    if (/^bizrq ready /.test(line)) { clearTimeout(timer); resolve(); }
  });
});

const browser = await chromium.launch({ executablePath: CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'] });

/** A fresh browser (JavaScript off) that reaches nothing but 127.0.0.1. */
async function newPage(width = 1280, height = 900) {
  const context = await browser.newContext({ javaScriptEnabled: false, viewport: { width, height } });
  await context.route('**/*', (route) => (new URL(route.request().url()).hostname === '127.0.0.1' ? route.continue() : route.abort()));
  return context.newPage();
}

let n = 0;
async function step(page, name, fn) {
  n += 1;
  const shot = join(OUT, `${String(n).padStart(2, '0')}-${name}.png`);
  process.stdout.write(`e2e oidc ${n}. ${name} … `);
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

async function click(page, selector) {
  await Promise.all([page.waitForLoadState('load'), page.click(selector)]);
}

/** Through the provider's own pages: its login form, then its consent. */
async function signInAtProvider(page, who) {
  await page.waitForURL((u) => u.href.startsWith(issuer), { timeout: 10_000 });
  await page.fill('input[name=login]', who);
  await page.fill('input[name=password]', 'any password');
  await click(page, 'button[type=submit]');
  if (page.url().startsWith(issuer) && await page.$('input[name=prompt][value=consent]')) {
    await click(page, 'button[type=submit]');
  }
}

async function waitFor(what, probe, seconds = 20) {
  for (let i = 0; i < seconds * 4; i += 1) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${what}: not within ${seconds} s`);
}

let failed = false;
try {
  const page = await newPage();
  const callbacks = [];
  page.on('request', (r) => { if (r.url().includes('/login/oidc/callback')) callbacks.push(r.url()); });

  await step(page, 'login-page-offers-the-provider', async () => {
    for (const [w, h] of [[1440, 900], [390, 844]]) {
      const p = await newPage(w, h);
      const resp = await p.goto(`${base}/login`);
      const csp = resp.headers()['content-security-policy'];
      expect(csp.includes(`form-action 'self' ${issuer}`), `the provider may receive the form: ${csp}`);
      expect(await p.isVisible('text=Sign in with Acme SSO'), 'the button names the provider');
      await readable(p, `login at ${w}`);
      await p.screenshot({ path: join(OUT, `login-${w}.png`), fullPage: true });
      await p.context().close();
    }
    await page.goto(`${base}/quotas/nlp`);
    expect(page.url().includes('/login'), 'signed out: the login page');
  });

  await step(page, 'sign-in-through-the-provider', async () => {
    await click(page, 'text=Sign in with Acme SSO');
    await signInAtProvider(page, 'alice');
    // bizrq's page that moves the browser on, then where it was going.
    await page.waitForURL(`${base}/quotas/nlp`, { timeout: 10_000 });
    const header = await page.innerText('header');
    expect(header.includes('alice'), `signed in as alice: ${header}`);
    expect(!header.includes('Users'), 'not an admin');
    expect(await page.isVisible('h1:has-text("nlp")'), 'member of nlp by team-nlp');
    const other = await page.goto(`${base}/quotas/cv`);
    expect(other.status() === 404, `cv is not alice's: ${other.status()}`);
  });

  await step(page, 'admin-sees-the-mapping-and-the-kubernetes-name', async () => {
    const admin = await newPage(1440, 900);
    await admin.goto(`${base}/login`);
    await admin.fill('input[name=username]', 'admin');
    await admin.fill('input[name=password]', PASSWORD);
    await click(admin, 'form[action="/login"] button[type=submit]');
    await admin.goto(`${base}/users`);
    const users = await admin.innerText('body');
    expect(users.includes('oidc:alice@example.com'), 'the Kubernetes username is linked');
    expect(users.includes('SSO'), 'alice signs in with the provider');
    // A rule kept in the portal, through its form: given at once to
    // everyone whose provider named the group.
    await admin.goto(`${base}/groups`);
    await admin.fill('input[name=group]', 'vision-leads');
    await admin.selectOption('select[name=role]', 'owner');
    await admin.fill('input[name=quota]', 'vision');
    await click(admin, 'form[action="/groups"] button[type=submit]');
    expect((await admin.innerText('body')).includes('rule added: members of group vision-leads are owner of vision'), 'the rule is added');
    for (const [w, h] of [[1440, 900], [390, 844]]) {
      await admin.setViewportSize({ width: w, height: h });
      await admin.goto(`${base}/groups`);
      const text = await admin.innerText('body');
      expect(text.includes('team-nlp') && text.includes('member of nlp'), 'the file\'s rules are listed');
      await readable(admin, `groups at ${w}`);
      await admin.screenshot({ path: join(OUT, `groups-${w}.png`), fullPage: true });
    }
    await admin.goto(`${base}/audit?action=role.add`);
    const log = await admin.innerText('body');
    expect(log.includes('member of group team-nlp (group mapping, at sign-in)'), 'the role change is audited with its source');
    await admin.context().close();
  });

  await step(page, 'removed-from-the-group-loses-the-role', async () => {
    people.alice.groups = [];
    await waitFor('nlp gone for alice', async () => (await page.goto(`${base}/quotas/nlp`)).status() === 404);
    const header = await page.innerText('header');
    expect(header.includes('alice'), 'still signed in, without the role');
  });

  await step(page, 'log-out-of-bizrq-and-the-provider', async () => {
    await page.goto(`${base}/tree`);
    await click(page, 'form.whoami button[type=submit]');
    await page.waitForURL((u) => u.href.startsWith(issuer), { timeout: 10_000 });
    await click(page, 'button[name=logout]');
    await page.waitForURL((u) => u.href.startsWith(`${base}/login`), { timeout: 10_000 });
    const again = await page.goto(`${base}/tree`);
    expect(page.url().includes('/login'), `signed out of bizrq: ${again.status()} ${page.url()}`);
  });

  await step(page, 'a-replayed-code-and-a-made-up-state-are-refused', async () => {
    expect(callbacks.length >= 1, 'a callback was seen');
    const other = await newPage();
    const resp = await other.goto(callbacks[0]);
    expect(resp.status() === 400, `a replayed callback: ${resp.status()}`);
    expect((await other.innerText('body')).includes('finished already or has expired'), 'said in words');
    const made = await other.goto(`${base}/login/oidc/callback?code=abc&state=${'A'.repeat(43)}`);
    expect(made.status() === 400, `a state bizrq never made: ${made.status()}`);
    await other.screenshot({ path: join(OUT, 'replayed-callback.png'), fullPage: true });
    await other.context().close();
  });

  await step(page, 'a-callback-carried-into-another-browser-is-refused', async () => {
    // Login CSRF: an attacker starts a sign-in and lures the victim to its
    // authorization URL; the victim signs in at the provider, which sends
    // the victim's browser back with the attacker's state.
    const attacker = await newPage();
    let authorize = null;
    attacker.on('request', (r) => { if (r.url().startsWith(`${issuer}/auth?`)) authorize ??= r.url(); });
    await attacker.goto(`${base}/login`);
    await click(attacker, 'text=Sign in with Acme SSO');
    await waitFor('the authorization URL', async () => authorize !== null, 10);
    const victim = await newPage();
    await victim.goto(authorize);
    const back = victim.waitForResponse((r) => r.url().startsWith(`${base}/login/oidc/callback`), { timeout: 15_000 });
    await signInAtProvider(victim, 'root');
    const resp = await back;
    expect(resp.status() === 400, `another browser's callback: ${resp.status()}`);
    await victim.waitForLoadState('load');
    const said = await victim.innerText('body');
    expect(said.includes('started in another browser'), `said in words: ${said.slice(0, 400)}`);
    const after = await victim.goto(`${base}/tree`);
    expect(victim.url().includes('/login'), `the victim is not signed in as anyone: ${after.status()}`);
    await victim.screenshot({ path: join(OUT, 'another-browser.png'), fullPage: true });
    await attacker.context().close();
    await victim.context().close();
  });

  await step(page, 'the-provider-rotates-its-keys', async () => {
    await stop(op);
    op = await startProvider(opPort, issuer, base, signingKey());
    people.alice.groups = ['team-nlp', 'nlp-leads'];
    await page.goto(`${base}/login?next=/quotas/nlp`);
    await click(page, 'text=Sign in with Acme SSO');
    await signInAtProvider(page, 'alice');
    await page.waitForURL(`${base}/quotas/nlp`, { timeout: 10_000 });
    const resp = await page.goto(`${base}/quotas/nlp/children/new`);
    expect(resp.status() === 200, `owner of nlp by nlp-leads, signed with the new key: ${resp.status()}`);
  });

  await step(page, 'the-provider-is-down', async () => {
    await stop(op);
    const p = await newPage();
    await p.goto(`${base}/login`);
    const [resp] = await Promise.all([p.waitForResponse((r) => r.url() === `${base}/login/oidc`), p.click('text=Sign in with Acme SSO')]);
    expect(resp.status() === 503, `a provider down: ${resp.status()}`);
    const text = await p.innerText('body');
    expect(text.includes('Acme SSO cannot be reached right now'), `said in words: ${text.slice(0, 300)}`);
    await p.screenshot({ path: join(OUT, 'provider-down.png'), fullPage: true });
    await p.context().close();
  });
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  await browser.close();
  child.kill();
  await stop(op).catch(() => {});
}
if (failed) process.exit(1);
console.log('e2e oidc: all steps passed');
