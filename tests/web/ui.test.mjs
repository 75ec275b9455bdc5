// The browser chat UI (web/) in a real headless Chromium (Debian's /usr/bin/chromium, driven by
// npm playwright-core; no browser is downloaded) against a real `fogline serve` with the default
// model: masked placeholders resolve into the committed reply, stop mid-reply, reload resumes the
// conversation, server errors and disconnects are shown, reconnect keeps the session; with a
// model that edits (token editing), rewritten tokens flicker back into focus.
// Screenshots (light/dark, desktop/phone) go to tests/artifacts/web/ (FL_ARTIFACTS overrides).
//
// A reply of the default model takes ~100 ms, too fast to see its fog or stop it by chance. The
// tests that need a reply in flight (the fog, stop, a new chat mid-reply, the streaming
// screenshots, parallel sections) hold the engine (docs/robustness.md, "The hold") and step it
// one forward at a time, each forward's frames handled by the page before the next
// (`stepPage()`, with a ping/pong on the page's own WebSocket as the barrier): what they see
// does not depend on how fast the machine is.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, require, until, metrics } from '../server/lib.mjs';
import { startRedis, cli } from '../server/redis_lib.mjs';

const { chromium } = require('playwright-core');

const here = path.dirname(fileURLToPath(import.meta.url));
const ARTIFACTS = process.env.FL_ARTIFACTS || path.join(here, '..', 'artifacts', 'web');
const CHROMIUM = process.env.FL_CHROMIUM || '/usr/bin/chromium';
const SERVER_ARGS = ['--threads', '1', '--max-tokens-limit', '512', '--drain-timeout', '1'];
// the page's server can be held (the hold stays off until a test asks for it)
const HOLDABLE = { env: { FOGLINE_TEST_HOLD: '1' } };
const DESKTOP = { width: 1280, height: 820 };
const PHONE = { width: 390, height: 844 };

let server;
let home;
let ctx;
let page;
let profile;
const frames = { sent: [], received: [] };

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  server = await startServer(SERVER_ARGS, HOLDABLE);
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'fogline-chromium-'));
  ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic',
           '--no-first-run', '--disable-component-update', '--disable-sync'],
    viewport: DESKTOP,
    colorScheme: 'light',
    reducedMotion: 'no-preference',
  });
  // Test-only instrumentation: the page's frames as its own code received them (window.__rx:
  // type, id, finish, in order), and window.__sync(), a ping on the page's WebSocket that
  // resolves once the page has handled its pong, and so every frame the server queued before it
  await ctx.addInitScript(() => {
    const waiting = new Map();
    let syncs = 0;
    window.__rx = [];
    const d = Object.getOwnPropertyDescriptor(WebSocket.prototype, 'onmessage');
    Object.defineProperty(WebSocket.prototype, 'onmessage', {
      configurable: true,
      get() { return d.get.call(this); },
      set(fn) {
        window.__ws = this; // the page's current connection
        d.set.call(this, (ev) => {
          fn.call(this, ev);
          let f;
          try { f = JSON.parse(ev.data); } catch { return; }
          if (f.id !== undefined) window.__rx.push({ type: f.type, id: f.id, finish: f.finish });
          if (f.type === 'pong' && waiting.has(f.id)) { waiting.get(f.id)(); waiting.delete(f.id); }
        });
      },
    });
    window.__sync = () => new Promise((resolve) => {
      const id = `page-sync-${++syncs}`;
      waiting.set(id, resolve);
      window.__ws.send(JSON.stringify({ type: 'ping', id }));
    });
  });
  page = ctx.pages()[0] || await ctx.newPage();
  page.on('pageerror', (e) => { process.stderr.write(`[page error] ${e.stack || e}\n`); pageErrors.push(e); });
  page.on('websocket', (w) => {
    w.on('framesent', ({ payload }) => frames.sent.push(JSON.parse(payload)));
    w.on('framereceived', ({ payload }) => frames.received.push(JSON.parse(payload)));
  });
  home = server.url; // (the server restarted by the reconnect test listens on this port again)
  await page.goto(home);
  await connected();
});

after(async () => { // after a failure too; the last test checks the clean exit
  await ctx?.close().catch(() => {});
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
  await server?.stop();
});

const pageErrors = [];

async function connected() {
  await page.waitForSelector('#conn[data-state="open"]', { timeout: 20000 });
}

const assistants = () => page.locator('.msg[data-role="assistant"]');
const lastAssistant = () => assistants().last();

async function setSettings(values, screenshot) {
  await page.click('#open-settings');
  await page.waitForSelector('#settings[open]');
  if ('policy' in values) await page.selectOption('#set-policy', values.policy);
  if ('pipeline' in values) await page.setChecked('#set-pipeline', values.pipeline);
  if ('parallel' in values) await page.selectOption('#set-parallel', values.parallel);
  if ('max_tokens' in values) await page.fill('#set-max-tokens', String(values.max_tokens));
  if ('temperature' in values) await page.fill('#set-temperature', String(values.temperature));
  if ('watch' in values) await page.selectOption('#set-watch', values.watch);
  if ('format' in values) await page.selectOption('#set-format', values.format);
  if ('schema' in values) await page.fill('#set-schema', values.schema);
  if ('tools' in values) await page.fill('#set-tools', values.tools);
  if ('tool_choice' in values) await page.selectOption('#set-tool-choice', values.tool_choice);
  if (screenshot) await shot(screenshot);
  await closeSettings();
}

// Closes the settings with Esc (keyboard only, as a user does) and resolves once the page has
// handled the dialog's close event. That event is queued (headless Chromium fired it up to ~0.4 s
// after the dialog lost its [open], often after the test's next steps), so
// `#settings:not([open])` alone does not say that the page's close handler (the focus, a
// reconnect for a new API key) has run, nor that it will not run in the middle of what the test
// does next.
async function closeSettings() {
  await page.evaluate(() => {
    const d = document.getElementById('settings');
    // added after the page's own listener: it runs once the page's has
    window.__settingsClosed = new Promise((resolve) =>
      d.addEventListener('close', () => resolve(), { once: true }));
  });
  await page.keyboard.press('Escape');
  await page.evaluate(() => window.__settingsClosed);
  assert.equal(await page.locator('#settings[open]').count(), 0);
}

