// fogline chat: the browser side of docs/protocol.md (WebSocket /ws).
//
// State lives in localStorage so that a reload, or a dropped connection, resumes the same chat:
//   fogline.chats          [{id, title, updated}]  the chat list, newest first
//   fogline.chat.<id>      {id, title, messages: [{role, content, finish?, usage?, stats?, error?}]}
//   fogline.current        the open chat's id (also its protocol `session`)
//   fogline.settings       the settings panel: {parallel, max_tokens, api_key, watch, overrides},
//                          where overrides holds only the decoding fields the user changed
// "Watch it denoise" (settings.watch: 'off', or a pace 1, 5, 20, 100) asks the server for every
// denoising step's draft ("drafts": "every_step") and shows each one: at 1 as it arrives, slower
// paces replayed from the steps' server times stretched that many times (each step on screen for
// at least a frame).
// A reply is drawn from draft frames (masked positions resolve in place) and settles into
// Markdown when its blocks are committed; only commits become the stored reply.
import { renderMarkdown, escapeHtml } from './markdown.js';

const $ = (id) => document.getElementById(id);
const els = {
  app: $('app'), thread: $('thread'), messages: $('messages'), empty: $('empty'),
  input: $('composer-input'), composer: $('composer'), send: $('send'), stop: $('stop'),
  conn: $('conn'), connText: $('conn-text'), serverInfo: $('server-info'), title: $('chat-title'),
  banner: $('banner'), bannerText: $('banner-text'), bannerAction: $('banner-action'), bannerClose: $('banner-close'),
  chatList: $('chat-list'), newChat: $('new-chat'), announcer: $('announcer'),
  settings: $('settings'), settingsForm: $('settings-form'),
  openSidebar: $('open-sidebar'), closeSidebar: $('close-sidebar'), scrim: $('scrim'),
};

// ---------------------------------------------------------------- storage

const store = {
  get(key, fallback) {
    try { const v = localStorage.getItem(key); return v == null ? fallback : JSON.parse(v); } catch { return fallback; }
  },
  set(key, value) {
    try { localStorage.setItem(key, JSON.stringify(value)); } catch { /* full or disabled: keep going in memory */ }
  },
  del(key) { try { localStorage.removeItem(key); } catch { /* ignore */ } },
};

