// The station's dashboard: logs in (a password traded at /v1/login for a
// token, or a token pasted), then reads /v1/events with fetch (so the token
// goes in the Authorization header; EventSource cannot send one) and draws
// each "overview". Nothing is built with innerHTML: every value goes in as
// text. Every number carries data-field (and data-value with the raw
// number) so tests can read it.
'use strict';

(function () {
  const TOKEN_KEY = 'corral.token';
  const HISTORY_SECONDS = 300; // charts cover the last 5 minutes
  const MAX_FRAME = 16 << 20; // a stream that sends more without a frame end is broken

  const $ = (id) => document.getElementById(id);
  const state = {
    token: sessionStorage.getItem(TOKEN_KEY) || '',
    abort: null,
    retry: 0,
    last: null,
    updates: 0,
    history: new Map(), // service -> [{t, cps, bps}]
    events: [],
  };
  window.corralDash = state; // for tests and curious operators

  // ---- formatting ----
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const k of kids) {
      if (k === undefined || k === null) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }
  function svgEl(tag, attrs) {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }
  function bytes(n) {
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let i = 0;
    n = Number(n) || 0;
    while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + ' ' + u[i];
  }
  const rate = (x) => (Number(x) || 0).toFixed(1) + '/s';
  const bps = (x) => bytes(x) + '/s';
  const num = (field, value, text) => el('td', { class: 'num', 'data-field': field, 'data-value': value }, text === undefined ? value : text);
  const yesNo = (field, b, yes, no) => el('td', { 'data-field': field, 'data-value': b ? 'true' : 'false', class: b ? 'ok' : 'bad' }, b ? (yes || 'yes') : (no || 'no'));
  function ago(t) {
    const d = new Date(t);
    return isNaN(d) ? '' : d.toLocaleTimeString();
  }

  // ---- login ----
  function showLogin(msg) {
    if (state.abort) state.abort.abort();
    $('login').hidden = false;
    $('main').hidden = true;
    $('logout').hidden = true;
    $('login-error').textContent = msg || '';
    setConn(false, 'not logged in');
  }
  async function login(ev) {
    ev.preventDefault();
    const user = $('login-user').value.trim();
    const password = $('login-password').value;
    let token = $('login-token').value.trim();
    $('login-error').textContent = '';
    if (!token) {
      if (!user) { $('login-error').textContent = 'give a user and password, or an API token'; return; }
      try {
        const res = await fetch('/v1/login', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ user, password }) });
        const body = await res.json().catch(() => ({}));
        if (!res.ok) { $('login-error').textContent = 'login refused: ' + (body.error || res.status + ' ' + res.statusText); return; }
        token = body.token;
      } catch (e) {
        $('login-error').textContent = 'login failed: ' + e;
        return;
      }
    }
    $('login-password').value = '';
    $('login-token').value = '';
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    start();
  }
  function logout() {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = '';
    showLogin('');
  }

  // ---- the event stream ----
  function setConn(on, why) {
    const c = $('conn-state');
    c.className = 'conn ' + (on ? 'on' : 'off');
    c.textContent = on ? 'live' : why || 'not connected';
  }
  function start() {
    $('login').hidden = true;
    $('main').hidden = false;
    $('logout').hidden = false;
    stream();
  }
  function retryLater(why) {
    setConn(false, why);
    state.retry = Math.min(state.retry + 1, 5);
    setTimeout(() => { if (state.token) stream(); }, 1000 * state.retry);
  }
  async function stream() {
    if (state.abort) state.abort.abort();
    const ctl = new AbortController();
    state.abort = ctl;
    let res;
    try {
      res = await fetch('/v1/events', { headers: { Authorization: 'Bearer ' + state.token }, signal: ctl.signal, cache: 'no-store' });
    } catch (e) {
      if (!ctl.signal.aborted) retryLater('station unreachable');
      return;
    }
    if (res.status === 401 || res.status === 403) {
      const body = await res.json().catch(() => ({}));
      sessionStorage.removeItem(TOKEN_KEY);
      state.token = '';
      showLogin('token refused: ' + (body.error || res.status));
      return;
    }
    if (!res.ok || !res.body) { retryLater('HTTP ' + res.status); return; }
    state.retry = 0;
    setConn(true);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          frame(buf.slice(0, i));
          buf = buf.slice(i + 2);
        }
        if (buf.length > MAX_FRAME) break;
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    if (state.abort === ctl && !ctl.signal.aborted) retryLater('stream ended');
  }
  function frame(text) {
    let name = 'message';
    const data = [];
    for (const line of text.split('\n')) {
      if (line.startsWith(':')) continue; // heartbeat
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let v = c < 0 ? '' : line.slice(c + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'event') name = v;
      else if (field === 'data') data.push(v);
    }
    if (!data.length) return;
    let obj;
    try { obj = JSON.parse(data.join('\n')); } catch (e) { return; }
    if (name === 'overview') render(obj);
    else if (name === 'event') addEvent(obj);
  }
  async function refresh() {
    try {
      const res = await fetch('/v1/status', { headers: { Authorization: 'Bearer ' + state.token }, cache: 'no-store' });
      if (res.ok) render(await res.json());
    } catch (e) { /* the stream brings the next one */ }
  }

  // ---- actions ----
  async function drain(node, on) {
    $('action-error').textContent = '';
    try {
      const res = await fetch('/v1/drain', {
        method: 'POST',
        headers: { Authorization: 'Bearer ' + state.token, 'Content-Type': 'application/json' },
        body: JSON.stringify({ node, drain: on }),
      });
      if (!res.ok) {
        const body = await res.json().catch(() => ({}));
        $('action-error').textContent = (on ? 'drain ' : 'undrain ') + node + ': ' + (body.error || res.status + ' ' + res.statusText);
        return;
      }
    } catch (e) {
      $('action-error').textContent = 'drain ' + node + ': ' + e;
      return;
    }
    refresh();
  }

  // ---- drawing ----
  // The page is redrawn every second: the new tree is merged into the one
  // shown (same shape: attributes and text updated in place), so a button
  // under the pointer stays the same element and a click is not lost to a
  // redraw between press and release.
  function morph(cur, next) {
    if (cur.nodeType !== next.nodeType || cur.nodeName !== next.nodeName) { cur.replaceWith(next); return; }
    if (cur.nodeType !== Node.ELEMENT_NODE) { if (cur.nodeValue !== next.nodeValue) cur.nodeValue = next.nodeValue; return; }
    for (const a of [...cur.attributes]) if (!next.hasAttribute(a.name)) cur.removeAttribute(a.name);
    for (const a of [...next.attributes]) {
      if (a.name === 'style') { if (cur.style.cssText !== next.style.cssText) cur.style.cssText = next.style.cssText; } // CSSOM: allowed by the CSP
      else if (cur.getAttribute(a.name) !== a.value) cur.setAttribute(a.name, a.value);
    }
    morphChildren(cur, [...next.childNodes]);
  }
  function morphChildren(parent, kids) {
    const cur = [...parent.childNodes];
    kids.forEach((k, i) => (i < cur.length ? morph(cur[i], k) : parent.appendChild(k)));
    for (let i = kids.length; i < cur.length; i++) cur[i].remove();
  }

  function render(o) {
    state.last = o;
    state.updates++;
    $('cfg-version').textContent = o.version;
    $('ha-state').textContent = o.ha || '';
    $('stations').textContent = (o.stations || []).join(', ');
    $('updated').textContent = ago(o.time);
    $('errors').textContent = (o.errors || []).join('\n');
    record(o);
    drawClusters(o);
    drawIO(o.servers || []);
    drawMeta(o.meta || []);
    drawMembers(o);
    if (o.events) { state.events = o.events.slice(-50); drawEvents(); }
  }

  function record(o) {
    const t = Date.parse(o.time) / 1000 || Date.now() / 1000;
    for (const c of o.clusters || []) {
      for (const s of c.services || []) {
        const h = state.history.get(s.name) || [];
        if (!h.length || h[h.length - 1].t < t) {
          const r = s.rate || {};
          h.push({ t, cps: r.conns_per_sec || 0, rps: s.requests_per_sec ?? null, bps: (r.bytes_in_per_sec || 0) + (r.bytes_out_per_sec || 0) });
        }
        while (h.length && h[0].t < t - HISTORY_SECONDS) h.shift();
        state.history.set(s.name, h);
      }
    }
  }

  function chart(name) {
    const h = state.history.get(name) || [];
    const W = 300, H = 60;
    const svg = svgEl('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', 'data-field': 'chart', 'data-samples': h.length });
    if (h.length) {
      const now = h[h.length - 1].t;
      const line = (key, cls) => {
        const known = h.filter((p) => p[key] != null);
        const top = Math.max(...known.map((p) => p[key])) || 1;
        const pts = known.map((p) => `${(((p.t - (now - HISTORY_SECONDS)) / HISTORY_SECONDS) * W).toFixed(1)},${(H - 3 - (p[key] / top) * (H - 8)).toFixed(1)}`);
        svg.append(svgEl('polyline', { class: cls, points: pts.join(' '), 'vector-effect': 'non-scaling-stroke' }));
        return top;
      };
      const r = line('cps', 'rate');
      if (h.some((p) => p.rps > 0)) line('rps', 'reqs');
      const t = line('bps', 'tput');
      svg.dataset.maxRate = r;
      svg.dataset.maxThroughput = t;
    }
    const top = (k) => Math.max(0, ...h.map((p) => p[k] || 0));
    const legend = el('div', { class: 'legend' },
      el('span', { class: 'r' }, '— new conns/s (max ' + rate(top('cps')) + ')'), '  ',
      top('rps') > 0 ? el('span', { class: 'q' }, '— requests/s (max ' + rate(top('rps')) + ')') : null, '  ',
      el('span', { class: 't' }, '— throughput (max ' + bps(top('bps')) + ')'), '  over the last 5 min');
    return [svg, legend];
  }

  function drawClusters(o) {
    const root = $('clusters');
    const drained = new Set(o.drained || []);
    const out = [];
    for (const c of o.clusters || []) {
      const box = el('section', { class: 'cluster', 'data-cluster': c.name });
      box.append(el('h2', {}, c.name ? 'cluster ' + c.name : 'services in no cluster', c.description ? el('span', { class: 'desc' }, c.description) : null));
      const grid = el('div', { class: 'services' });
      if (!c.services.length) grid.append(el('p', { class: 'legend' }, 'no services'));
      for (const s of c.services) grid.append(service(s, drained));
      box.append(grid);
      out.push(box);
    }
    if (!out.length) out.push(el('p', { class: 'legend' }, 'no services configured'));
    morphChildren(root, out);
  }

  function service(s, drained) {
    const r = s.rate || {};
    const tput = (r.bytes_in_per_sec || 0) + (r.bytes_out_per_sec || 0);
    const card = el('div', { class: 'service', 'data-service': s.name });
    card.append(el('h3', {}, s.name, ' ', el('span', { class: 'meta' }, `${s.vip} ${s.protocol || 'tcp'} ${s.dataplane || 'l4'} ${s.scheduler || ''}`)));
    const from = s.director ? 'reported by director ' + s.director : 'no director reports it';
    card.append(el('div', { class: 'stats' },
      el('span', {}, 'new conns ', el('b', { 'data-field': 'rate', 'data-value': r.conns_per_sec || 0 }, rate(r.conns_per_sec))),
      el('span', {}, 'throughput ', el('b', { 'data-field': 'throughput', 'data-value': tput }, bps(tput))),
      el('span', {}, 'requests ', s.requests_per_sec == null ? el('b', { 'data-field': 'requests' }, s.dataplane === 'l7' ? '–' : 'l7 only')
        : el('b', { 'data-field': 'requests', 'data-value': s.requests_per_sec }, rate(s.requests_per_sec))),
      el('span', {}, 'p99 ', s.p99_seconds == null ? el('b', { 'data-field': 'p99' }, s.dataplane === 'l7' ? '–' : 'l7 only')
        : el('b', { 'data-field': 'p99', 'data-value': s.p99_seconds }, (s.p99_seconds * 1000).toFixed(1) + ' ms')),
      el('span', {}, 'drops ', el('b', { 'data-field': 'drops', 'data-value': s.drops }, s.drops)),
      el('span', { class: 'meta', 'data-field': 'director' }, from)));
    card.append(...chart(s.name));
    const fb = s.feedback;
    if (fb) {
      card.append(el('p', { class: 'meta', 'data-field': 'feedback', 'data-seq': fb.seq, 'data-stale': fb.stale ? 'true' : 'false' },
        `load feedback weights: publication ${fb.seq} (${fb.source}), ${ago(fb.time)}`, fb.stale ? el('span', { class: 'bad' }, ' — ' + fb.stale) : null));
    }
    const tb = el('tbody');
    for (const x of s.servers || []) {
      const isDrained = x.drained || (x.node && drained.has(x.node));
      const xr = x.rate || {};
      const health = !s.director ? el('td', { 'data-field': 'health', 'data-value': 'unknown' }, '?')
        : el('td', { 'data-field': 'health', 'data-value': x.healthy ? 'up' : 'down', class: x.healthy ? 'ok' : 'bad', title: x.last_error || '' }, x.healthy ? 'up' : 'down');
      let action = el('td');
      if (x.node) {
        const b = el('button', { type: 'button', class: isDrained ? 'undrain' : 'drain', 'data-action': isDrained ? 'undrain' : 'drain', 'data-node': x.node }, isDrained ? 'undrain' : 'drain');
        action = el('td', {}, b);
      }
      tb.append(el('tr', { 'data-server': x.addr, 'data-node': x.node || null, class: isDrained ? 'drained' : null },
        el('td', { 'data-field': 'addr' }, x.addr),
        el('td', { 'data-field': 'node' }, (x.node || '') + (isDrained ? ' (drained)' : '')),
        health,
        num('weight', x.weight),
        num('config_weight', x.config_weight),
        num('active', x.active),
        num('inactive', x.inactive),
        num('rate', xr.conns_per_sec || 0, rate(xr.conns_per_sec)),
        num('throughput', (xr.bytes_in_per_sec || 0) + (xr.bytes_out_per_sec || 0), bps((xr.bytes_in_per_sec || 0) + (xr.bytes_out_per_sec || 0))),
        ...(fb ? fbCells(x.feedback) : []),
        action));
    }
    const head = el('thead', {}, el('tr', {}, ...['server', 'node', 'health'].map((h) => el('th', {}, h)),
      ...['weight', 'configured', 'active', 'inactive', 'conns/s', 'throughput'].concat(fb ? ['feedback', 'load'] : []).map((h) => el('th', { class: 'num' }, h)), el('th')));
    card.append(el('table', { class: 'pool' }, head, tb));
    return card;
  }

  // fbCells are a server's feedback weight and load; the controller's
  // reason in words is the weight's tooltip.
  function fbCells(f) {
    if (!f) return [el('td', { class: 'num', 'data-field': 'feedback_weight' }, '–'), el('td', { class: 'num', 'data-field': 'feedback_load' }, '–')];
    return [el('td', { class: 'num', 'data-field': 'feedback_weight', 'data-value': f.weight, title: f.reason }, String(f.weight)),
      el('td', { class: 'num', 'data-field': 'feedback_load', 'data-value': f.load }, f.load.toFixed(2))];
  }

  function drawIO(servers) {
    const tb = $('ioservers').tBodies[0];
    const rows = servers.map((s) => {
      const used = s.total > 0 ? (s.total - s.free) / s.total : 0;
      const bar = el('span', { class: 'bar' + (used > 0.9 ? ' full' : '') }, el('span'));
      bar.firstChild.style.width = (used * 100).toFixed(1) + '%';
      const healDone = s.stale + s.healed > 0 ? s.healed / (s.stale + s.healed) : 1;
      const st = el('td', { 'data-field': 'state', 'data-value': s.state, class: s.state === 'up' ? 'ok' : 'bad' }, s.state);
      return el('tr', { 'data-ioserver': s.id },
        el('td', { 'data-field': 'id' }, s.id),
        el('td', { 'data-field': 'addr' }, s.addr),
        st,
        el('td', { 'data-field': 'used', 'data-value': s.total - s.free, 'data-total': s.total }, bar, bytes(s.total - s.free) + ' of ' + bytes(s.total)),
        num('free', s.free, bytes(s.free)),
        el('td', { 'data-field': 'heal', 'data-value': healDone.toFixed(4), 'data-stale': s.stale, 'data-healed': s.healed, class: s.stale > 0 ? 'warnc' : '' },
          s.stale > 0 ? (healDone * 100).toFixed(1) + '% (' + bytes(s.stale) + ' to heal)' : 'in sync'));
    });
    if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: 6, class: 'legend' }, 'none known')));
    morphChildren(tb, rows);
  }

  function drawMeta(ms) {
    const tb = $('meta').tBodies[0];
    const rows = ms.map((m) => el('tr', { 'data-meta': m.addr },
      el('td', { 'data-field': 'addr' }, m.addr),
      el('td', { 'data-field': 'role', 'data-value': m.leader ? 'leader' : 'follower' }, m.leader ? 'leader' : 'follower'),
      yesNo('up', m.up),
      el('td', { 'data-field': 'error', class: 'bad' }, m.error || '')));
    if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: 4, class: 'legend' }, 'none known')));
    morphChildren(tb, rows);
  }

  function drawMembers(o) {
    const tb = $('members').tBodies[0];
    const rows = (o.members || []).map((m) => {
      const mismatch = m.version !== o.version;
      return el('tr', { 'data-member': m.name, class: mismatch ? 'mismatch' : null, 'data-mismatch': mismatch ? 'true' : 'false' },
        el('td', { 'data-field': 'name' }, m.name),
        el('td', { 'data-field': 'role' }, m.role),
        el('td', { 'data-field': 'addr' }, m.addr),
        yesNo('up', m.up),
        el('td', { 'data-field': 'healthy', 'data-value': m.healthy ? 'true' : 'false', class: m.healthy ? 'ok' : 'bad', title: m.health || '' }, m.healthy ? 'yes' : 'no' + (m.health ? ': ' + m.health : '')),
        num('version', m.version, mismatch ? m.version + ' (current ' + o.version + ')' : m.version),
        el('td', { 'data-field': 'error', class: 'bad' }, m.error || ''));
    });
    if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: 7, class: 'legend' }, 'no member has joined')));
    morphChildren(tb, rows);
  }

  function addEvent(e) {
    state.events.push(e);
    if (state.events.length > 50) state.events.shift();
    drawEvents();
  }
  function drawEvents() {
    const list = state.events.slice().reverse().map((e) => el('li', { 'data-event': e.kind },
      el('time', {}, ago(e.time)), el('span', { class: 'kind' }, e.kind),
      e.member ? e.member + ': ' : '', e.msg, e.version ? ' (version ' + e.version + ')' : ''));
    morphChildren($('events'), list);
  }

  // ---- wiring ----
  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', login);
    $('logout').addEventListener('click', logout);
    $('clusters').addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-action]');
      if (!b) return;
      b.disabled = true;
      drain(b.dataset.node, b.dataset.action === 'drain');
    });
    if (state.token) start();
    else showLogin('');
  });
})();