// Types into the composer and sends with Enter; resolves with the chat frame it sent.
async function sendMessage(text) {
  const n = frames.sent.length;
  await page.fill('#composer-input', text);
  await page.press('#composer-input', 'Enter');
  return until(() => frames.sent.slice(n).find((f) => f.type === 'chat'), 5000, 'the chat frame');
}

const framesOf = (id) => frames.received.filter((f) => f.id === id);

// The server's frames for chat `id` once Playwright's frame events include its last one (done,
// or an error for the whole reply): those events may come after the page has handled the frame
// and shown it, so a reply shown as done does not mean its frames are all in `frames` yet.
const replyFrames = async (id) => {
  const last = (f) => f.type === 'done' || (f.type === 'error' && f.segment == null);
  await until(() => framesOf(id).some(last), 10000, `the last frame event of ${id}`);
  return framesOf(id);
};

// Resolves once every finite animation and transition on the page has run to its end (the fog's
// endless drift aside), for screenshots of where things settle on a machine of any speed.
// getAnimations() first applies pending style changes, so a transition just triggered is included.
const animationsDone = () => page.evaluate(() => Promise.all(document.getAnimations()
  .filter((a) => Number.isFinite(a.effect?.getComputedTiming().endTime))
  .map((a) => a.finished.catch(() => {})))); // an animation cancelled on the way is over too

// The page's frames for chat `id`, as its code handled them (window.__rx).
const pageFrames = (id) => page.evaluate((x) => window.__rx.filter((f) => f.id === x), id);

// A barrier: resolves once the page has handled every frame the server queued for it before
// reading the page's ping.
const pageSync = () => page.evaluate(() => window.__sync());

// With the engine held (server.hold()): one forward at a time until pred() holds for the page,
// each forward's frames handled by the page before the next. Fails after max forwards.
async function stepPage(pred, max = 2000, srv = server) {
  for (let i = 0; !(await pred()); i++) {
    if (i >= max) throw new Error(`stepPage: not there after ${max} forwards`);
    await srv.step();
    await pageSync();
  }
}

// the state of the newest reply: 'streaming' until its done (or error) frame was handled
const replyState = () => lastAssistant().getAttribute('data-state');

const FIRST_MESSAGE = 'How do I reset my password? How long does express shipping take? ' +
  'What are your store hours?';

async function shot(name) {
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`) });
}

test('a reply comes out of the fog: masked placeholders resolve in place into the committed text', async () => {
  // Shift+Enter is a new line, not a send
  await page.fill('#composer-input', 'first line');
  await page.press('#composer-input', 'Shift+Enter');
  await page.keyboard.type('second line');
  assert.equal(await page.inputValue('#composer-input'), 'first line\nsecond line');
  assert.equal(frames.sent.filter((f) => f.type === 'chat').length, 0);

  await setSettings({ policy: 'sequential', pipeline: false });
  // narrow enough that the reply's line plus its fog wraps, and the fog that resolves into end
  // tokens would unwrap it
  await page.setViewportSize({ width: 640, height: 820 });
  // record every DOM state of the streaming reply
  await page.evaluate(() => {
    window.__fog = { maxMasked: 0, mixed: 0, samples: [], heights: [] };
    new MutationObserver(() => {
      const live = document.querySelector('.msg[data-role="assistant"][data-state="streaming"] .live');
      if (!live) return;
      const masked = live.querySelectorAll('.fog').length;
      const decided = live.querySelectorAll('.tok').length;
      window.__fog.maxMasked = Math.max(window.__fog.maxMasked, masked);
      if (masked && decided) window.__fog.mixed++;
      if (masked) window.__fog.samples.push(live.textContent);
      window.__fog.heights.push(live.closest('.reply').getBoundingClientRect().height);
    }).observe(document.getElementById('thread'), { childList: true, subtree: true, characterData: true, attributes: true });
  });
  // the engine held and stepped: every forward's draft reaches the page before the next
  // forward can commit its block (free-running, a block's queued draft is dropped when its
  // commit comes first, and a fast machine could show no fog at all)
  await server.hold();
  let chat;
  try {
    chat = await sendMessage(FIRST_MESSAGE);
    assert.equal(chat.decoding.policy, 'sequential');
    assert.equal(chat.decoding.pipeline, false);
    assert.equal(chat.messages.at(-1).content, FIRST_MESSAGE);
    await stepPage(async () => (await replyState()) !== 'streaming');
  } finally {
    await server.release();
  }
  assert.equal(await replyState(), 'done');
  const mine = await replyFrames(chat.id);

  const fog = await page.evaluate(() => window.__fog);
  assert.ok(fog.maxMasked > 0, 'masked placeholders were seen while streaming');
  assert.ok(fog.mixed > 0, 'placeholders and resolved tokens were seen side by side');

  const commits = mine.filter((f) => f.type === 'commit');
  assert.ok(mine.some((f) => f.type === 'draft'), 'drafts came');
  const done = mine.at(-1);
  assert.equal(done.type, 'done');
  assert.equal(done.session, chat.session);
  const reply = commits.map((f) => f.text).join('');
  assert.ok(reply.trim().length > 0, 'a non-empty reply');

  // the settled reply is the committed text as Markdown, with no fog left
  const shown = await lastAssistant().locator('.md').evaluate((el) => el.textContent);
  const expected = await page.evaluate(async (t) => {
    const m = await import('/markdown.js');
    const d = document.createElement('div');
    d.innerHTML = m.renderMarkdown(t);
    return d.textContent;
  }, reply);
  assert.equal(shown, expected);
  assert.equal(await page.locator('.fog').count(), 0);
  // no layout jumps: the reply only grows while it streams (it settles smoothly once done)
  const hs = fog.heights;
  for (let i = 1; i < hs.length; i++) assert.ok(hs[i] >= hs[i - 1] - 0.5, `the reply's height went ${hs[i - 1]} -> ${hs[i]}`);
  // stored for resume: the same text under the session id
  const stored = await page.evaluate((s) => JSON.parse(localStorage.getItem(`fogline.chat.${s}`)), chat.session);
  assert.equal(stored.messages.at(-1).content, reply);
  // the stats line
  const stats = await lastAssistant().locator('.stats').textContent();
  assert.match(stats, new RegExp(`tokens ${done.usage.completion_tokens}`));
  assert.match(stats, /TPF \d/);
  assert.match(stats, /tok\/s \d/);
  assert.match(stats, /first draft \d/);
  assert.equal(await page.locator('#send').isVisible(), true);
  assert.equal(await page.locator('#stop').isVisible(), false);
  await page.setViewportSize(DESKTOP);
  await shot('desktop-light');
});