function randomId(prefix) {
  const b = new Uint8Array(9);
  crypto.getRandomValues(b); // works on plain http too, unlike randomUUID
  return prefix + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// The decoding and sampling fields of the settings panel. Their defaults are the server's (the
// model's own; `decoding` in the hello frame), and a chat carries only the ones the user changed:
// a value sent by the page would override the model's, and pipelining, say, changes the outputs
// of models not trained for it.
const DECODING = ['temperature', 'policy', 'threshold', 'pipeline'];
// Shown until a hello says the server's values (a server whose hello has none keeps them). An
// older page had these hard-coded and stored every field with any change in the panel, so a
// stored value equal to one of them is no choice of the user's and is dropped.
const OLD_DEFAULTS = { temperature: 0, policy: 'threshold', threshold: 0.9, pipeline: true };
const DEFAULTS = { parallel: 'off', max_tokens: 256, api_key: '', watch: 'off', format: 'text', schema: '', tools: '', tool_choice: 'auto' };
const FORMATS = ['text', 'json_object', 'json_schema'];
const TOOL_CHOICES = ['auto', 'required', 'none'];
const WATCH = ['off', '1', '5', '20', '100'];
const MIN_STEP_MS = 17; // a replayed step stays on screen at least this long (about one frame)
let serverDecoding = null; // the latest hello's `decoding`
let settings = loadSettings();
function loadSettings() {
  const stored = store.get('fogline.settings', {});
  const s = { ...DEFAULTS, ...stored, overrides: {} };
  const from = stored && typeof stored.overrides === 'object' && stored.overrides ? stored.overrides : {};
  for (const k of DECODING) {
    if (k in from && typeof from[k] === typeof OLD_DEFAULTS[k]) s.overrides[k] = from[k];
    if (!(k in s)) continue; // an older page's settings: every field, defaults included
    if (typeof s[k] === typeof OLD_DEFAULTS[k] && s[k] !== OLD_DEFAULTS[k]) s.overrides[k] = s[k];
    delete s[k];
  }
  if ('fanout' in s) { // an older page's checkbox
    if (s.fanout && s.parallel === 'off') s.parallel = 'fanout';
    delete s.fanout;
  }
  if (!['off', 'fanout', 'auto'].includes(s.parallel)) s.parallel = 'off';
  if (!WATCH.includes(s.watch)) s.watch = 'off';
  if (!FORMATS.includes(s.format)) s.format = 'text';
  if (!TOOL_CHOICES.includes(s.tool_choice)) s.tool_choice = 'auto';
  if (typeof s.schema !== 'string') s.schema = '';
  if (typeof s.tools !== 'string') s.tools = '';
  return s;
}
function decodingDefault(k) {
  return serverDecoding && k in serverDecoding ? serverDecoding[k] : OLD_DEFAULTS[k];
}
function decodingValue(k) {
  return k in settings.overrides ? settings.overrides[k] : decodingDefault(k);
}

let chat = null; // the open chat
function loadChat(id) {
  const c = store.get(`fogline.chat.${id}`, null);
  if (!c || !Array.isArray(c.messages)) return { id, title: '', messages: [] };
  for (const m of c.messages) { // a reply the page was closed on: say so instead of a blank
    if (m.role === 'assistant' && !m.finish && !m.error) {
      m.error = { code: 'interrupted', message: 'The page was closed before this reply finished.' };
    }
  }
  return c;
}
function saveChat() {
  if (!chat.messages.length) return; // an empty chat is not listed until it has a message
  store.set(`fogline.chat.${chat.id}`, chat);
  const list = store.get('fogline.chats', []).filter((x) => x.id !== chat.id);
  list.unshift({ id: chat.id, title: chat.title, updated: Date.now() });
  store.set('fogline.chats', list.slice(0, 100));
  renderChatList();
}
function openChat(id) {
  abandonActive();
  chat = loadChat(id);
  store.set('fogline.current', id);
  renderThread();
  renderChatList();
  closeSidebar();
}
function newChat() {
  openChat(randomId('s-'));
  els.input.focus();
}
// The server's copy of a chat (its session, kept in Redis when the server has one) goes with it,
// not only at its expiry; a server that keeps none (hello.sessions false) is not asked.
function forgetOnServer(id) {
  if (hello && !hello.sessions) return;
  const headers = settings.api_key ? { authorization: `Bearer ${settings.api_key}` } : {};
  fetch(`/sessions/${encodeURIComponent(id)}`, { method: 'DELETE', headers }).catch(() => {});
}
function deleteChat(id) {
  forgetOnServer(id);
  if (chat.id === id) abandonActive();
  store.del(`fogline.chat.${id}`);
  store.set('fogline.chats', store.get('fogline.chats', []).filter((x) => x.id !== id));
  if (chat.id === id) newChat(); else renderChatList();
}

// ---------------------------------------------------------------- connection

let ws = null;
let hello = null;
let retries = 0;
let retryTimer = null;
let everConnected = false;

function wsUrl() {
  return `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}/ws`;
}

function connect() {
  clearTimeout(retryTimer);
  retryTimer = null;
  setConn('connecting', everConnected ? 'reconnecting' : 'connecting');
  let sock;
  try { sock = new WebSocket(wsUrl()); } catch (e) { scheduleReconnect(); return; }
  ws = sock;
  sock.onmessage = (ev) => {
    let f;
    try { f = JSON.parse(ev.data); } catch { return; }
    onFrame(f);
  };
  sock.onclose = (ev) => {
    if (ws !== sock) return;
    ws = null;
    hello = null;
    const why = ev.reason ? `${ev.reason} (${ev.code})` : (ev.code === 1006 ? 'the connection dropped' : `closed (${ev.code})`);
    if (active) failReply({ code: 'disconnected', message: `Connection lost before the reply finished: ${why}.` });
    setConn('closed', 'offline');
    scheduleReconnect(why);
    updateComposer();
  };
}

// A fresh connection right away (a new API key): the old socket's close is ignored.
function reconnectNow() {
  const old = ws;
  ws = null;
  hello = null;
  if (active) failReply({ code: 'disconnected', message: 'The connection was renewed before the reply finished.' });
  try { old?.close(1000, 'reconnecting'); } catch { /* already closed */ }
  connect();
}

function scheduleReconnect(why) {
  const delay = Math.min(10000, 500 * 2 ** Math.min(retries, 5));
  retries++;
  const secs = Math.round(delay / 1000) || 1;
  showBanner(
    everConnected ? `Disconnected from the server (${why || 'cannot connect'}). Reconnecting in ${secs} s…`
                  : `Cannot reach the server at ${location.host}. Retrying in ${secs} s…`,
    { kind: 'error', action: 'Retry now', onAction: () => connect(), sticky: true });
  retryTimer = setTimeout(connect, delay);
}

function setConn(state, text) {
  els.conn.dataset.state = state;
  els.connText.textContent = text;
}

function onFrame(f) {
  switch (f.type) {
    case 'hello':
      hello = f;
      retries = 0;
      if (f.decoding && typeof f.decoding === 'object') serverDecoding = f.decoding;
      if (els.settings.open) fillDecoding();
      if (f.auth_required) {
        if (settings.api_key) ws.send(JSON.stringify({ type: 'auth', key: settings.api_key }));
        else showBanner('This server needs an API key: enter it in Settings.', { kind: 'error', action: 'Settings', onAction: openSettings, sticky: true });
      }
      if (!f.auth_required || settings.api_key) {
        if (everConnected) showBanner('Reconnected: the conversation continues in the same session.', { kind: 'info', timeout: 3000 });
        else hideBanner();
      }
      everConnected = true;
      if (f.auth_required && !settings.api_key) setConn('closed', 'API key needed');
      else setConn('open', f.model || 'connected');
      els.serverInfo.textContent = `${f.model} · ${f.server} · blocks of ${f.block_size}`;
      $('max-tokens-hint').textContent = `The server allows up to ${f.limits?.max_tokens ?? '?'}.`;
      updateComposer();
      return;
    case 'auth':
      if (f.ok) hideBanner();
      return;
    case 'draft': case 'commit': case 'segment_done': case 'outline': case 'done': case 'notice':
      if (active && f.id === active.id) replay(f);
      return;
    case 'error':
      if (active && f.id === active.id) { replay(f); return; }
      if (f.code === 'unknown_id') return; // a cancel that crossed the reply's done
      showBanner(`Server error: ${f.message || f.code}`, { kind: 'error' });
      return;
    default:
  }
}

// ---------------------------------------------------------------- a reply in flight

// A frame of the active reply: shown now, or, while a slowed replay is behind, after the frames
// before it. A draft's turn comes when the time since the last shown step, in the server's
// times (`ms`), stretched by the pace, has passed.
function replay(f) {
  const a = active;
  if (a.pace > 1 || a.queue.length) { a.queue.push(f); pump(); } else apply(f);
}

function pump() {
  const a = active;
  if (!a || a.replayTimer) return;
  while (active === a && a.queue.length) {
    const f = a.queue[0];
    if (f.type === 'draft' && a.pace > 1 && a.shownAt != null && f.ms != null) {
      const due = a.shownAt + Math.max(MIN_STEP_MS, (f.ms - a.shownMs) * a.pace);
      const now = performance.now();
      if (now < due) {
        a.replayTimer = setTimeout(() => { a.replayTimer = null; pump(); }, due - now);
        return;
      }
    }
    a.queue.shift();
    const step = f.type === 'draft' && a.pace > 1;
    if (f.type === 'draft' && f.ms != null) { a.shownAt = performance.now(); a.shownMs = f.ms; }
    apply(f);
    if (step && active === a && a.queue.length) { // one step per task: each is drawn on its own
      a.replayTimer = setTimeout(() => { a.replayTimer = null; pump(); }, 0);
      return;
    }
  }
}

function apply(f) {
  switch (f.type) {
    case 'draft': onDraft(f); return;
    case 'commit': onCommit(f); return;
    case 'segment_done': onSegmentDone(f); return;
    case 'outline': onOutline(f); return;
    case 'done': onDone(f); return;
    case 'notice': onNotice(f); return;
    case 'error':
      if (f.segment != null && active.segs) onSegmentDone(f); else failReply(f);
      return;
    default:
  }
}

// The server could not send every step (this page read too slowly): it coalesces from here on.
function onNotice(f) {
  if (f.code !== 'drafts_coalesced') return;
  active.coalesced = true;
  showBanner('Some denoising steps were skipped: the page could not keep up, so the server sends the newest draft of each block from here on.', { kind: 'info', timeout: 6000 });
}

// Stopping, or leaving, a replay: what is still queued is shown at once.
function flushReplay(a) {
  a.pace = 0;
  clearTimeout(a.replayTimer);
  a.replayTimer = null;
  pump();
}

let active = null; // {id, msg, el, blocks: Map(block -> {el, tokens}), committed, nextBlock, t0, tFirst, decided}

function buildRequest(history, segments, auto) {
  const o = settings.overrides; // the rest is the server's defaults
  const decoding = {};
  if ('policy' in o) decoding.policy = o.policy;
  if ('pipeline' in o) decoding.pipeline = o.pipeline;
  const policy = decodingValue('policy');
  if ('threshold' in o && (policy === 'threshold' || policy === 'dynamic')) decoding.threshold = o.threshold;
  const req = {
    type: 'chat',
    id: randomId('r-'),
    session: chat.id,
    messages: history.slice(-256),
    max_tokens: Math.round(Number(settings.max_tokens)) || DEFAULTS.max_tokens,
  };
  if ('temperature' in o) req.temperature = o.temperature;
  if (Object.keys(decoding).length) req.decoding = decoding;
  if (settings.watch !== 'off') req.drafts = 'every_step';
  // structured output (docs/structured.md): the settings' JSON, sent as the server takes it;
  // text the page cannot parse is sent as it is, for the server's error to say what is wrong
  if (settings.format === 'json_object') req.response_format = { type: 'json_object' };
  if (settings.format === 'json_schema') {
    req.response_format = { type: 'json_schema', json_schema: { name: 'reply', schema: parseOr(settings.schema) } };
  }
  if (settings.tools.trim()) {
    req.tools = parseOr(settings.tools);
    req.tool_choice = settings.tool_choice;
    delete req.session; // the server keeps no tool calls in a session: the page sends the history
  }
  if (segments) {
    // fan-out: the earlier turns are the shared context, each question a branch (no session:
    // branches have no single conversation to store)
    delete req.session;
    req.messages = history.slice(0, -1).slice(-255);
    req.parallel = { mode: 'fanout', segments };
  } else if (auto) {
    // the server asks the model for an outline of the last message and branches per point
    delete req.session;
    req.parallel = { mode: 'auto' };
  }
  return req;
}

function parseOr(text) {
  try { return JSON.parse(text); } catch { return text; }
}

// The independent questions of a message: one per line, or several sentences ending in "?".
// Fewer than two means a plain reply.
export function splitQuestions(text) {
  let parts = text.split(/\n+/).map((x) => x.trim()).filter(Boolean);
  if (parts.length < 2) parts = (text.match(/[^?]+\?/g) || []).map((x) => x.trim()).filter(Boolean);
  return parts.length >= 2 && parts.length <= 16 ? parts : null;
}

// The stored text of a fanned-out reply: each question and its answer, in order.
function joinSegments(a) {
  return a.segs.map((g) => `**${g.question}**\n\n${g.committed}`).join('\n\n');
}

function historyForServer() {
  return chat.messages
    .filter((m) => (m.role === 'user' || m.role === 'assistant') && m.content)
    .map((m) => ({ role: m.role, content: m.content }));
}

function send(text) {
  text = text.trim();
  if (!text || active) return;
  if (!ws || ws.readyState !== WebSocket.OPEN || !hello) {
    showBanner('Not connected: the message was not sent. It is still in the box.', { kind: 'error', timeout: 5000 });
    return;
  }
  if (!chat.messages.length) chat.title = text.replace(/\s+/g, ' ').slice(0, 60);
  for (const b of els.thread.querySelectorAll('.regen')) b.remove(); // no longer the last reply
  chat.messages.push({ role: 'user', content: text });
  const segments = settings.parallel === 'fanout' ? splitQuestions(text) : null;
  const req = buildRequest(historyForServer(), segments, settings.parallel === 'auto');
  const msg = { role: 'assistant', content: '' };
  chat.messages.push(msg);
  saveChat();
  els.input.value = '';
  autosize();
  els.title.textContent = chat.title;
  appendMessage(chat.messages[chat.messages.length - 2]);
  const el = appendMessage(msg, { streaming: true });
  active = {
    id: req.id, msg, el, blocks: new Map(), committed: '', nextBlock: 0,
    t0: performance.now(), tFirst: null, decided: 0, timer: null,
    // watch it denoise: pace 0 is off; frames wait in `queue` while a slowed replay shows them
    pace: settings.watch === 'off' ? 0 : Number(settings.watch), queue: [], replayTimer: null,
    shownAt: null, shownMs: null, steps: 0, step: null, coalesced: false, watching: settings.watch !== 'off',
  };
  el.classList.toggle('watching', active.watching);
  if (segments) addSegments(active, segments);
  el.dataset.state = 'streaming';
  el.setAttribute('aria-busy', 'true');
  active.timer = setInterval(renderLiveStats, 200);
  renderLiveStats();
  ws.send(JSON.stringify(req));
  updateComposer();
  scrollToEnd(true);
}

// One mini reply per question, all growing at once.
function addSegments(a, questions) {
  const host = document.createElement('div');
  host.className = 'segments';
  a.segs = questions.map((q, i) => {
    const d = document.createElement('section');
    d.className = 'segment';
    d.dataset.segment = i;
    d.dataset.state = 'streaming';
    d.innerHTML = '<h4 class="q"></h4><div class="md"></div>';
    d.querySelector('.q').textContent = q;
    const live = document.createElement('span');
    live.className = 'live';
    live.setAttribute('aria-hidden', 'true');
    d._live = live;
    host.append(d);
    const g = { el: d, question: q, blocks: new Map(), committed: '', nextBlock: 0 };
    renderReply(d, '', { streaming: true });
    return g;
  });
  a.el.querySelector('.reply').append(host);
}

// The model's outline (parallel auto): two or more points become segments; none means the
// reply comes as one plain answer.
function onOutline(f) {
  if (f.points?.length >= 2 && !active.segs) addSegments(active, f.points);
}

// Where a frame goes: the reply, or one segment of a fanned-out reply.
function target(f) {
  return active.segs && f.segment != null ? active.segs[f.segment] : active;
}

function onDraft(f) {
  const a = active;
  const t = target(f);
  if (!t || f.block < t.nextBlock) return; // already committed
  if (a.tFirst == null) a.tFirst = performance.now();
  let b = t.blocks.get(f.block);
  const live = t === a ? a.el.querySelector('.live') : t.el._live;
  if (!b || b.el.childNodes.length !== f.tokens.length) {
    const span = b ? b.el : document.createElement('span');
    span.className = 'blk';
    span.dataset.block = f.block;
    span.replaceChildren(...f.tokens.map(() => document.createElement('span')));
    if (!b) {
      b = { el: span, decided: 0 };
      t.blocks.set(f.block, b);
      // blocks in order: pipelining can draft block b+1 before b's first draft arrives
      const after = [...live.children].find((c) => Number(c.dataset.block) > f.block);
      live.insertBefore(span, after || null);
    }
  }
  const fresh = new Set(f.new || []);
  const edited = new Set(f.edited || []); // token editing: a shown token was rewritten
  a.steps++;
  a.step = { block: f.block, step: f.step, segment: f.segment, new: fresh.size, edited: edited.size };
  let decided = 0;
  f.tokens.forEach((tok, i) => {
    const s = b.el.childNodes[i];
    if (tok.mask) {
      if (s.className !== 'fog') { s.className = 'fog'; s.textContent = ''; s.removeAttribute('data-t'); }
    } else {
      decided++;
      const t = tok.t ?? '';
      if (edited.has(i)) {
        // it flickers back into focus as a new token does; a fresh span restarts the animation
        // even when the last one had not ended (or the text reads the same)
        const n = document.createElement('span');
        n.dataset.t = t;
        n.textContent = t;
        n.className = 'tok drafting new edited';
        s.replaceWith(n);
      } else if (s.dataset.t !== t || s.className === 'fog') {
        s.dataset.t = t;
        s.textContent = t;
        s.className = fresh.has(i) ? 'tok drafting new' : 'tok drafting';
      } else if (a.watching && s.className !== 'tok drafting') {
        s.className = 'tok drafting'; // watching: only this step's positions stay marked
      }
    }
  });
  a.decided += decided - b.decided;
  b.decided = decided;
  holdHeight(a);
  renderLiveStats();
  scrollToEnd();
}

function onCommit(f) {
  const a = active;
  const t = target(f);
  if (!t) return;
  if (a.tFirst == null) a.tFirst = performance.now();
  t.committed += f.text;
  if (f.reasoning != null) { // a model with think blocks: the server splits the reply
    t.reasoning = (t.reasoning || '') + f.reasoning;
    t.answer = (t.answer || '') + (f.content || '');
  }
  t.nextBlock = Math.max(t.nextBlock, f.block + 1);
  const b = t.blocks.get(f.block);
  if (b) { a.decided -= b.decided; b.el.remove(); t.blocks.delete(f.block); }
  if (t !== a) a.committed = joinSegments(a);
  a.msg.content = a.committed;
  keepSplit(a);
  a.committedTokens = (a.committedTokens || 0) + (b ? b.el.childNodes.length : 0);
  renderReply(t.el, shown(t), { streaming: true, reasoning: t.reasoning });
  holdHeight(a);
  renderLiveStats();
  scrollToEnd();
}

// One branch of a fanned-out reply ended (segment_done, or an error frame for that segment).
function onSegmentDone(f) {
  const g = active.segs?.[f.segment];
  if (!g) return;
  for (const b of g.blocks.values()) { active.decided -= b.decided; b.el.remove(); }
  g.blocks.clear();
  if (f.type === 'error') g.committed += g.committed ? `\n\n_(${f.message || f.code})_` : `_(${f.message || f.code})_`;
  renderReply(g.el, shown(g), { streaming: false, reasoning: g.reasoning });
  g.el.dataset.state = f.type === 'error' ? 'error' : 'done';
  active.committed = joinSegments(active);
  active.msg.content = active.committed;
}

function onDone(f) {
  const a = active;
  if (a.segs) a.committed = joinSegments(a);
  finishActive();
  a.msg.content = a.committed;
  // what the split held back at the end (a think tag cut off by the reply's end)
  if (f.reasoning_tail) a.reasoning = (a.reasoning || '') + f.reasoning_tail;
  if (f.content_tail) a.answer = (a.answer || '') + f.content_tail;
  keepSplit(a);
  a.msg.finish = f.finish;
  if (Array.isArray(f.tool_calls) && f.tool_calls.length) a.msg.tool_calls = f.tool_calls;
  a.msg.usage = f.usage;
  a.msg.stats = f.stats;
  if (f.seed != null) a.msg.seed = f.seed; // a sampled reply's seed (the server drew it)
  a.msg.client = { ms_first: a.tFirst == null ? null : a.tFirst - a.t0, ms_total: performance.now() - a.t0,
                   ...(a.watching ? { steps: a.steps } : {}) };
  saveChat();
  // a fanned-out reply keeps its segments in place (reloaded, it shows as joined Markdown)
  renderReply(a.el, a.segs ? '' : shown(a, a.msg), { streaming: false, reasoning: a.segs ? null : a.reasoning });
  renderToolCalls(a.el, a.msg);
  if (a.segs) for (const g of a.segs) if (g.el.dataset.state === 'streaming') { renderReply(g.el, shown(g), { streaming: false, reasoning: g.reasoning }); g.el.dataset.state = 'done'; }
  a.el.dataset.state = f.finish === 'cancelled' ? 'cancelled' : 'done';
  renderStats(a.el, a.msg);
  announce(f.finish === 'cancelled' ? 'Reply stopped.' : 'Reply finished.');
  scrollToEnd();
}

function failReply(err) {
  const a = active;
  finishActive();
  a.msg.content = a.committed;
  a.msg.error = { code: err.code || 'error', message: err.message || 'The request failed.' };
  saveChat();
  renderReply(a.el, shown(a), { streaming: false, reasoning: a.reasoning });
  a.el.dataset.state = 'error';
  renderStats(a.el, a.msg);
  renderError(a.el, a.msg);
  announce(`Error: ${a.msg.error.message}`);
  scrollToEnd();
}

// The reply as shown: the answer when the server split reasoning off, else the committed text
// (which, with think tags, is also what goes back to the server as history); without the
// <tool_call> blocks the server found calls in (they show as cards).
function shown(t, m) {
  const text = t.answer ?? t.committed ?? t.content ?? '';
  return m?.tool_calls?.length ? text.replace(/<tool_call>[\s\S]*?<\/tool_call>/g, '').trim() : text;
}

// A reply's tool calls as cards under it: the function's name and its arguments, indented.
function renderToolCalls(li, m) {
  li.querySelector(':scope .tool-calls')?.remove();
  if (!m.tool_calls?.length) return;
  const box = document.createElement('div');
  box.className = 'tool-calls';
  for (const c of m.tool_calls) {
    const card = document.createElement('div');
    card.className = 'tool-card';
    let args = c.function?.arguments ?? '';
    try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* as the model wrote it */ }
    card.innerHTML = '<div class="tool-head"><span class="tool-icon" aria-hidden="true">ƒ</span>'
      + `<span class="tool-name">${escapeHtml(c.function?.name ?? '')}</span><span class="tool-id">${escapeHtml(c.id ?? '')}</span></div>`
      + `<pre class="tool-args"><code>${escapeHtml(args)}</code></pre>`;
    card.setAttribute('aria-label', `Tool call: ${c.function?.name ?? ''}`);
    box.append(card);
  }
  li.querySelector('.reply').after(box);
}

// The split is stored with the message, so a reloaded chat shows it the same way.
function keepSplit(a) {
  if (a.reasoning == null && a.answer == null) return;
  a.msg.reasoning = a.reasoning || '';
  a.msg.answer = a.answer || '';
}

// Reasoning goes in a collapsed <details> above the answer (plain text: it is the model's
// scratch work, not meant to be formatted); the reader opens it, and it stays open while more
// streams in.
function renderReasoning(md, reasoning) {
  let d = md.parentElement.querySelector(':scope > details.reasoning');
  if (!reasoning) { d?.remove(); return; }
  if (!d) {
    d = document.createElement('details');
    d.className = 'reasoning';
    d.innerHTML = '<summary>Reasoning</summary><div class="think"></div>';
    md.before(d);
  }
  d.querySelector('.think').textContent = reasoning;
}

// While a reply streams it never gets shorter (a masked position that resolves to an end token
// takes no room, a line of fog can unwrap): its height only grows, and settles smoothly when the
// reply is over.
function holdHeight(a) {
  const reply = a.el.querySelector('.reply');
  const h = reply.getBoundingClientRect().height;
  if (h > (a.maxHeight || 0)) {
    a.maxHeight = h;
    reply.style.minHeight = `${h}px`;
  }
}

function finishActive() {
  const reply = active.el.querySelector('.reply');
  reply.classList.add('settling');
  reply.style.minHeight = '';
  clearInterval(active.timer);
  active.el.removeAttribute('aria-busy');
  active = null;
  updateComposer();
}