test('stop cancels mid-reply and keeps what was committed', async () => {
  // held and stepped until the page shows the reply's fog; the stop comes while no forward can
  // run, so it lands mid-reply on any machine, and nothing but its done can follow it
  await server.hold();
  let chat;
  let seen;
  try {
    chat = await sendMessage('My invoice shows the wrong amount.');
    const fog = () => page.locator('.msg[data-state="streaming"] .live .fog').count();
    await stepPage(async () => (await fog()) > 0 || (await replyState()) !== 'streaming');
    seen = await pageFrames(chat.id);
    assert.ok(await fog() > 0, `the reply ended before its fog was shown: ${seen.map((f) => f.type).join(' ')}`);
    assert.equal(await page.locator('#stop').isVisible(), true);
    await page.click('#stop');
    await lastAssistant().and(page.locator('[data-state="cancelled"]')).waitFor({ timeout: 20000 });
  } finally {
    await server.release();
  }
  // the server answered the cancel at once, with the engine held: the done is all that came
  // after what the page had when it stopped
  const mine = await pageFrames(chat.id);
  assert.deepEqual(mine.slice(seen.length), [{ type: 'done', id: chat.id, finish: 'cancelled' }]);
  assert.ok(!seen.some((f) => f.type === 'done'), 'no done before the stop');
  await until(() => frames.sent.some((f) => f.type === 'cancel' && f.id === chat.id), 5000, 'the cancel frame event');
  const kept = (await replyFrames(chat.id)).filter((f) => f.type === 'commit').map((f) => f.text).join('');
  const stored = await page.evaluate((s) => JSON.parse(localStorage.getItem(`fogline.chat.${s}`)), chat.session);
  assert.equal(stored.messages.at(-1).content, kept);
  assert.equal(stored.messages.at(-1).finish, 'cancelled');
  assert.match(await lastAssistant().locator('.stats').textContent(), /stopped/);
  assert.equal(await page.locator('.fog').count(), 0);
  assert.equal(await page.locator('#stop').isVisible(), false);
});

test('screenshots: streaming in light and dark, desktop and phone width', async () => {
  await setSettings({ pipeline: true }); // several blocks in the fog at once
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    // held and stepped to the first draft with tokens out of the fog and positions still in it:
    // the page keeps that draft while the screenshot is taken
    await server.hold();
    try {
      await sendMessage(scheme === 'light' ? 'Can I change the email on my account?' : 'How long does a refund take?');
      const live = () => page.evaluate(() => {
        const l = document.querySelector('.msg[data-state="streaming"] .live');
        return l && l.querySelectorAll('.tok').length >= 2 && l.querySelectorAll('.fog').length >= 2;
      });
      await stepPage(async () => (await live()) || (await replyState()) !== 'streaming');
      if (await live()) await animationsDone(); // the newest tokens' defog animation
      else process.stderr.write(`# ${scheme}: the reply had no draft with 2 tokens and 2 masks\n`);
      await shot(`desktop-${scheme}-streaming`);
    } finally {
      await server.release();
    }
    await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 30000 });
  }
  await page.setViewportSize(PHONE);
  await page.waitForFunction(() => matchMedia('(max-width: 760px)').matches); // the phone layout
  await animationsDone(); // the chat list's slide-out transition
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    await shot(`phone-${scheme}`);
  }
  // the chat list slides in on a phone and closes with Esc
  await page.click('#open-sidebar');
  await page.waitForSelector('.app.sidebar-open');
  await animationsDone(); // its slide-in transition
  await shot('phone-dark-chats');
  await page.keyboard.press('Escape');
  await page.waitForSelector('.app:not(.sidebar-open)');
  await page.setViewportSize(DESKTOP);
  await page.emulateMedia({ colorScheme: 'light' });
  // the dark theme really differs
  const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const light = await bg();
  await page.emulateMedia({ colorScheme: 'dark' });
  const dark = await bg();
  await page.emulateMedia({ colorScheme: 'light' });
  assert.notEqual(light, dark);
});

test('a server error is shown on the reply, and the chat goes on', async () => {
  await setSettings({ max_tokens: 100000 }, 'desktop-light-settings');
  const chat = await sendMessage('hello');
  const err = lastAssistant().locator('.msg-error');
  await err.waitFor({ timeout: 10000 });
  const text = await err.textContent();
  assert.match(text, /max_tokens/);
  assert.match(text, /out_of_range/);
  assert.equal(await lastAssistant().getAttribute('data-state'), 'error');
  assert.equal((await replyFrames(chat.id)).at(-1).code, 'out_of_range');
  await shot('desktop-light-error');
  // fixed in the settings, Retry sends it again
  await setSettings({ max_tokens: 64 });
  const n = frames.sent.length;
  await err.locator('button.retry').click();
  const again = await until(() => frames.sent.slice(n).find((f) => f.type === 'chat'), 5000, 'the retried chat');
  assert.equal(again.max_tokens, 64);
  assert.equal(again.messages.at(-1).content, 'hello');
  await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
  assert.equal(await page.locator('.msg-error').count(), 0);
});