// Leaving a chat while its reply streams: cancel it, keep what was committed, and ignore the
// rest of its frames.
function abandonActive() {
  if (!active) return;
  const a = active;
  a.queue = [];
  clearTimeout(a.replayTimer);
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'cancel', id: a.id }));
  finishActive();
  a.msg.content = a.committed;
  a.msg.finish = 'cancelled';
  saveChat(); // still the chat the reply belongs to
}

function stopReply() {
  if (!active) return;
  const a = active;
  if (a.queue.length) { // a replay behind the server: its steps are shown at once
    flushReplay(a);
    if (active !== a) return; // the reply's end was already here
  }
  a.pace = 0;
  if (ws && ws.readyState === WebSocket.OPEN) {
    ws.send(JSON.stringify({ type: 'cancel', id: active.id }));
    active.el.dataset.stopping = '1';
    renderLiveStats();
  } else {
    failReply({ code: 'disconnected', message: 'Stopped while disconnected.' });
  }
}

// ---------------------------------------------------------------- rendering

function appendMessage(m, { streaming = false } = {}) {
  els.empty.hidden = true;
  const li = document.createElement('li');
  li.className = 'msg';
  li.dataset.role = m.role;
  if (m.role === 'user') {
    const bubble = document.createElement('div');
    bubble.className = 'bubble';
    bubble.textContent = m.content;
    li.append(bubble);
  } else {
    li.innerHTML = '<div class="avatar" aria-hidden="true"><img src="favicon.svg" alt=""></div>'
      + '<div class="assistant-body"><div class="reply"><div class="md"></div></div><div class="stats" aria-live="off"></div></div>';
    li.querySelector('.reply').setAttribute('aria-label', 'fogline');
    const live = document.createElement('span');
    live.className = 'live';
    live.setAttribute('aria-hidden', 'true');
    li._live = live;
    renderReply(li, shown(m, m), { streaming, reasoning: m.reasoning });
    if (!streaming) {
      renderToolCalls(li, m);
      li.dataset.state = m.error ? 'error' : (m.finish === 'cancelled' ? 'cancelled' : 'done');
      renderStats(li, m);
      if (m.error) renderError(li, m);
    }
  }
  els.thread.append(li);
  return li;
}

// Committed text as Markdown, with the blocks still in the fog (the .live span) placed where the
// text continues: inside the last paragraph or list item, so that nothing jumps when a block
// settles.
function renderReply(li, text, { streaming, reasoning }) {
  const md = li.querySelector('.md');
  const live = li._live;
  renderReasoning(md, reasoning);
  md.innerHTML = renderMarkdown(text);
  if (!streaming) { live.remove(); return; }
  let host = md;
  if (!/\n\s*$/.test(text)) {
    let last = md.lastElementChild;
    while (last && /^(UL|OL|BLOCKQUOTE)$/.test(last.tagName) && last.lastElementChild) last = last.lastElementChild;
    if (last && /^(P|LI|H[1-6]|CODE|PRE)$/.test(last.tagName)) host = last.tagName === 'PRE' ? (last.querySelector('code') || last) : last;
  }
  if (host === md) {
    let p = md.querySelector(':scope > p.tail');
    if (!p) { p = document.createElement('p'); p.className = 'tail'; md.append(p); }
    host = p;
  }
  host.append(live);
}

function fmt(n, digits = 0) {
  return Number(n).toLocaleString(undefined, { maximumFractionDigits: digits, minimumFractionDigits: digits });
}
function ms(v) {
  if (v == null || !isFinite(v)) return '–';
  return v < 1000 ? `${fmt(v, v < 10 ? 1 : 0)} ms` : `${fmt(v / 1000, 2)} s`;
}
function pill(label, value, title) {
  return `<span class="pill"${title ? ` title="${escapeHtml(title)}"` : ''}>${escapeHtml(label)} <b>${escapeHtml(value)}</b></span>`;
}