test('reload restores the conversation and continues the same session', async () => {
  const before = await page.locator('#thread').evaluate((el) =>
    [...el.children].map((m) => [m.dataset.role, m.dataset.state || '', (m.querySelector('.bubble,.md')).textContent]));
  const session = await page.evaluate(() => JSON.parse(localStorage.getItem('fogline.current')));
  assert.ok(before.length >= 8, `a conversation of several turns (${before.length} messages)`);
  await page.reload();
  await connected();
  const afterReload = await page.locator('#thread').evaluate((el) =>
    [...el.children].map((m) => [m.dataset.role, m.dataset.state || '', (m.querySelector('.bubble,.md')).textContent]));
  assert.deepEqual(afterReload, before);
  assert.equal(await page.locator('#chat-title').textContent(), FIRST_MESSAGE.slice(0, 60));
  assert.equal(await page.locator('.chat-list li.current').count(), 1);
  // the stats survive too
  assert.match(await assistants().first().locator('.stats').textContent(), /TPF/);
  const chat = await sendMessage('thanks!');
  assert.equal(chat.session, session);
  const roles = chat.messages.map((m) => m.role);
  assert.equal(roles.filter((r) => r === 'user').length, 6, 'the whole history is sent');
  assert.equal(roles.at(-1), 'user');
  await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
});

test('a disconnect is shown; the UI reconnects and keeps the session', async () => {
  const session = await page.evaluate(() => JSON.parse(localStorage.getItem('fogline.current')));
  // every text the banner shows (the "Reconnected" one goes after 3 s: the test records it
  // rather than racing its timer)
  await page.evaluate(() => {
    const b = document.getElementById('banner');
    window.__banners = [];
    new MutationObserver(() => { if (!b.hidden) window.__banners.push(b.textContent); })
      .observe(b, { childList: true, subtree: true, characterData: true, attributes: true });
  });
  const { port } = server;
  assert.equal(await server.stop(), 0);
  await page.waitForSelector('#conn[data-state="closed"]', { timeout: 10000 });
  const banner = page.locator('#banner');
  await banner.waitFor({ state: 'visible' });
  assert.match(await banner.textContent(), /Disconnected/);
  assert.equal(await page.locator('#send').isDisabled(), true);
  await shot('desktop-light-disconnected');
  // the same port again: the page reconnects by itself
  server = await startServer([...SERVER_ARGS, '--port', String(port)], HOLDABLE);
  await connected();
  await until(() => page.evaluate(() => window.__banners.some((t) => /Reconnected/.test(t))), 15000, 'the reconnected banner');
  const chat = await sendMessage('are you back?');
  assert.equal(chat.session, session);
  await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
  // a new chat mid-reply cancels that reply and keeps the old chat; a new session starts (the
  // engine held, so that the reply is surely still running when the new chat is opened)
  await server.hold();
  try {
    await sendMessage('one more question');
    await page.click('#new-chat');
    await until(async () => {
      const old = await page.evaluate((s) => JSON.parse(localStorage.getItem(`fogline.chat.${s}`)), session);
      return old.messages.at(-1).role === 'assistant' && old.messages.at(-1).finish;
    }, 5000, 'the old chat saved');
    const old = await page.evaluate((s) => JSON.parse(localStorage.getItem(`fogline.chat.${s}`)), session);
    assert.equal(old.messages.at(-1).finish, 'cancelled');
  } finally {
    await server.release();
  }
  assert.equal(await page.locator('.msg').count(), 0);
  const fresh = await sendMessage('hello again');
  assert.notEqual(fresh.session, session);
  assert.equal(fresh.messages.length, 1);
  await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
  assert.equal(await page.locator('.chat-list li').count(), 2);
});

test('stored replies render as Markdown (lists, code, emphasis) and model HTML stays text', async () => {
  const id = 's-markdowntest';
  const evil = 'Steps:\n\n1. Open **Settings**\n2. Choose *Security*\n\n```\nreset --all <b>x</b>\n```\n\n'
    + 'Inline `code`, <img src=x onerror="window.__xss=1"> <script>window.__xss=2</script> '
    + '[click](javascript:window.__xss=3) ![pic](http://127.0.0.1:9/track.png)';
  await page.evaluate(({ id, evil }) => {
    localStorage.setItem(`fogline.chat.${id}`, JSON.stringify({ id, title: 'markdown', messages: [
      { role: 'user', content: '<b>not bold</b>' },
      { role: 'assistant', content: evil, finish: 'stop', usage: { prompt_tokens: 1, completion_tokens: 40, total_tokens: 41 },
        stats: { tpf: 2, forwards: 20, ms_total: 100, ms_first_update: 5 } }] }));
    localStorage.setItem('fogline.current', JSON.stringify(id));
  }, { id, evil });
  await page.reload();
  await connected();
  const reply = lastAssistant().locator('.md');
  assert.equal(await reply.locator('ol > li').count(), 2);
  assert.equal(await reply.locator('strong').textContent(), 'Settings');
  assert.equal(await reply.locator('em').textContent(), 'Security');
  assert.match(await reply.locator('pre code').textContent(), /reset --all <b>x<\/b>/);
  assert.equal(await reply.locator('p code').textContent(), 'code');
  assert.equal(await page.locator('.md img, .md script, .md [onerror], .md a[href^="javascript"]').count(), 0);
  assert.match(await reply.textContent(), /<img src=x onerror/);
  assert.equal(await page.locator('.bubble b').count(), 0);
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  await shot('desktop-light-markdown');
});

test('parallel questions: the answers grow side by side, one section per question', async () => {
  await setSettings({ parallel: 'fanout', policy: 'sequential', pipeline: false });
  // held and stepped: both sections' drafts reach the page before their blocks commit
  await server.hold();
  try {
    await page.evaluate(() => {
      window.__seg = { both: 0 };
      new MutationObserver(() => {
        const secs = document.querySelectorAll('.msg[data-state="streaming"] .segment');
        if (secs.length === 2 && [...secs].every((d) => d.querySelector('.blk'))) window.__seg.both++;
      }).observe(document.getElementById('thread'), { childList: true, subtree: true });
    });
    const chat = await sendMessage('Where is my order 48213?\nWhat are your store hours on Sunday?');
    assert.deepEqual(chat.parallel, { mode: 'fanout', segments: ['Where is my order 48213?', 'What are your store hours on Sunday?'] });
    assert.equal(chat.session, undefined);
    await stepPage(async () => (await replyState()) !== 'streaming');
    await server.release();
    assert.equal(await replyState(), 'done');
    const mine = await replyFrames(chat.id);
    assert.ok((await page.evaluate(() => window.__seg.both)) > 0, 'both segments were in the fog at the same time');
    assert.equal(mine.at(-1).type, 'done');
    const secs = lastAssistant().locator('.segment');
    assert.equal(await secs.count(), 2);
    for (let i = 0; i < 2; i++) {
      const text = mine.filter((f) => f.type === 'commit' && f.segment === i).map((f) => f.text).join('');
      assert.ok(text.trim().length > 0, `segment ${i} answered`);
      const shown = await secs.nth(i).locator('.md').evaluate((el) => el.textContent);
      assert.equal(shown.replace(/\s+/g, ''), text.replace(/\s+/g, '')); // Markdown may move spaces
      assert.equal(await secs.nth(i).getAttribute('data-state'), 'done');
      assert.equal(await secs.nth(i).locator('.q').textContent(), chat.parallel.segments[i]);
    }
    assert.equal(await page.locator('.fog').count(), 0);
    // stored as one reply: each question and its answer
    const stored = await page.evaluate(() => JSON.parse(localStorage.getItem(`fogline.chat.${localStorage.getItem('fogline.current').replace(/"/g, '')}`)));
    assert.match(stored.messages.at(-1).content, /\*\*Where is my order 48213\?\*\*/);
    await shot('parallel-questions');
  } finally {
    if (server.held) await server.release();
    await setSettings({ parallel: 'off', policy: 'threshold', pipeline: true });
  }
});

test('parallel questions found by the model (auto): the outline\'s points become the sections', async () => {
  await setSettings({ parallel: 'auto' });
  try {
    const chat = await sendMessage('Where is my order 48213? What are your store hours on Sunday?');
    assert.deepEqual(chat.parallel, { mode: 'auto' });
    assert.equal(chat.session, undefined);
    assert.equal(chat.messages.at(-1).content, 'Where is my order 48213? What are your store hours on Sunday?');
    await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 60000 });
    const mine = await replyFrames(chat.id);
    assert.equal(mine.at(-1).type, 'done');
    const outline = mine.find((f) => f.type === 'outline');
    assert.ok(outline, 'an outline frame');
    const secs = lastAssistant().locator('.segment');
    if (outline.points.length >= 2) {
      assert.equal(await secs.count(), outline.points.length);
      for (let i = 0; i < outline.points.length; i++) {
        assert.equal(await secs.nth(i).locator('.q').textContent(), outline.points[i]);
        const text = mine.filter((f) => f.type === 'commit' && f.segment === i).map((f) => f.text).join('');
        const shown = await secs.nth(i).locator('.md').evaluate((el) => el.textContent);
        assert.equal(shown.replace(/\s+/g, ''), text.replace(/\s+/g, '')); // Markdown may move spaces
      }
      await shot('parallel-auto');
    } else {
      // no usable outline: one plain reply
      assert.equal(await secs.count(), 0);
      const text = mine.filter((f) => f.type === 'commit').map((f) => f.text).join('');
      const shown = await lastAssistant().locator('.reply').evaluate((el) => el.textContent);
      assert.equal(shown.replace(/\s+/g, ''), text.replace(/\s+/g, '')); // Markdown may move spaces
    }
  } finally {
    await setSettings({ parallel: 'off' });
  }
});

test('a server with an API key: the page asks for it, and chats once it is set in Settings', async () => {
  const locked = await startServer([...SERVER_ARGS, '--api-key', 'sesame']);
  try {
    await page.goto(locked.url);
    const banner = page.locator('#banner');
    await until(async () => /needs an API key/.test(await banner.textContent()), 10000, 'the API key banner');
    assert.equal(await page.locator('#conn-text').textContent(), 'API key needed');
    await page.fill('#composer-input', 'hello');
    assert.equal(await page.locator('#send').isDisabled(), true);
    await page.click('#open-settings');
    await page.fill('#set-api-key', 'sesame');
    await closeSettings();
    await connected();
    await until(async () => await banner.isHidden(), 10000, 'the banner to go');
    await page.fill('#composer-input', 'hello');
    await page.press('#composer-input', 'Enter');
    await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
  } finally {
    assert.equal(await locked.stop(), 0);
  }
});

// A server with a model that thinks (tests/server/make_think_model.py: its one output token is
// "<think>\nThe user says hi.\n</think>\n\nHello! How can I help?"): the reasoning is shown
// collapsed above the answer, also after a reload.
test('a thinking model: the reasoning is in a collapsed <details> above the answer', async () => {
  const thinker = await startServer([...SERVER_ARGS], { model: process.env.FL_THINK_MODEL });
  try {
    await page.goto(thinker.url);
    await connected();
    await setSettings({ max_tokens: 1 });
    const sent = await sendMessage('hi');
    const reply = lastAssistant();
    await reply.and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
    assert.ok((await replyFrames(sent.id)).some((f) => f.type === 'commit' && f.reasoning === 'The user says hi.'));
    for (const when of ['live', 'reloaded']) {
      const d = reply.locator('.reply > details.reasoning');
      assert.equal(await d.count(), 1, when);
      assert.equal(await d.evaluate((el) => el.open), false, `${when}: collapsed`);
      assert.equal(await d.locator('summary').textContent(), 'Reasoning');
      assert.equal(await d.locator('.think').textContent(), 'The user says hi.');
      assert.equal(await d.locator('.think').isVisible(), false, `${when}: hidden until opened`);
      assert.equal((await reply.locator('.reply > .md').textContent()).trim(), 'Hello! How can I help?', when);
      assert.ok(await d.evaluate((el) => el.nextElementSibling.classList.contains('md')), 'above the answer');
      if (when === 'live') {
        await d.locator('summary').click();
        assert.equal(await d.locator('.think').isVisible(), true, 'opens on a click');
        await page.reload();
        await connected();
      }
    }
  } finally {
    assert.equal(await thinker.stop(), 0);
  }
});