function renderLiveStats() {
  const a = active;
  if (!a) return;
  const el = a.el.querySelector('.stats');
  const elapsed = performance.now() - a.t0;
  const tokens = (a.committedTokens || 0) + a.decided;
  const masked = a.el.querySelectorAll('.live .fog').length;
  const state = a.el.dataset.stopping ? 'stopping…' : (a.tFirst == null ? 'waiting for the first draft…' : 'denoising…');
  const st = a.step;
  const watch = a.watching
    ? pill('showing', st ? `${st.segment != null ? `§${st.segment + 1} ` : ''}block ${st.block + 1} · step ${st.step}` : '–', 'the denoising step on screen')
      + pill('steps shown', fmt(a.steps)) + (a.queue.length ? pill('replay', `×${a.pace}`, `${a.queue.length} frames still to show`) : '')
    : '';
  el.innerHTML = `<span class="pill state-streaming" data-stat="state">${state}</span>`
    + watch + pill('tokens', fmt(tokens)) + pill('masked', fmt(masked))
    + (a.tFirst != null ? pill('first draft', ms(a.tFirst - a.t0)) : '')
    + pill('elapsed', ms(elapsed));
}

function renderStats(li, m) {
  const el = li.querySelector('.stats');
  if (!m.stats && !m.usage) { el.innerHTML = m.error ? '' : '<span class="pill">no stats</span>'; return; }
  const s = m.stats || {};
  const n = m.usage?.completion_tokens ?? 0;
  const secs = (s.ms_total ?? m.client?.ms_total ?? 0) / 1000;
  const parts = [];
  if (m.finish === 'cancelled') parts.push('<span class="pill state-cancelled" data-stat="finish">stopped</span>');
  else if (m.finish === 'length') parts.push('<span class="pill" data-stat="finish" title="max tokens reached">cut at max tokens</span>');
  parts.push(pill('tokens', fmt(n), `prompt ${m.usage?.prompt_tokens ?? '?'}, reply ${n}`));
  if (s.tpf != null) parts.push(pill('TPF', fmt(s.tpf, 2), `tokens per forward pass: ${s.forwards} forwards (${s.decode_forwards} denoising), ${s.blocks} blocks`));
  if (secs > 0) parts.push(pill('tok/s', fmt(n / secs, 0), `${n} tokens in ${ms(s.ms_total)} (prefill ${ms(s.ms_prefill)}, decode ${ms(s.ms_decode)})`));
  parts.push(pill('first draft', ms(s.ms_first_update ?? m.client?.ms_first), `measured by the server; in this browser ${ms(m.client?.ms_first)}`));
  if (m.client?.steps != null) parts.push(pill('steps shown', fmt(m.client.steps), 'watch it denoise: the denoising steps this page showed'));
  if (m.seed != null) parts.push(pill('seed', String(m.seed), 'the sampler\'s seed (temperature above 0): a chat with this seed and the same settings gives this reply again'));
  el.innerHTML = parts.join('');
  // the last reply can be asked for again: another sample when sampling, or the same
  // question under settings changed since
  if (!m.error && chat.messages[chat.messages.length - 1] === m) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'regen';
    b.textContent = 'Regenerate';
    b.title = 'Ask again with the current settings (another sample when the temperature is above 0)';
    b.addEventListener('click', retryLast);
    el.append(b);
  }
}