test('structured output: a JSON schema in Settings makes the reply a value of it', async () => {
  const schema = { type: 'object', properties: { status: { enum: ['pending', 'shipped', 'delivered'] }, note: { type: 'string' } },
    required: ['status', 'note'], additionalProperties: false };
  await page.goto(home); // (server.url: the port the restarted server was first given)
  await connected();
  await setSettings({ format: 'json_schema', schema: JSON.stringify(schema), max_tokens: 120 });
  const sent = await sendMessage('Where is my order 48213?');
  assert.deepEqual(sent.response_format, { type: 'json_schema', json_schema: { name: 'reply', schema } });
  const reply = lastAssistant();
  await reply.and(page.locator('[data-state="done"]')).waitFor({ timeout: 30000 });
  const stored = await page.evaluate(() => {
    const c = JSON.parse(localStorage.getItem(`fogline.chat.${localStorage.getItem('fogline.current').replace(/"/g, '')}`));
    return c.messages.at(-1).content;
  });
  const v = JSON.parse(stored);
  assert.ok(['pending', 'shipped', 'delivered'].includes(v.status) && typeof v.note === 'string', stored);
  // a schema that is not JSON is flagged in the panel; text again for the tests after this one
  await page.click('#open-settings');
  await page.fill('#set-schema', '{"type": ');
  assert.equal(await page.getAttribute('#set-schema', 'aria-invalid'), 'true');
  assert.match(await page.textContent('#schema-note'), /not JSON/);
  await page.selectOption('#set-format', 'text');
  await closeSettings();
});

test('tool calls show as cards under the reply, and stay after a reload', async () => {
  const thinker = await startServer([...SERVER_ARGS], { model: process.env.FL_THINK_MODEL });
  const tools = [{ type: 'function', function: { name: 'get_order', description: 'Look an order up',
    parameters: { type: 'object', properties: { order_id: { type: 'integer' } }, required: ['order_id'], additionalProperties: false } } }];
  try {
    await page.goto(thinker.url);
    await connected();
    await setSettings({ tools: JSON.stringify(tools), tool_choice: 'required', max_tokens: 64 });
    const sent = await sendMessage('Where is order 12?');
    assert.equal(sent.tool_choice, 'required');
    assert.equal(sent.session, undefined);
    const reply = lastAssistant();
    await reply.and(page.locator('[data-state="done"]')).waitFor({ timeout: 30000 });
    for (const when of ['live', 'reloaded']) {
      const card = reply.locator('.tool-calls .tool-card');
      assert.equal(await card.count(), 1, when);
      assert.equal(await card.locator('.tool-name').textContent(), 'get_order', when);
      const args = JSON.parse(await card.locator('.tool-args').textContent());
      assert.equal(typeof args.order_id, 'number', when);
      assert.doesNotMatch(await reply.locator('.reply > .md').textContent(), /tool_call/, `${when}: the call's text is the card`);
      if (when === 'live') {
        await shot('tool-call-card');
        await page.reload();
        await connected();
      }
    }
    await setSettings({ tools: '', tool_choice: 'auto' });
  } finally {
    assert.equal(await thinker.stop(), 0);
  }
});

// The decoding settings' defaults are the server's (the model's, docs/protocol.md hello
// `decoding`): a chat carries only what the user changed, so that a model is not decoded in a
// way it was not trained for (pipelining an SDAR model) because the page had its own defaults.
test('decoding settings show the server\'s defaults, and a chat carries only what the user changed', async () => {
  const panel = async () => {
    await page.click('#open-settings');
    await page.waitForSelector('#settings[open]');
    const v = { pipeline: await page.isChecked('#set-pipeline'), policy: await page.inputValue('#set-policy'),
                threshold: await page.textContent('#out-threshold'), note: await page.textContent('#decoding-defaults') };
    await closeSettings();
    return v;
  };
  const chatOnce = async (text) => {
    const sent = await sendMessage(text);
    await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
    assert.equal((await replyFrames(sent.id)).at(-1).type, 'done');
    return sent;
  };
  const stored = () => page.evaluate(() => JSON.parse(localStorage.getItem('fogline.settings')));
  // what an older page stored: every field, its hard-coded defaults included
  const OLD_PAGE = { temperature: 0, policy: 'threshold', threshold: 0.9, pipeline: true, parallel: 'off', max_tokens: 256, api_key: '' };

  // the built-in model pipelines (its config.json says so): the panel shows it, a chat does not send it
  const plain = await startServer([...SERVER_ARGS]);
  try {
    await page.goto(plain.url); // a new origin: no stored settings
    await connected();
    let p = await panel();
    assert.equal(p.pipeline, true);
    assert.equal(p.policy, 'threshold');
    assert.equal(p.threshold, '0.90');
    assert.match(p.note, /^The server's defaults for fogline-helpdesk/);
    let sent = await chatOnce('hello');
    assert.equal(sent.decoding, undefined, JSON.stringify(sent.decoding));
    assert.equal(sent.temperature, undefined);
    // the user turns pipelining off: sent, and stored as the user's own; on again (the
    // server's default): not sent
    await setSettings({ pipeline: false });
    sent = await chatOnce('hello');
    assert.deepEqual(sent.decoding, { pipeline: false });
    assert.deepEqual((await stored()).overrides, { pipeline: false });
    p = await panel();
    assert.equal(p.pipeline, false);
    assert.match(p.note, /Changed from the server's defaults for fogline-helpdesk: pipelining\./);
    await setSettings({ pipeline: true });
    sent = await chatOnce('hello');
    assert.equal(sent.decoding, undefined, JSON.stringify(sent.decoding));
    // Reset to defaults: the server's again
    await setSettings({ pipeline: false, policy: 'sequential' });
    assert.deepEqual((await stored()).overrides, { pipeline: false, policy: 'sequential' });
    await page.click('#open-settings');
    await page.click('#settings-reset');
    assert.equal(await page.isChecked('#set-pipeline'), true);
    assert.equal(await page.inputValue('#set-policy'), 'threshold');
    await closeSettings();
    sent = await chatOnce('hello');
    assert.equal(sent.decoding, undefined, JSON.stringify(sent.decoding));
    assert.deepEqual((await stored()).overrides, {});
    // an older page's stored settings: what it stored beyond its defaults was the user's choice.
    // Written while the panel is open, as another tab would: closing the panel, which changed
    // nothing, leaves them as they are (the page used to store its own copy on close, late)
    const older = { ...OLD_PAGE, pipeline: false, threshold: 0.8, max_tokens: 64 };
    await page.click('#open-settings');
    await page.waitForSelector('#settings[open]');
    await page.evaluate((s) => localStorage.setItem('fogline.settings', JSON.stringify(s)), older);
    await closeSettings();
    assert.deepEqual(await stored(), older);
    await page.reload();
    await connected();
    sent = await chatOnce('hello');
    assert.deepEqual(sent.decoding, { pipeline: false, threshold: 0.8 });
    assert.equal(sent.temperature, undefined);
    assert.equal(sent.max_tokens, 64);
  } finally {
    assert.equal(await plain.stop(), 0);
  }

  // a server that does not pipeline (as for SDAR and Fast-dLLM v2): the panel says so, and an
  // older page's stored "pipeline: true", its own hard-coded default, does not turn it on
  const flat = await startServer([...SERVER_ARGS, '--no-pipeline']);
  try {
    await page.goto(flat.url);
    await page.evaluate((s) => localStorage.setItem('fogline.settings', JSON.stringify(s)), OLD_PAGE);
    await page.reload();
    await connected();
    const p = await panel();
    assert.equal(p.pipeline, false);
    assert.equal(p.policy, 'threshold');
    assert.match(p.note, /^The server's defaults/);
    const sent = await chatOnce('hello');
    assert.equal(sent.decoding, undefined, JSON.stringify(sent.decoding));
    assert.equal(sent.temperature, undefined);
    await setSettings({ pipeline: true }, 'desktop-light-settings-changed');
    assert.deepEqual((await chatOnce('hello')).decoding, { pipeline: true });
  } finally {
    assert.equal(await flat.stop(), 0);
  }
});

// Token editing (LLaDA2.1's decoding): with a model that rewrites tokens it already showed
// (tests/server/make_edit_model.py, a server started with --preset quality), a draft's `edited`
// positions flicker back into focus as new tokens do, and the reply settles into the commits.
test('token editing: a token rewritten in a draft flickers back into focus', async () => {
  const editor = await startServer([...SERVER_ARGS, '--preset', 'quality'],
    { model: process.env.FL_EDIT_MODEL, ...HOLDABLE });
  try {
    await page.goto(editor.url); // a new origin: no stored settings, the server's defaults
    await connected();
    // every span that enters the live block as an edit, with its text and the text it replaced
    await page.evaluate(() => {
      window.__edits = [];
      new MutationObserver((ms) => {
        for (const m of ms) for (const n of m.addedNodes) {
          if (n.nodeType === 1 && n.classList.contains('edited'))
            window.__edits.push({ text: n.textContent, was: m.removedNodes[0]?.textContent,
                                  animated: n.getAnimations().length > 0 });
        }
      }).observe(document.getElementById('thread'), { childList: true, subtree: true });
    });
    await editor.hold();
    let sent;
    try {
      sent = await sendMessage('my printer says offline');
      assert.equal(sent.decoding, undefined, 'the preset is the server\'s: the page sends no decoding');
      await stepPage(async () => (await replyState()) !== 'streaming', 2000, editor);
    } finally {
      await editor.release();
    }
    assert.equal(await replyState(), 'done');
    const mine = await replyFrames(sent.id);
    const drafted = mine.filter((f) => f.type === 'draft').reduce((n, f) => n + f.edited.length, 0);
    assert.ok(drafted > 0, 'drafts carried edited positions');
    const edits = await page.evaluate(() => window.__edits);
    assert.equal(edits.length, drafted, 'every edited position was redrawn as an edit');
    assert.ok(edits.every((x) => x.animated), 'each edit runs the new-token animation');
    assert.ok(edits.some((x) => x.text !== x.was), 'an edit changed the text shown');
    const reply = mine.filter((f) => f.type === 'commit').map((f) => f.text).join('');
    assert.equal(await page.locator('.fog').count(), 0);
    assert.equal(await page.locator('.tok.edited').count(), 0, 'committed: no draft token left');
    assert.ok(reply.length > 0, 'the commits are the reply');
  } finally {
    assert.equal(await editor.stop(), 0);
  }
});

// Watch it denoise (settings: every step, slowed): the chat asks for every step's draft, and the
// page shows each one in its own task, so a MutationObserver sees every step the server sent,
// in order, with the masked positions thinning out over several frames. Stopping a replay that
// is behind shows what is queued at once and cancels the rest.
test('watch it denoise: a slowed replay shows every step, masked positions resolving frame by frame', async () => {
  await page.goto(home); // back from the editing test's server
  await connected();
  await page.click('#new-chat');
  await page.click('#open-settings');
  await page.waitForSelector('#settings[open]');
  await page.selectOption('#set-watch', '20');
  await page.selectOption('#set-policy', 'threshold');
  await page.setChecked('#set-pipeline', false);
  await closeSettings();
  await page.evaluate(() => {
    window.__steps = [];
    new MutationObserver(() => {
      const a = document.querySelector('.msg[data-role="assistant"][data-state="streaming"]');
      const m = a?.querySelector('.stats')?.textContent.match(/showing (?:§\d+ )?block (\d+) · step (\d+)/);
      if (!m) return;
      const key = `${Number(m[1]) - 1}/${m[2]}`;
      if (window.__steps.at(-1)?.key === key) return;
      window.__steps.push({ key, masked: a.querySelectorAll('.live .fog').length,
                            marked: a.querySelectorAll('.live .tok.new').length });
    }).observe(document.getElementById('thread'), { childList: true, subtree: true, characterData: true });
  });
  const chat = await sendMessage('Where is my order 48213? How long does express shipping take?');
  assert.equal(chat.drafts, 'every_step');
  await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 60000 });
  const mine = await replyFrames(chat.id);
  const drafts = mine.filter((f) => f.type === 'draft');
  const seen = await page.evaluate(() => window.__steps);
  // every step the server sent was on the page, in order
  assert.deepEqual(seen.map((x) => x.key), drafts.map((f) => `${f.block}/${f.step}`));
  assert.ok(drafts.length >= 4, `several steps (${drafts.length})`);
  // the fog thins over several frames, and each frame marks the positions its step unmasked
  assert.ok(new Set(seen.map((x) => x.masked)).size >= 3, `masked counts ${seen.map((x) => x.masked)}`);
  seen.forEach((x, i) => assert.equal(x.marked, drafts[i].new.length, `step ${x.key}: its new positions marked`));
  // settled: the committed reply, no fog
  const reply = mine.filter((f) => f.type === 'commit').map((f) => f.text).join('');
  const stored = await page.evaluate((x) => JSON.parse(localStorage.getItem(`fogline.chat.${x}`)), chat.session);
  assert.equal(stored.messages.at(-1).content, reply);
  assert.equal(await page.locator('.fog').count(), 0);
  await shot('watch-done');

  // stop while the replay is behind: 100x slower, the engine held and stepped so that the
  // reply is still running when the stop comes
  await page.click('#open-settings');
  await page.waitForSelector('#settings[open]');
  await page.selectOption('#set-watch', '100');
  await page.selectOption('#set-policy', 'sequential'); // one token per step: many steps
  await closeSettings();
  await server.hold();
  let second;
  try {
    second = await sendMessage('My invoice shows the wrong amount.');
    const got = async () => (await pageFrames(second.id)).filter((f) => f.type === 'draft').length;
    await stepPage(async () => (await got()) >= 6 || (await pageFrames(second.id)).some((f) => f.type === 'done'));
    // (the engine is held: nothing more comes until the stop)
    const shown = async () => Number((await lastAssistant().locator('.stats').textContent()).match(/steps shown (\d+)/)?.[1]);
    const received = await got();
    assert.ok(await shown() < received, `the replay is behind (${await shown()} of ${received} steps shown)`);
    await shot('watch-replaying');
    await page.click('#stop');
    // the steps still queued are shown at once (a replay that went on would take minutes), then
    // the cancel's done
    await lastAssistant().and(page.locator('[data-state="cancelled"]')).waitFor({ timeout: 20000 });
    assert.equal(await shown(), received, 'every step received was shown');
  } finally {
    await server.release();
  }
  assert.equal(await page.locator('.fog').count(), 0);
  assert.equal(await page.locator('#stop').isVisible(), false);
  await setSettings({ watch: 'off' });
});

test('a sampled reply shows its seed; Regenerate asks again (another seed), replacing the last reply', async () => {
  await page.goto(home);
  await connected();
  await page.click('#new-chat');
  await setSettings({ temperature: 1.5, policy: 'threshold' });
  const first = await sendMessage('Tell me about zebras and pianos.');
  assert.equal(first.temperature, 1.5);
  assert.equal(first.seed, undefined, 'the page leaves the seed to the server');
  await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
  const done1 = (await replyFrames(first.id)).at(-1);
  assert.ok(Number.isSafeInteger(done1.seed), JSON.stringify(done1));
  const stats = () => lastAssistant().locator('.stats').textContent();
  assert.match(await stats(), new RegExp(`seed ${done1.seed}`));
  // only the last reply has the button
  const regen = page.locator('button.regen');
  assert.equal(await regen.count(), 1);
  const n = frames.sent.length;
  await regen.click();
  const again = await until(() => frames.sent.slice(n).find((f) => f.type === 'chat'), 5000, 'the regenerated chat');
  assert.deepEqual(again.messages, first.messages, 'the same conversation is asked again');
  await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
  const done2 = (await replyFrames(again.id)).at(-1);
  assert.notEqual(done2.seed, done1.seed, 'another sample');
  assert.match(await stats(), new RegExp(`seed ${done2.seed}`));
  assert.equal(await assistants().count(), 1, 'the reply was replaced, not added');
  const stored = await page.evaluate((x) => JSON.parse(localStorage.getItem(`fogline.chat.${x}`)), again.session);
  assert.equal(stored.messages.length, 2);
  assert.equal(stored.messages[1].seed, done2.seed);
  // a new question: the button moves to its reply; greedy replies report no seed
  await setSettings({ temperature: 0 });
  const third = await sendMessage('hello');
  await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
  assert.equal((await replyFrames(third.id)).at(-1).seed, undefined);
  assert.doesNotMatch(await stats(), /seed/);
  assert.equal(await regen.count(), 1);
  assert.equal(await assistants().last().locator('button.regen').count(), 1);
  await shot('desktop-light-regenerate');
});

test('deleting a chat deletes its session on a server that keeps sessions (Redis)', async () => {
  const r = await startRedis();
  const kept = await startServer([...SERVER_ARGS, '--redis', r.url]);
  try {
    await until(async () => (await metrics(kept)).get('fogline_redis_connected') === 1, 10000, 'connected');
    await page.goto(kept.url);
    await connected();
    await page.click('#new-chat');
    const sent = await sendMessage('Where is my order 48213?');
    await lastAssistant().and(page.locator('[data-state="done"]')).waitFor({ timeout: 20000 });
    const key = `fogline:session:${sent.session}`;
    await until(async () => (await cli(r.port, ['EXISTS', key])) === '1\n', 5000, 'the session stored');
    const before = await page.locator('#chat-list li').count();
    await page.locator('#chat-list li.current button.chat-del').click();
    await until(async () => (await page.locator('#chat-list li').count()) === before - 1, 5000, 'the chat gone from the list');
    await until(async () => (await cli(r.port, ['EXISTS', key])) === '0\n', 5000, 'the session deleted on the server');
  } finally {
    await page.goto(home);
    await connected();
    assert.equal(await kept.stop(), 0);
    r.proc.kill('SIGKILL');
  }
});

test('the page made no script errors; the server exits 0 on SIGTERM', async () => {
  assert.deepEqual(pageErrors, []);
  await ctx.close();
  assert.equal(await server.stop(), 0);
});