function renderError(li, m) {
  li.querySelector('.msg-error')?.remove();
  const div = document.createElement('div');
  div.className = 'msg-error';
  div.setAttribute('role', 'alert');
  const head = { disconnected: 'Disconnected', interrupted: 'Interrupted' }[m.error.code];
  div.innerHTML = `<strong>${head || 'Error'}:</strong> ${escapeHtml(m.error.message)}`
    + (head ? '' : ` <code>${escapeHtml(m.error.code)}</code>`);
  const last = chat.messages[chat.messages.length - 1] === m;
  if (last) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'retry';
    b.textContent = 'Retry';
    b.addEventListener('click', retryLast);
    div.append(b);
  }
  li.querySelector('.assistant-body').append(div);
}

function retryLast() {
  if (active) return;
  const msgs = chat.messages;
  if (msgs.length < 2 || msgs[msgs.length - 1].role !== 'assistant') return;
  msgs.pop();
  const u = msgs.pop();
  renderThread();
  send(u.content);
}

function renderThread() {
  els.thread.replaceChildren();
  els.empty.hidden = chat.messages.length > 0;
  for (const m of chat.messages) appendMessage(m);
  els.title.textContent = chat.title || 'New chat';
  document.title = chat.title ? `${chat.title} · fogline` : 'fogline';
  scrollToEnd(true);
}

function renderChatList() {
  const list = store.get('fogline.chats', []);
  els.chatList.replaceChildren(...list.map((c) => {
    const li = document.createElement('li');
    if (chat && c.id === chat.id) li.className = 'current';
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'chat-open';
    open.textContent = c.title || 'Untitled chat';
    if (chat && c.id === chat.id) open.setAttribute('aria-current', 'page');
    open.addEventListener('click', () => openChat(c.id));
    const del = document.createElement('button');
    del.type = 'button';
    del.className = 'chat-del';
    del.setAttribute('aria-label', `Delete the chat “${c.title || 'Untitled chat'}”`);
    del.innerHTML = '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M6 6l12 12M18 6L6 18"/></svg>';
    del.addEventListener('click', () => deleteChat(c.id));
    li.append(open, del);
    return li;
  }));
}

let stick = true;
els.messages.addEventListener('scroll', () => {
  const m = els.messages;
  stick = m.scrollHeight - m.scrollTop - m.clientHeight < 80;
});
function scrollToEnd(force = false) {
  if (!force && !stick) return;
  els.messages.scrollTop = els.messages.scrollHeight;
}

let bannerTimer = null;
function showBanner(text, { kind = 'error', action, onAction, timeout, sticky } = {}) {
  clearTimeout(bannerTimer);
  els.banner.hidden = false;
  els.banner.dataset.kind = kind;
  els.banner.dataset.sticky = sticky ? '1' : '';
  els.bannerText.textContent = text;
  els.bannerAction.hidden = !action;
  els.bannerAction.textContent = action || '';
  els.bannerAction.onclick = onAction || null;
  if (timeout) bannerTimer = setTimeout(hideBanner, timeout);
}
function hideBanner() { els.banner.hidden = true; }
els.bannerClose.addEventListener('click', hideBanner);

function announce(text) { els.announcer.textContent = text; }

function updateComposer() {
  const connected = !!(ws && ws.readyState === WebSocket.OPEN && hello && !(hello.auth_required && !settings.api_key));
  els.send.hidden = !!active;
  els.stop.hidden = !active;
  els.send.disabled = !connected || !els.input.value.trim();
  els.send.title = connected ? 'Send (Enter)' : 'Not connected';
}

function autosize() {
  els.input.style.height = 'auto';
  els.input.style.height = `${Math.min(els.input.scrollHeight, window.innerHeight * 0.4)}px`;
  updateComposer();
}

// ---------------------------------------------------------------- settings

const form = els.settingsForm;
function fillSettings() {
  fillDecoding();
  form.parallel.value = settings.parallel;
  form.max_tokens.value = settings.max_tokens;
  form.api_key.value = settings.api_key || '';
  form.watch.value = settings.watch;
  form.format.value = settings.format;
  form.schema.value = settings.schema;
  form.tools.value = settings.tools;
  form.tool_choice.value = settings.tool_choice;
  syncStructured();
}
// The schema box only with "JSON matching a schema"; text that is not JSON is flagged at once.
function syncStructured() {
  form.schema.hidden = settings.format !== 'json_schema';
  const bad = (t) => t.trim() && typeof parseOr(t) === 'string';
  form.schema.setAttribute('aria-invalid', String(settings.format === 'json_schema' && bad(settings.schema)));
  form.tools.setAttribute('aria-invalid', String(bad(settings.tools)));
  $('schema-note').textContent = form.schema.getAttribute('aria-invalid') === 'true'
    ? 'This schema is not JSON yet.'
    : 'The reply is decoded under the format: always valid JSON, for a schema always a value of it (OpenAI\'s strict subset).';
  $('tools-note').textContent = form.tools.getAttribute('aria-invalid') === 'true'
    ? 'These tools are not JSON yet.' : 'Calls show as cards under the reply.';
}
function fillDecoding() {
  form.temperature.value = decodingValue('temperature');
  form.policy.value = decodingValue('policy');
  form.threshold.value = decodingValue('threshold');
  form.pipeline.checked = !!decodingValue('pipeline');
  syncSettingsView();
}
function syncSettingsView() {
  // the values, not the sliders' positions: a server default between two steps shows as it is
  $('out-temperature').textContent = Number(decodingValue('temperature')).toFixed(2);
  $('out-threshold').textContent = Number(decodingValue('threshold')).toFixed(2);
  const policy = decodingValue('policy');
  const usesThreshold = policy === 'threshold' || policy === 'dynamic';
  form.threshold.disabled = !usesThreshold;
  const f = form.threshold.closest('.field');
  if (usesThreshold) f.removeAttribute('data-disabled'); else f.dataset.disabled = '';
  const changed = DECODING.filter((k) => k in settings.overrides).map((k) => (k === 'pipeline' ? 'pipelining' : k));
  $('decoding-defaults').textContent = !serverDecoding
    ? 'Until the server answers these are the usual defaults; a message carries only what you change.'
    : changed.length ? `Changed from the server's defaults for ${hello?.model ?? 'its model'}: ${changed.join(', ')}. “Reset to defaults” goes back to them.`
      : `The server's defaults for ${hello?.model ?? 'its model'}.`;
}
function sameValue(a, b) {
  return typeof a === 'number' && typeof b === 'number' ? Math.abs(a - b) < 1e-9 : a === b;
}
// Only the control the user touched becomes an override (or stops being one when it is back at
// the server's default): the other decoding fields keep following the server. Before any hello
// the server's defaults are unknown, so every change counts.
function readSettings(e) {
  const k = e?.target?.name;
  if (DECODING.includes(k)) {
    const v = k === 'pipeline' ? form.pipeline.checked : k === 'policy' ? form.policy.value : Number(form[k].value);
    if (serverDecoding && sameValue(v, decodingDefault(k))) delete settings.overrides[k];
    else settings.overrides[k] = v;
  }
  settings.parallel = form.parallel.value;
  settings.watch = WATCH.includes(form.watch.value) ? form.watch.value : 'off';
  settings.format = FORMATS.includes(form.format.value) ? form.format.value : 'text';
  settings.schema = form.schema.value;
  settings.tools = form.tools.value;
  settings.tool_choice = TOOL_CHOICES.includes(form.tool_choice.value) ? form.tool_choice.value : 'auto';
  syncStructured();
  settings.max_tokens = Math.max(1, Math.round(Number(form.max_tokens.value) || DEFAULTS.max_tokens));
  settings.api_key = form.api_key.value;
  store.set('fogline.settings', settings);
  syncSettingsView();
}
let keyAtOpen = '';
function openSettings() {
  fillSettings();
  keyAtOpen = settings.api_key;
  els.settings.showModal();
}
form.addEventListener('input', readSettings);
form.addEventListener('change', readSettings);
$('settings-reset').addEventListener('click', () => {
  settings = { ...DEFAULTS, overrides: {}, api_key: settings.api_key };
  store.set('fogline.settings', settings);
  fillSettings();
});
$('open-settings').addEventListener('click', openSettings);
// Nothing is stored here: every control stored its own change (input, change above). The close
// event is queued (headless Chromium fired it up to ~0.4 s after the dialog closed), and the
// page's copy of the settings written then would go over whatever was stored in between
// (another tab's change), even when the panel was closed without a change.
els.settings.addEventListener('close', () => {
  if (settings.api_key !== keyAtOpen && !active) reconnectNow(); // show the new key
  els.input.focus();
});

// ---------------------------------------------------------------- sidebar (phone)

function openSidebar() {
  els.app.classList.add('sidebar-open');
  els.scrim.hidden = false;
  els.openSidebar.setAttribute('aria-expanded', 'true');
  els.newChat.focus();
}
function closeSidebar() {
  if (!els.app.classList.contains('sidebar-open')) return;
  els.app.classList.remove('sidebar-open');
  els.scrim.hidden = true;
  els.openSidebar.setAttribute('aria-expanded', 'false');
}
els.openSidebar.addEventListener('click', openSidebar);
els.closeSidebar.addEventListener('click', () => { closeSidebar(); els.openSidebar.focus(); });
els.scrim.addEventListener('click', closeSidebar);

// ---------------------------------------------------------------- composer and keys

els.composer.addEventListener('submit', (e) => { e.preventDefault(); send(els.input.value); });
els.input.addEventListener('input', autosize);
els.input.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send(els.input.value);
  }
});
document.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape') return;
  if (els.settings.open) return; // the dialog closes itself
  if (els.app.classList.contains('sidebar-open')) { closeSidebar(); els.openSidebar.focus(); return; }
  if (active) { e.preventDefault(); stopReply(); }
});
els.stop.addEventListener('click', () => { stopReply(); els.input.focus(); });
els.newChat.addEventListener('click', newChat);
for (const b of document.querySelectorAll('.suggestion')) {
  b.addEventListener('click', () => { els.input.value = b.textContent; autosize(); send(b.textContent); });
}
window.addEventListener('storage', (e) => { if (e.key === 'fogline.chats') renderChatList(); });

// ---------------------------------------------------------------- start

fillSettings();
openChat(store.get('fogline.current', null) || randomId('s-'));
updateComposer();
connect();
els.input.focus();
