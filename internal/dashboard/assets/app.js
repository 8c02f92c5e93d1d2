// cooldownd dashboard. Plain JavaScript, no dependencies, no build step.
//
// It calls the Connect API of the server that serves it: unary RPCs with
// Connect's JSON protocol, and WatchConnections with Connect's streaming
// protocol over fetch (enveloped JSON). A periodic ListConnections keeps the
// counters fresh (the stream carries state changes, not every report) and
// re-reads everything after a reconnect.
//
// Data from the server is only ever put in the page with textContent, never
// as HTML: labels come from applications.
//
// Each row says why the connection is in its state: the server's explanation
// (ConnectionState.explanation, computed once by internal/breaker Explain),
// which this page displays and never derives. A connection opens from its
// URL, #/c/<id> (#/c/<tenant>/<id> for an operator), so an alert can link to
// it. The per-connection timeline is built in
// this browser from what the page has seen since it opened (the watch stream's
// transitions and the counters of each re-read), as Hystrix's rolling view is
// built from its stream; the server keeps only the transitions.
'use strict';

(() => {
  const SVC = 'cooldown.v1.CooldownService/';
  const ADMIN = 'cooldown.v1.AdminService/';
  const TOKEN_KEY = 'cooldownd.token';
  const STALL_MS = 45000; // three missed 15 s heartbeats
  const MAX_MESSAGE = 4 << 20;
  const TICK_MS = 200;
  const TIMELINE_MS = 10 * 60 * 1000; // the strip covers the last 10 minutes
  const TIMELINE_BUCKETS = 40; // of 15 s each
  const MAX_EVENTS = 300; // per connection, oldest dropped first
  // Force closed ignores every failure: it ends by itself unless asked.
  const DEFAULT_FORCE_CLOSED = '900s';

  const $ = (id) => document.getElementById(id);

  const state = {
    me: null,
    rows: new Map(), // key (tenant/id hex) -> {m, el, seen, dirty, events, policy}
    wantDetail: null, // key of the connection the URL names, until its row arrives
    offset: 0, // server clock minus local clock, ms
    sort: { key: 'severity', dir: 1 },
    filter: '',
    gen: 0,
    session: 0, // bumped on sign-in and sign-out: older loops stop
    watch: null, // AbortController of the running stream
    watchUp: false,
    listing: false,
    listAgain: false,
    loaded: false,
    detailId: null,
    detailTimer: 0,
    confirm: null,
    renderQueued: false,
    expiryTimer: 0,
    offline: false, // the last call to the server failed
    offlineSince: 0,
    openedAt: Date.now(),
    multiTenant: false,
    ticks: 0,
    hover: false, // the pointer is over the rows: their order holds
  };

  // ---- small helpers -------------------------------------------------------

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-')) e.dataset[k.slice(5).replace(/-([a-z])/g, (_, c) => c.toUpperCase())] = v;
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  function serverNow() { return Date.now() + state.offset; }

  function token() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
  }

  function headers(extra) {
    const h = Object.assign({}, extra);
    const t = token();
    if (t) h.Authorization = 'Bearer ' + t;
    return h;
  }

  class RpcError extends Error {
    constructor(code, message) {
      super(message || code);
      this.code = code || 'unknown';
    }
  }

  function codeOfStatus(status) {
    switch (status) {
      case 400: return 'invalid_argument';
      case 401: return 'unauthenticated';
      case 403: return 'permission_denied';
      case 404: return 'unimplemented';
      case 429: return 'resource_exhausted';
      case 502: case 503: case 504: return 'unavailable';
      default: return 'unknown';
    }
  }

  async function call(path, body) {
    let res;
    try {
      res = await fetch(path, {
        method: 'POST',
        headers: headers({ 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' }),
        body: JSON.stringify(body || {}),
        cache: 'no-store',
        credentials: 'omit',
      });
    } catch {
      throw new RpcError('unavailable', 'cannot reach the server');
    }
    const text = await res.text();
    let js = null;
    try { js = text ? JSON.parse(text) : {}; } catch { js = null; }
    if (!res.ok) {
      throw new RpcError((js && js.code) || codeOfStatus(res.status), (js && js.message) || 'HTTP ' + res.status);
    }
    return js || {};
  }

  // ---- ids, enums, times ---------------------------------------------------

  function b64ToHex(b64) {
    let bin;
    try { bin = atob(String(b64 || '').replace(/-/g, '+').replace(/_/g, '/')); } catch { return ''; }
    let s = '';
    for (let i = 0; i < bin.length; i++) s += bin.charCodeAt(i).toString(16).padStart(2, '0');
    return s;
  }

  function hexToB64(hex) {
    let bin = '';
    for (let i = 0; i + 1 < hex.length; i += 2) bin += String.fromCharCode(parseInt(hex.slice(i, i + 2), 16));
    return btoa(bin);
  }

  const STATES = { STATE_CLOSED: 'closed', STATE_OPEN: 'open', STATE_HALF_OPEN: 'half-open' };
  const SEVERITY = { open: 0, 'half-open': 1, closed: 2 };

  function enumName(v, prefix) {
    if (!v || typeof v !== 'string') return '';
    const s = v.startsWith(prefix) ? v.slice(prefix.length) : v;
    return s === 'UNSPECIFIED' ? '' : s.toLowerCase().replace(/_/g, ' ');
  }

  // Short outcome names for the table; the detail view spells them out.
  const SHORT_OUTCOME = {
    'transient failure': 'transient', 'rate limited': 'rate limited', 'quota exhausted': 'quota',
    'auth failure': 'auth', 'client error': 'client error', 'success': 'ok',
  };

  const stateName = (v) => STATES[v] || (v ? enumName(v, 'STATE_') : 'closed');

  // ---- a connection's URL: #/c/<id>, #/c/<tenant>/<id> --------------------

  function hashOf(m) {
    return '#/c/' + (m.tenant ? encodeURIComponent(m.tenant) + '/' : '') + m.hex;
  }

  // keyOfHash is the row key a #/c/… fragment names, '' for any other.
  function keyOfHash(h) {
    const mt = /^#\/c\/(?:([^/]+)\/)?([0-9a-fA-F]{64})$/.exec(h || '');
    if (!mt) return '';
    let tenant = '';
    try { tenant = mt[1] ? decodeURIComponent(mt[1]) : ''; } catch { return ''; }
    return tenant + '/' + mt[2].toLowerCase();
  }

  // followHash opens the connection the URL names, now or once its row
  // arrives; any other fragment closes the detail view.
  function followHash() {
    const key = keyOfHash(location.hash);
    if (!key) {
      state.wantDetail = null;
      if ($('detail').open) $('detail').close();
      return;
    }
    if (state.rows.has(key)) {
      state.wantDetail = null;
      if (state.detailId !== key || !$('detail').open) openDetail(key);
    } else {
      state.wantDetail = key;
    }
  }
  const tsMs = (t) => (t ? Date.parse(t) || 0 : 0);
  const durMs = (d) => (d ? Math.round(parseFloat(d) * 1000) || 0 : 0);

  function fmtDur(ms) {
    if (ms <= 0) return '0s';
    const s = ms / 1000;
    if (s < 10) return s.toFixed(1) + 's';
    if (s < 60) return Math.floor(s) + 's';
    const m = Math.floor(s / 60);
    if (m < 60) return m + 'm ' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
    const h = Math.floor(m / 60);
    if (h < 48) return h + 'h ' + String(m % 60).padStart(2, '0') + 'm';
    return Math.floor(h / 24) + 'd ' + (h % 24) + 'h';
  }

  // fmtSpan writes a length of time the way a policy states it: 500ms,
  // 9.8s, 30s, 1m30s, 1h.
  function fmtSpan(ms) {
    if (ms <= 0) return '0s';
    if (ms < 1000) return Math.round(ms) + 'ms';
    if (ms < 60000 && ms % 1000 >= 50) return (ms / 1000).toFixed(1) + 's';
    const total = Math.round(ms / 1000);
    const h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), sec = total % 60;
    return (h ? h + 'h' : '') + (m ? m + 'm' : '') + (sec ? sec + 's' : '');
  }

  function fmtAgo(t) {
    if (!t) return '—';
    const ms = serverNow() - t;
    if (ms < 1500) return 'just now';
    return fmtDur(ms).replace(/\.\d/, '') + ' ago';
  }

  function fmtTime(t) {
    if (!t) return '';
    const d = new Date(t);
    const p = (n, w) => String(n).padStart(w || 2, '0');
    return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' +
      p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds()) + '.' + p(d.getMilliseconds(), 3);
  }

  // model flattens a ConnectionState (protojson) into what the table shows.
  function model(cs) {
    const c = cs.connection || {};
    const hex = b64ToHex(c.id);
    const tenant = cs.tenant || '';
    return {
      hex,
      tenant,
      key: tenant + '/' + hex,
      short: hex.slice(0, 8),
      label: c.label || '',
      state: stateName(cs.state),
      cause: enumName(cs.cause, 'CAUSE_'),
      rev: Number(cs.revision || 0),
      openUntil: tsMs(cs.openUntil),
      probes: cs.probesInFlight || 0,
      probeStart: tsMs(cs.probeStartedAt),
      consecutive: cs.consecutiveFailures || 0,
      reopens: cs.reopens || 0,
      ok: Number(cs.recentSuccesses || 0),
      fail: Number(cs.recentFailures || 0),
      status: cs.lastHttpStatus || 0,
      outcome: enumName(cs.lastOutcome, 'OUTCOME_'),
      code: cs.lastErrorCode || '',
      override: enumName(cs.override, 'OVERRIDE_'),
      overrideUntil: tsMs(cs.overrideUntil),
      changed: tsMs(cs.changedAt),
      updated: tsMs(cs.updatedAt),
      shadow: !!cs.shadow,
      fleet: fleetOf(cs.fleet),
      x: explanationOf(cs.explanation),
    };
  }

  // explanationOf reads ConnectionState.explanation: why the connection is
  // in its state, as the server computed it. A state without one (an older
  // server) explains nothing and sorts last.
  function explanationOf(x) {
    if (!x) return { reasons: [], severity: 1e6, actor: '', reason: '', openedBy: '', throttling: false, quorumNeeded: 0, quorumReporters: 0, budget: null };
    const b = x.retryBudget;
    return {
      reasons: x.reasons || [],
      severity: x.severity || 0, // protojson leaves out a zero
      actor: x.actor || '',
      reason: x.reason || '',
      openedBy: enumName(x.openedBy, 'CAUSE_'),
      throttling: !!x.throttling,
      quorumNeeded: x.quorumNeeded || 0,
      quorumReporters: x.quorumReporters || 0,
      budget: b ? { retries: Number(b.retries || 0), allowed: Number(b.allowed || 0), left: Number(b.retriesLeft || 0) } : null,
    };
  }

  // fleetOf reads ConnectionState.fleet: the counts over the fleet window
  // of every process's calls (the older bucket weighted by its overlap).
  function fleetOf(f) {
    f = f || {};
    const n = (v) => Number(v || 0) || 0;
    const out = {
      first: n(f.firstAttempts), retries: n(f.retries), requests: n(f.requests), accepts: n(f.accepts),
      prob: n(f.throttleProbability), reporters: n(f.failureReporters),
    };
    out.any = Object.values(out).some((v) => v !== 0);
    return out;
  }

  // learnClock estimates the server clock from a fresh state: open_until
  // minus retry_after is the server's now when it answered.
  function learnClock(cs) {
    if (cs.openUntil && cs.retryAfter) {
      const now = tsMs(cs.openUntil) - durMs(cs.retryAfter);
      if (now > 0) state.offset = now - Date.now();
    }
  }

  // ---- the table -----------------------------------------------------------

  // upsert merges one connection state; an older revision never replaces a
  // newer one (the stream and the periodic list race). Revisions order one
  // lifetime of a connection: after it expires idle and comes back, it
  // starts again at a low revision, which the server-clock change time
  // (later than anything of the old lifetime) tells apart.
  function upsert(cs, tr) {
    if (!cs || !cs.connection) return;
    const m = model(cs);
    if (m.hex.length !== 64) return;
    learnClock(cs);
    const old = state.rows.get(m.key);
    if (old) {
      old.seen = state.gen;
      const newLife = m.rev < old.m.rev && m.changed > old.m.changed && m.updated >= old.m.updated;
      if (tr && m.rev === old.m.rev) annotate(old, m.rev, tr);
      if (!newLife && (m.rev < old.m.rev || (m.rev === old.m.rev && m.updated < old.m.updated))) return;
      observe(old, old.m, m, tr);
      old.m = m;
      old.dirty = true;
    } else {
      const row = { m, el: null, seen: state.gen, dirty: true, events: [], policy: null };
      pushEvent(row, { t: serverNow(), kind: 'seen', state: m.state, cause: m.cause });
      state.rows.set(m.key, row);
    }
    if (state.detailId === m.key) scheduleDetail();
    if (state.wantDetail === m.key) followHash();
    scheduleRender();
  }

  // ---- what the page has seen: the timeline --------------------------------

  function pushEvent(row, ev) {
    row.events.push(ev);
    if (row.events.length > MAX_EVENTS) row.events.splice(0, row.events.length - MAX_EVENTS);
  }

  // observe records what changed between two states of a row: a transition
  // (with the stream's actor and reason when it came with one) or the
  // reports counted in between.
  function observe(row, a, b, tr) {
    const now = serverNow();
    if (b.rev !== a.rev) {
      if (b.state !== a.state || b.cause !== a.cause || b.override !== a.override) {
        pushEvent(row, {
          t: b.changed || now, kind: 'transition', rev: b.rev, from: a.state, to: b.state, cause: b.cause,
          actor: (tr && tr.actor) || '', reason: (tr && tr.reason) || '', status: b.status, outcome: b.outcome,
          shadow: tr ? !!tr.shadow : b.shadow,
        });
      }
      return;
    }
    const ok = b.ok - a.ok, fail = b.fail - a.fail;
    if (ok > 0 || fail > 0) pushEvent(row, { t: b.updated || now, kind: 'counts', ok: Math.max(ok, 0), fail: Math.max(fail, 0), outcome: b.outcome, status: b.status });
  }

  // annotate adds the stream's actor and reason to a transition the page
  // already recorded from another answer (an override's own response comes
  // back before its event).
  function annotate(row, rev, tr) {
    for (let i = row.events.length - 1; i >= 0; i--) {
      const ev = row.events[i];
      if (ev.kind !== 'transition' || ev.rev !== rev) continue;
      if (!ev.actor && tr.actor) {
        ev.actor = tr.actor;
        ev.reason = tr.reason || '';
        if (state.detailId === row.m.key) scheduleDetail();
      }
      return;
    }
  }

  // ---- why: the server's explanation of a row -----------------------------

  const pct = (x) => (Math.round(x * 1000) / 10) + ' %';

  // num writes a fleet count (weighted, so possibly fractional) with at
  // most one decimal.
  const num = (v) => String(Math.round(v * 10) / 10);

  // why is the server's explanation in words, most severe first.
  function why(row) { return row.m.x.reasons.join('; '); }

  function getConnection(m, historyLimit) {
    const req = { id: hexToB64(m.hex), historyLimit };
    if (m.tenant) req.tenant = m.tenant;
    return call(SVC + 'GetConnection', req);
  }

  function scheduleRender() {
    if (state.renderQueued) return;
    state.renderQueued = true;
    requestAnimationFrame(() => {
      state.renderQueued = false;
      render();
    });
  }

  function matches(m, f) {
    if (!f) return true;
    const hay = [m.tenant, m.label, m.hex, m.state, m.cause, m.outcome, m.code, m.override, String(m.status || ''),
      m.shadow ? 'shadow' : '', m.fleet.prob > 0 ? 'throttled' : ''].join(' ').toLowerCase();
    return f.split(/\s+/).every((w) => hay.includes(w));
  }

  function leftMs(m) {
    if (m.state !== 'open') return Infinity;
    if (m.openUntil) return m.openUntil - serverNow();
    if (m.overrideUntil) return m.overrideUntil - serverNow();
    return Number.MAX_SAFE_INTEGER;
  }

  // severity is the server's rank (Explanation.severity): open first (a
  // broken credential or quota before a breaker before a forced open
  // before the short cooldowns), then half-open, forced closed, denied by
  // a fleet rule, failing (the closest to a trip first), healthy.
  function severity(m) { return m.x.severity; }

  const SORTS = {
    severity,
    tenant: (m) => m.tenant,
    label: (m) => m.label.toLowerCase() || '\uffff',
    id: (m) => m.hex,
    state: (m) => SEVERITY[m.state] ?? 3,
    cause: (m) => m.cause || '\uffff',
    left: leftMs,
    probe: (m) => -m.probes,
    recent: (m) => -(m.fail * 1e9 + m.ok),
    last: (m) => m.status,
    revision: (m) => m.rev,
    changed: (m) => -m.changed,
  };

  function compare(a, b) {
    const k = SORTS[state.sort.key] || SORTS.severity;
    const x = k(a.m), y = k(b.m);
    if (x < y) return -state.sort.dir;
    if (x > y) return state.sort.dir;
    const la = SORTS.label(a.m), lb = SORTS.label(b.m);
    if (la !== lb) return la < lb ? -1 : 1;
    return a.m.key < b.m.key ? -1 : a.m.key > b.m.key ? 1 : 0;
  }

  function isAdmin() { return !!state.me && state.me.role === 'admin'; }

  // Each cell carries its column name (data-col) for the narrow layout,
  // where a row is a card and the names label its lines.
  const COLUMNS = [['tenant', 'Tenant'], ['label', 'Label'], ['id', 'ID'], ['state', 'State'], ['why', 'Why'],
    ['left num', 'Time left'], ['probe', 'Probe'], ['recent num', 'OK / fail'], ['last', 'Last report'], ['changed', 'Changed']];

  function buildRow(row) {
    const tr = el('tr', { tabindex: '0', 'data-id': row.m.hex, 'data-key': row.m.key });
    if (row.m.tenant) tr.dataset.tenant = row.m.tenant;
    for (const [c, name] of COLUMNS) tr.append(el('td', { class: 'c-' + c, 'data-col': name }));
    cell(tr, 'why').append(el('span', { class: 'cause' }), el('span', { class: 'why-text' }));
    row.el = tr;
    return tr;
  }

  function cell(tr, name) { return tr.querySelector('.c-' + name); }

  function badge(m) {
    const b = el('span', { class: 'badge st-' + m.state, text: m.state });
    if (!m.override && !m.shadow) return b;
    const st = el('span', { class: 'stack' }, b);
    if (m.override) st.append(el('span', { class: 'tag', text: 'forced', title: 'operator override: ' + m.override }));
    if (m.shadow) {
      st.append(el('span', { class: 'tag shadow', text: 'shadow',
        title: 'shadow mode: the policy’s decisions and transitions are computed and published, not enforced' }));
    }
    return st;
  }

  function fillRow(row) {
    const m = row.m, tr = row.el;
    tr.dataset.state = m.state;
    const lab = cell(tr, 'label');
    lab.textContent = m.label || '(no label)';
    lab.classList.toggle('dim', !m.label);
    lab.title = m.label;
    // The id links to the connection's own URL (an alert can link to it).
    const id = cell(tr, 'id');
    const link = id.firstElementChild || id.appendChild(el('a', { class: 'link' }));
    link.textContent = m.short + '…';
    link.href = hashOf(m);
    id.title = m.hex;
    cell(tr, 'state').replaceChildren(badge(m));
    cell(tr, 'tenant').textContent = m.tenant;
    const w = cell(tr, 'why');
    const cause = w.querySelector('.cause');
    const text = why(row);
    // The cause: an open one's, a forced state's, and the one that opened a
    // half-open connection (the reasons say it in words).
    const showCause = m.state === 'open' || !!m.override || (m.state === 'half-open' && !!m.x.openedBy);
    cause.textContent = !showCause ? '' : m.override ? 'forced' : m.state === 'half-open' ? 'after ' + m.x.openedBy : m.cause || '—';
    w.querySelector('.why-text').textContent = text || (showCause ? '' : '—');
    w.classList.toggle('dim', !showCause && !text);
    w.title = text;
    const rec = cell(tr, 'recent');
    rec.replaceChildren(el('span', { class: 'ok', text: String(m.ok) }), ' / ',
      el('span', { class: m.fail ? 'bad' : '', text: String(m.fail) }));
    rec.title = m.consecutive ? m.consecutive + ' consecutive failures' : '';
    const last = cell(tr, 'last');
    last.textContent = m.status || m.outcome ? [m.status || '', SHORT_OUTCOME[m.outcome] || m.outcome].filter(Boolean).join(' ') : '—';
    last.title = [m.status || '', m.outcome, m.code ? '(error code: ' + m.code + ')' : ''].filter(Boolean).join(' ');
    const ch = cell(tr, 'changed');
    ch.title = m.changed ? fmtTime(m.changed) : '';
    tickRow(row);
    row.dirty = false;
  }

  // tickRow refreshes the cells that move with the clock.
  function tickRow(row, force) {
    if (state.offline && !row.dirty && !force) return; // countdowns stop: the time left is unknown
    // Offline, the rows count to the moment the server went away: the
    // redraw setOffline schedules (a frame later) shows what its own tick
    // showed, so no countdown moves once the page says it stopped.
    const now = state.offline ? state.offlineSince + state.offset : serverNow();
    const m = row.m, tr = row.el;
    const left = cell(tr, 'left');
    let text = '—';
    if (m.state === 'open') {
      if (m.openUntil) {
        const ms = m.openUntil - now;
        text = ms > 0 ? fmtDur(ms) : 'ending';
        if (ms <= 0) expiryRefresh(row);
      } else if (m.override === 'forced open') {
        text = m.overrideUntil ? fmtDur(m.overrideUntil - now) : 'until changed';
      }
    } else if (m.override && m.overrideUntil) {
      text = fmtDur(m.overrideUntil - now);
    }
    if (left.textContent !== text) left.textContent = text;
    const probe = cell(tr, 'probe');
    const pt = m.probes > 0 ? m.probes + ' · ' + (m.probeStart ? fmtDur(now - m.probeStart).replace(/\.\d/, '') : '?') : '—';
    if (probe.textContent !== pt) probe.textContent = pt;
    probe.classList.toggle('warn', m.probes > 0);
    probe.title = m.probes > 0 ? m.probes + ' probe lease(s) in flight; the oldest for that long' : '';
    const ch = cell(tr, 'changed');
    const at = fmtAgo(m.changed);
    if (ch.textContent !== at) ch.textContent = at;
  }

  // expiryRefresh re-reads state shortly after an open period ends: the
  // server applies the move to half-open when it next reads the connection.
  function expiryRefresh(row) {
    if (row.expirySeen === row.m.openUntil) return;
    row.expirySeen = row.m.openUntil;
    if (state.expiryTimer) return;
    state.expiryTimer = setTimeout(() => {
      state.expiryTimer = 0;
      refreshList();
    }, 400);
  }

  function render() {
    const body = $('rows');
    const f = state.filter.trim().toLowerCase();
    const all = [...state.rows.values()];
    const tenants = new Set(all.map((r) => r.m.tenant));
    state.multiTenant = tenants.size > 1;
    document.body.classList.toggle('multi-tenant', state.multiTenant);
    const shown = all.filter((r) => matches(r.m, f)).sort(compare);
    for (const r of shown) {
      if (!r.el) buildRow(r);
      if (r.dirty) fillRow(r);
    }
    let want = shown.map((r) => r.el);
    const have = [...body.children];
    // While the pointer is over the rows, keep their order (cells still
    // update): a row must not move away under a click. New and gone rows
    // still show at once.
    if (state.hover && want.length === have.length && want.every((e) => e.parentNode === body)) want = have;
    if (want.length !== have.length || want.some((e, i) => e !== have[i])) {
      const focused = document.activeElement;
      body.replaceChildren(...want);
      if (focused && body.contains(focused) && document.activeElement !== focused) focused.focus({ preventScroll: true });
    }
    const counts = { open: 0, 'half-open': 0, closed: 0 };
    for (const r of all) counts[r.m.state] = (counts[r.m.state] || 0) + 1;
    let sum = all.length + (all.length === 1 ? ' connection' : ' connections');
    if (counts.open) sum += ' · ' + counts.open + ' open';
    if (counts['half-open']) sum += ' · ' + counts['half-open'] + ' half-open';
    if (f && shown.length !== all.length) sum += ' · showing ' + shown.length;
    if (state.multiTenant) sum += ' · ' + tenants.size + ' tenants';
    $('summary').textContent = state.loaded ? sum : 'loading…';
    $('empty').hidden = !state.loaded || all.length > 0;
    $('conns').parentElement.hidden = state.loaded && all.length === 0;
    $('nomatch').hidden = all.length === 0 || shown.length > 0;
    for (const th of document.querySelectorAll('#conns th[data-key]')) {
      const on = th.dataset.key === state.sort.key;
      if (on) th.setAttribute('aria-sort', state.sort.dir > 0 ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    }
  }

  function tick() {
    state.ticks++;
    for (const r of state.rows.values()) if (r.el && r.el.isConnected) tickRow(r);
    if (state.detailId) tickDetail();
    if (state.offline) $('offline-text').textContent = offlineText();
  }

  // ---- the server unreachable ----------------------------------------------

  function offlineText() {
    return 'since ' + fmtTime(state.offlineSince).slice(11, 19) + ' (' + fmtAgo(state.offlineSince + state.offset) +
      '). The rows show the last state seen; countdowns are stopped and actions disabled until it answers.';
  }

  // setOffline marks the page as cut off from the server (the last call
  // failed), or back.
  function setOffline(on) {
    if (state.offline === on) return;
    state.offline = on;
    if (on) state.offlineSince = Date.now();
    document.body.classList.toggle('offline', on);
    $('offline').hidden = !on;
    $('offline-text').textContent = on ? offlineText() : '';
    for (const b of document.querySelectorAll('#detail-actions button, #confirm-ok')) b.disabled = on;
    for (const r of state.rows.values()) {
      if (on && r.el && r.el.isConnected) tickRow(r, true);
      r.dirty = true;
    }
    scheduleRender();
    if (state.detailId) fillDetail();
  }

  // ---- loading -------------------------------------------------------------

  // refreshList reads every connection and drops rows that are gone.
  async function refreshList() {
    if (!state.me) return;
    if (state.listing) {
      state.listAgain = true;
      return;
    }
    state.listing = true;
    const sess = state.session;
    const gen = ++state.gen;
    try {
      let pageToken = '';
      for (let i = 0; i < 200; i++) {
        const res = await call(SVC + 'ListConnections', { pageSize: 500, pageToken });
        if (sess !== state.session) return;
        for (const cs of res.connections || []) upsert(cs);
        pageToken = res.nextPageToken || '';
        if (!pageToken) break;
      }
      for (const [key, r] of state.rows) if (r.seen < gen) state.rows.delete(key);
      state.loaded = true;
      setOffline(false);
      if (state.watchUp !== false) setLive('live');
      scheduleRender();
    } catch (e) {
      if (sess === state.session) {
        if (e.code === 'unavailable') setOffline(true);
        handleAuthError(e);
      }
    } finally {
      state.listing = false;
      if (state.listAgain && sess === state.session) {
        state.listAgain = false;
        refreshList();
      }
    }
  }

  function envelope(msg) {
    const data = new TextEncoder().encode(JSON.stringify(msg));
    const buf = new Uint8Array(5 + data.length);
    new DataView(buf.buffer).setUint32(1, data.length, false);
    buf.set(data, 5);
    return buf;
  }

  // envelopes yields the Connect streaming envelopes of a response body.
  async function* envelopes(reader, onBytes) {
    let buf = new Uint8Array(0);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        if (buf.length) throw new RpcError('data_loss', 'the stream ended inside a message');
        return;
      }
      onBytes();
      if (value && value.length) {
        const n = new Uint8Array(buf.length + value.length);
        n.set(buf);
        n.set(value, buf.length);
        buf = n;
      }
      while (buf.length >= 5) {
        const len = new DataView(buf.buffer, buf.byteOffset, buf.byteLength).getUint32(1, false);
        if (len > MAX_MESSAGE) throw new RpcError('resource_exhausted', 'stream message too large');
        if (buf.length < 5 + len) break;
        yield { flags: buf[0], data: buf.slice(5, 5 + len) };
        buf = buf.slice(5 + len);
      }
    }
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // watchLoop follows WatchConnections and reconnects with backoff until
  // the session ends. Each (re)connect re-reads the whole table.
  async function watchLoop(sess) {
    let attempt = 0;
    const dec = new TextDecoder();
    while (sess === state.session) {
      const ctrl = new AbortController();
      state.watch = ctrl;
      let lastBytes = Date.now();
      let healthy = false;
      const started = Date.now();
      const stall = setInterval(() => {
        if (Date.now() - lastBytes > STALL_MS) ctrl.abort();
      }, 5000);
      let fatal = null;
      try {
        const pending = fetch(SVC + 'WatchConnections', {
          method: 'POST',
          headers: headers({ 'Content-Type': 'application/connect+json' }),
          body: envelope({ snapshot: true }),
          signal: ctrl.signal,
          cache: 'no-store',
          credentials: 'omit',
        });
        // The server sends response headers with the first message, which
        // can be a while for a quiet tenant: read the table meanwhile.
        state.watchUp = null;
        refreshList();
        let res;
        try {
          res = await pending;
        } catch (e) {
          if (!ctrl.signal.aborted) setOffline(true);
          throw e;
        }
        if (!res.ok) {
          if (res.status >= 500) setOffline(true);
          throw new RpcError(codeOfStatus(res.status), 'watch: HTTP ' + res.status);
        }
        state.watchUp = true;
        setOffline(false);
        if (state.loaded) setLive('live');
        for await (const env of envelopes(res.body.getReader(), () => { lastBytes = Date.now(); })) {
          if (env.flags & 0x01) throw new RpcError('internal', 'compressed stream message');
          const text = dec.decode(env.data);
          if (env.flags & 0x02) {
            const end = text ? JSON.parse(text) : {};
            if (end.error) throw new RpcError(end.error.code, end.error.message);
            break;
          }
          healthy = true;
          const msg = text ? JSON.parse(text) : {};
          if (msg.connection) upsert(msg.connection, msg.transition); // empty messages: end of snapshot, heartbeats
        }
      } catch (e) {
        if (e && (e.code === 'unauthenticated' || e.code === 'permission_denied')) fatal = e;
      } finally {
        clearInterval(stall);
      }
      if (sess !== state.session) return;
      if (fatal) {
        handleAuthError(fatal);
        return;
      }
      state.watchUp = false;
      if (healthy && Date.now() - started > 5000) attempt = 0;
      const delay = Math.min(10000, 500 * 2 ** attempt) * (0.75 + Math.random() * 0.5);
      attempt = Math.min(attempt + 1, 6);
      const until = Date.now() + delay;
      while (Date.now() < until && sess === state.session) {
        setLive('reconnecting in ' + Math.ceil((until - Date.now()) / 1000) + 's', 'down');
        await sleep(Math.min(250, until - Date.now()));
      }
      if (sess === state.session) setLive('reconnecting…', 'down');
    }
  }

  function setLive(text, kind) {
    const live = $('live');
    live.dataset.state = kind || (text === 'live' ? 'up' : 'wait');
    $('live-text').textContent = text;
  }

  function handleAuthError(e) {
    if (!e) return;
    if (e.code === 'unauthenticated') {
      signOut(token() ? 'The server no longer accepts this token. Paste a valid one.' : '');
    } else if (e.code === 'permission_denied') {
      signOut('This token’s role cannot view the dashboard. Use a viewer, admin or operator token.');
    } else {
      setLive(e.message || 'error', 'down');
    }
  }

  // ---- detail view ---------------------------------------------------------

  function scheduleDetail() {
    clearTimeout(state.detailTimer);
    state.detailTimer = setTimeout(loadDetail, 150);
  }

  function field(dl, name, value, cls) {
    dl.append(el('dt', { text: name }), el('dd', { class: cls || '', text: value }));
  }

  function fillDetail() {
    const row = state.rows.get(state.detailId);
    if (!row) return;
    const m = row.m;
    $('detail-title').textContent = m.label || 'Connection ' + m.short + '…';
    const w = why(row);
    $('detail-why').textContent = (m.state === 'closed' && !m.override ? (w ? 'Closed, ' + w : 'Closed and healthy') :
      badgeText(m) + (w ? ': ' + w : '')) + '.';
    const dl = $('detail-fields');
    dl.replaceChildren();
    if (m.tenant) field(dl, 'Tenant', m.tenant);
    field(dl, 'ID', m.hex, 'mono id');
    dl.append(el('dt', { text: 'State' }), el('dd', {}, badge(m)));
    field(dl, 'Cause', m.cause || '—');
    field(dl, 'Time left', '', 'd-left');
    field(dl, 'Revision', String(m.rev));
    field(dl, 'Probes in flight', m.probes ? m.probes + (m.probeStart ? ' since ' + fmtTime(m.probeStart) : '') : '0');
    field(dl, 'Since last transition', m.ok + ' successes, ' + m.fail + ' failures');
    field(dl, 'Consecutive failures', String(m.consecutive));
    field(dl, 'Re-opens', String(m.reopens));
    field(dl, 'Last report', [m.status || '', m.outcome, m.code ? '(' + m.code + ')' : ''].filter(Boolean).join(' ') || '—');
    field(dl, 'Override', m.override ? m.override + (m.overrideUntil ? ' until ' + fmtTime(m.overrideUntil) : ' until changed') : 'none');
    field(dl, 'Last change', m.changed ? fmtTime(m.changed) : '—');
    field(dl, 'Last report at', m.updated ? fmtTime(m.updated) : '—');
    if (m.shadow) field(dl, 'Shadow', m.override ? 'yes: the policy is not enforced; the override is' : 'yes: this state is not enforced, calls are allowed');
    // The buttons are rebuilt only when they change, never under the
    // pointer: the view refreshes with every re-read.
    const acts = $('detail-actions');
    const sig = isAdmin() && !m.tenant ? m.key + '|' + (m.override ? 'o' : '') : '';
    if (acts.dataset.sig !== sig) {
      acts.dataset.sig = sig;
      acts.replaceChildren();
      if (sig) {
        const b = (action, text) => el('button', { type: 'button', 'data-action': action, 'data-key': m.key, text });
        acts.append(b('reset', 'Reset'), b('force-open', 'Force open'), b('force-closed', 'Force closed'));
        if (m.override) acts.append(b('clear', 'Clear override'));
      }
    }
    for (const btn of acts.querySelectorAll('button')) btn.disabled = state.offline;
    fillFleet(row);
    fillPolicy(row);
    fillTimeline(row);
    tickDetail();
  }

  // fillFleet shows ConnectionState.fleet when any count is non-zero.
  function fillFleet(row) {
    const f = row.m.fleet, p = row.policy;
    const dl = $('detail-fleet');
    dl.replaceChildren();
    $('detail-fleet-wrap').hidden = !f.any;
    if (!f.any) return;
    const win = p && durMs(p.fleetWindow) > 0 ? fmtSpan(durMs(p.fleetWindow)) : '';
    $('detail-fleet-title').textContent = 'Fleet counts' + (win ? ' (last ' + win + ', every process)' : ' (every process)');
    // What each rule makes of the counts is the server's explanation.
    const x = row.m.x, b = x.budget;
    const denied = row.m.shadow ? 'would be denied' : 'denied';
    field(dl, 'First attempts', num(f.first));
    field(dl, 'Retries', num(f.retries) + (b ? ' of ' + num(b.allowed) + ' allowed' + (b.left === 0 ? ': budget spent, retries ' + denied + ' (retry_budget)' : ', ' + b.left + ' left') : ''));
    field(dl, 'Requests', num(f.requests));
    field(dl, 'Accepts', num(f.accepts));
    field(dl, 'Throttle probability', pct(f.prob) + (f.prob > 0 ? (x.throttling ? ' of calls ' + denied + ' (throttled)' : ' (applies once closed)') : ''));
    field(dl, 'Failure reporters', num(f.reporters) + (x.quorumNeeded > 1 ? ' of ' + x.quorumNeeded + ' to trip' : ''));
  }

  function badgeText(m) {
    return m.override ? m.override.charAt(0).toUpperCase() + m.override.slice(1) : m.state.charAt(0).toUpperCase() + m.state.slice(1);
  }

  // fillPolicy shows the effective policy GetConnection returned.
  function fillPolicy(row) {
    const dl = $('detail-policy');
    dl.replaceChildren();
    const p = row.policy;
    if (!p) {
      dl.append(el('dt', { text: 'Policy' }), el('dd', { class: 'dim', text: 'loading…' }));
      return;
    }
    const d = (v) => (durMs(v) > 0 ? fmtSpan(durMs(v)) : 'off');
    const cf = p.consecutiveFailures || 0, rate = p.failureRate || 0;
    field(dl, 'Trips after', cf ? cf + ' consecutive failures' : 'off (consecutive rule)');
    field(dl, 'Or at', rate ? '≥ ' + pct(rate) + ' failures over ' + d(p.window) + ', once ' + (p.minCalls || 0) + ' calls' : 'off (rate rule)');
    field(dl, 'Breaker opens', d(p.openBase) + ', doubling to ' + d(p.openMax) + (p.jitter ? ' (± ' + pct(p.jitter) + ' jitter)' : ''));
    field(dl, '429 without Retry-After', d(p.rateLimitCooldown));
    field(dl, 'Overload floor', d(p.overloadFloor));
    field(dl, 'Quota block', d(p.quotaBlock));
    field(dl, 'Auth block', d(p.authBlock));
    field(dl, 'Probes', (p.maxProbes || 1) + ' at once, lease ' + d(p.leaseTtl));
    const budget = p.retryBudget || 0, k = p.throttleK || 0, q = p.tripQuorum || 0;
    field(dl, 'Retry budget', budget > 0 ? pct(budget) + ' of first attempts' : 'off');
    field(dl, 'Retry budget min', budget > 0 ? (p.retryBudgetMin || 0) + ' retries/s' : 'off');
    field(dl, 'Throttle K', k > 0 ? k + ': rejects max(0, (requests − ' + k + '·accepts) / (requests + 1)) while closed' : 'off');
    field(dl, 'Trip quorum', q > 1 ? q + ' distinct reporters' : 'off (any one reporter)');
    field(dl, 'Fleet window', d(p.fleetWindow) + (d(p.fleetWindow) !== 'off' && !(budget > 0 || k > 0 || q > 1) ? ' (no fleet rule on)' : ''));
    field(dl, 'Shadow', p.shadow ? 'on: computed and published, not enforced' : 'off');
  }

  const SVGNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  // fillTimeline draws the last 10 minutes the page saw of a connection: a
  // band of its state and, per 15 s, the successes and failures counted, and
  // lists the events newest first.
  function fillTimeline(row) {
    const now = serverNow();
    const since = state.openedAt + state.offset;
    $('timeline-note').textContent = 'Built in this browser from the live stream since this page opened at ' +
      fmtTime(since).slice(11, 19) + ' (counters re-read every few seconds); the server keeps only the transitions below.' +
      (state.offline ? ' Paused: the server is unreachable.' : '');
    const W = TIMELINE_BUCKETS, span = TIMELINE_MS / W, from = now - TIMELINE_MS;
    const ok = new Array(W).fill(0), bad = new Array(W).fill(0);
    const states = new Array(W).fill('');
    let cur = '';
    const evs = row.events;
    let i = 0;
    for (; i < evs.length && evs[i].t < from; i++) {
      if (evs[i].kind === 'transition') cur = evs[i].to;
      else if (evs[i].kind === 'seen' && !cur) cur = evs[i].state;
    }
    for (let b = 0; b < W; b++) {
      const end = from + (b + 1) * span;
      let st = cur;
      for (; i < evs.length && evs[i].t < end; i++) {
        const ev = evs[i];
        if (ev.kind === 'counts') { ok[b] += ev.ok; bad[b] += ev.fail; }
        if (ev.kind === 'transition') { cur = ev.to; if (st !== 'open') st = ev.to === 'open' ? 'open' : (st || ev.to); }
        if (ev.kind === 'seen') { cur = ev.state; st = st || ev.state; }
      }
      states[b] = st;
    }
    const max = Math.max(1, ...ok.map((v, k) => v + bad[k]));
    const box = svg('svg', { viewBox: '0 0 400 64', preserveAspectRatio: 'none', role: 'img', class: 'strip',
      'aria-label': 'Last 10 minutes: ' + ok.reduce((a, b) => a + b, 0) + ' successes and ' + bad.reduce((a, b) => a + b, 0) + ' failures seen' });
    const bw = 400 / W;
    for (let b = 0; b < W; b++) {
      if (states[b]) box.append(svg('rect', { x: b * bw, y: 0, width: bw, height: 8, class: 'band st-' + states[b] }));
      const hOk = (ok[b] / max) * 52, hBad = (bad[b] / max) * 52;
      if (hBad) box.append(svg('rect', { x: b * bw + 1, y: 64 - hBad, width: bw - 2, height: hBad, class: 'bar fail' }));
      if (hOk) box.append(svg('rect', { x: b * bw + 1, y: 64 - hBad - hOk, width: bw - 2, height: hOk, class: 'bar ok' }));
    }
    const legend = el('div', { class: 'legend dim' }, el('span', { text: '10 min ago' }),
      el('span', {}, el('span', { class: 'key ok' }), ' ok ', el('span', { class: 'key fail' }), ' failed ',
        el('span', { class: 'key open' }), ' open ', el('span', { class: 'key half' }), ' half-open'), el('span', { text: 'now' }));
    $('detail-timeline').replaceChildren(box, legend);
    const list = evs.slice(-30).reverse().map((ev) => el('li', { 'data-kind': ev.kind },
      el('span', { class: 'mono', text: fmtTime(ev.t).slice(11, 19) + ' ' }), eventText(ev)));
    $('detail-events').replaceChildren(...list);
  }

  function eventText(ev) {
    switch (ev.kind) {
      case 'transition':
        return ev.from + ' → ' + ev.to + (ev.cause ? ' (' + ev.cause + ')' : '') +
          (ev.to === 'open' && ev.status ? ' after a ' + ev.status + (ev.outcome ? ' ' + ev.outcome : '') : '') +
          (ev.actor ? ' by ' + ev.actor + (ev.reason ? ': ' + ev.reason : '') : '') +
          (ev.shadow ? ' [shadow: not enforced]' : '');
      case 'counts':
        return (ev.ok ? '+' + ev.ok + ' ok' : '') + (ev.ok && ev.fail ? ', ' : '') +
          (ev.fail ? '+' + ev.fail + ' failed (last: ' + [ev.status || '', ev.outcome].filter(Boolean).join(' ') + ')' : '');
      default:
        return 'first seen by this page: ' + ev.state + (ev.state !== 'closed' && ev.cause ? ' (' + ev.cause + ')' : '');
    }
  }

  function tickDetail() {
    const row = state.rows.get(state.detailId);
    const dd = document.querySelector('#detail-fields .d-left');
    if (!row || !dd) return;
    if (state.offline) return; // stopped with the rows
    const ms = leftMs(row.m);
    const t = !Number.isFinite(ms) ? '—' : ms >= Number.MAX_SAFE_INTEGER ? 'until changed' : fmtDur(ms);
    if (dd.textContent !== t) dd.textContent = t;
    if (state.ticks % 25 === 0) fillTimeline(row); // the strip moves on every 5 s
  }

  async function loadDetail() {
    const key = state.detailId;
    const row = key && state.rows.get(key);
    if (!row) return;
    try {
      const res = await getConnection(row.m, 50);
      if (state.detailId !== key) return;
      if (res.policy) row.policy = res.policy;
      row.dirty = true;
      if (res.connection) upsert(res.connection);
      fillDetail();
      const tb = $('detail-history');
      const rows = (res.history || []).map((t) => el('tr', {},
        el('td', { class: 'mono', text: fmtTime(tsMs(t.time)) }),
        el('td', {}, el('span', { class: 'badge st-' + stateName(t.from), text: stateName(t.from) }), ' → ',
          el('span', { class: 'badge st-' + stateName(t.to), text: stateName(t.to) })),
        el('td', {}, enumName(t.cause, 'CAUSE_') || '—', t.shadow ? el('span', { class: 'tag shadow', text: 'shadow', title: 'computed, not enforced' }) : null),
        el('td', { class: 'num', text: String(Number(t.revision || 0)) }),
        el('td', { text: [t.actor, t.reason].filter(Boolean).join(': ') || '—' })));
      if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: '5', class: 'dim', text: 'No transitions recorded.' })));
      tb.replaceChildren(...rows);
      $('detail-error').textContent = '';
    } catch (e) {
      $('detail-error').textContent = 'Could not load the history: ' + e.message;
      handleAuthError(e.code === 'unauthenticated' || e.code === 'permission_denied' ? e : null);
    }
  }

  function openDetail(key) {
    if (!state.rows.has(key)) return;
    state.detailId = key;
    // The address names the open connection: it can be copied or linked.
    const h = hashOf(state.rows.get(key).m);
    if (location.hash !== h) history.replaceState(null, '', h);
    $('detail-history').replaceChildren(el('tr', {}, el('td', { colspan: '5', class: 'dim', text: 'Loading…' })));
    $('detail-error').textContent = '';
    fillDetail();
    const d = $('detail');
    if (!d.open) d.showModal();
    // Focus the title, not a button: the Enter that opened the view would
    // otherwise go on to press the button.
    $('detail-title').focus();
    loadDetail();
  }

  // ---- admin actions -------------------------------------------------------

  const ACTIONS = {
    'reset': { title: 'Reset connection', text: (n) => 'Reset ' + n + ' to closed? Its counters clear and a new revision starts, so reports admitted before the reset cannot change it.' },
    'force-open': { title: 'Force open', text: (n) => 'Deny every call to ' + n + ' until the override ends or is cleared?', duration: true },
    'force-closed': { title: 'Force closed', text: (n) => 'Admit every call to ' + n + ' and ignore its failures until the override ends or is cleared? It ends by itself after 15 minutes unless you choose otherwise.', duration: true },
    'clear': { title: 'Clear override', text: (n) => 'Clear the operator override of ' + n + '? It returns to its normal state.' },
  };

  function askConfirm(action, key) {
    const a = ACTIONS[action];
    const row = state.rows.get(key);
    if (!a || !row || !isAdmin() || state.offline) return;
    state.confirm = { action, key, hex: row.m.hex };
    const name = row.m.label ? '“' + row.m.label + '” (' + row.m.short + '…)' : row.m.short + '…';
    $('confirm-title').textContent = a.title;
    $('confirm-text').textContent = a.text(name);
    $('confirm-ok').textContent = a.title;
    $('confirm-for-wrap').hidden = !a.duration;
    $('confirm-for').value = action === 'force-closed' ? DEFAULT_FORCE_CLOSED : '';
    $('confirm-forever').textContent = action === 'force-closed' ? 'until changed (failures ignored until then)' : 'until changed';
    $('confirm-reason').value = '';
    $('confirm-error').textContent = '';
    $('confirm-ok').disabled = false;
    $('confirm').showModal();
    $('confirm-reason').focus();
  }

  async function doConfirm() {
    const c = state.confirm;
    if (!c) return;
    const id = hexToB64(c.hex);
    const reason = $('confirm-reason').value.trim();
    let path, body;
    if (c.action === 'reset') {
      path = ADMIN + 'ResetConnection';
      body = { id, reason };
    } else {
      path = ADMIN + 'ForceConnection';
      body = { id, reason };
      if (c.action === 'force-open') body.override = 'OVERRIDE_FORCED_OPEN';
      if (c.action === 'force-closed') body.override = 'OVERRIDE_FORCED_CLOSED';
      const d = $('confirm-for').value;
      if (d && c.action !== 'clear') body.duration = d;
    }
    $('confirm-ok').disabled = true;
    try {
      const res = await call(path, body);
      if (res.connection) upsert(res.connection);
      state.confirm = null;
      $('confirm').close();
      if (state.detailId === c.key) scheduleDetail();
    } catch (e) {
      $('confirm-error').textContent = e.message;
      $('confirm-ok').disabled = false;
      if (e.code === 'unauthenticated') handleAuthError(e);
    }
  }

  // ---- sign-in and start ---------------------------------------------------

  async function whoami() {
    const t0 = Date.now();
    let res;
    try {
      res = await fetch('ui/api/whoami', { headers: headers({}), cache: 'no-store', credentials: 'omit' });
    } catch {
      throw new RpcError('unavailable', 'cannot reach the server');
    }
    const js = await res.json().catch(() => ({}));
    if (!res.ok) throw new RpcError(codeOfStatus(res.status), js.message || 'HTTP ' + res.status);
    if (js.now) state.offset = js.now - (t0 + Date.now()) / 2;
    return js;
  }

  function stopSession() {
    state.session++;
    if (state.watch) state.watch.abort();
    state.watch = null;
    state.me = null;
    state.loaded = false;
    state.rows.clear();
    $('rows').replaceChildren();
    $('detail-actions').replaceChildren();
    delete $('detail-actions').dataset.sig;
    $('detail-fields').replaceChildren();
    $('detail-history').replaceChildren();
  }

  function signOut(message) {
    try { sessionStorage.removeItem(TOKEN_KEY); } catch { /* private mode */ }
    stopSession();
    if ($('detail').open) $('detail').close();
    if ($('confirm').open) $('confirm').close();
    $('board').hidden = true;
    $('signout').hidden = true;
    $('who').textContent = '';
    $('login').hidden = false;
    $('login-error').textContent = message || '';
    setLive('signed out', 'down');
    $('token-input').focus();
  }

  async function start() {
    stopSession();
    const sess = state.session;
    setLive('connecting…', 'wait');
    let me;
    for (let attempt = 0; ; attempt++) {
      try {
        me = await whoami();
        break;
      } catch (e) {
        if (sess !== state.session) return;
        if (e.code === 'unauthenticated') {
          signOut(token() ? 'The server did not accept that token.' : '');
          return;
        }
        if (e.code === 'permission_denied') {
          signOut(e.message);
          return;
        }
        setLive('server unreachable, retrying…', 'down');
        await sleep(Math.min(10000, 500 * 2 ** Math.min(attempt, 5)));
        if (sess !== state.session) return;
      }
    }
    state.me = me;
    document.body.classList.toggle('is-admin', me.role === 'admin');
    const who = $('who');
    who.replaceChildren(
      el('span', { class: 'chip', title: 'tenant', text: me.tenant || (me.role === 'operator' ? 'all tenants' : '') }),
      el('span', { class: 'chip role-' + me.role, title: 'role', text: me.role }));
    if (me.auth && me.name) who.append(el('span', { class: 'dim', text: me.name }));
    if (!me.auth) who.append(el('span', { class: 'chip warn', title: 'the server runs without tokens: every caller is an admin', text: 'auth off' }));
    $('signout').hidden = !me.auth;
    $('login').hidden = true;
    $('board').hidden = false;
    $('empty-curl').textContent = curlExample(me);
    render();
    watchLoop(sess);
  }

  function curlExample(me) {
    const base = location.origin + location.pathname.replace(/[^/]*$/, '');
    const auth = me.auth ? "  -H \"Authorization: Bearer $COOLDOWND_TOKEN\" \\\n" : '';
    const pre = me.auth ? '# with a client (or admin) token in $COOLDOWND_TOKEN\n' : '';
    return pre +
      'ID=$(head -c32 /dev/urandom | base64 -w0)\n' +
      "curl -s -X POST -H 'Content-Type: application/json' \\\n" + auth +
      '  ' + base + SVC + 'Admit \\\n' +
      '  -d "{\\"candidates\\":[{\\"id\\":\\"$ID\\",\\"label\\":\\"openai gpt-4o\\"}]}"\n\n' +
      "curl -s -X POST -H 'Content-Type: application/json' \\\n" + auth +
      '  ' + base + SVC + 'Report \\\n' +
      '  -d "{\\"connection\\":{\\"id\\":\\"$ID\\",\\"label\\":\\"openai gpt-4o\\"},\\"outcome\\":\\"OUTCOME_RATE_LIMITED\\",\\"retryAfter\\":\\"30s\\"}"';
  }

  // ---- wiring --------------------------------------------------------------

  function init() {
    $('login-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const t = $('token-input').value.trim();
      if (!t) return;
      try { sessionStorage.setItem(TOKEN_KEY, t); } catch { /* private mode */ }
      $('token-input').value = '';
      $('login-error').textContent = '';
      start();
    });
    $('signout').addEventListener('click', () => signOut(''));

    $('filter').addEventListener('input', (e) => {
      state.filter = e.target.value;
      render();
    });
    $('filter').addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && e.target.value) {
        e.target.value = '';
        state.filter = '';
        render();
      } else if (e.key === 'ArrowDown') {
        const first = $('rows').firstElementChild;
        if (first) {
          e.preventDefault();
          first.focus();
        }
      }
    });

    for (const b of document.querySelectorAll('#conns th button[data-sort]')) {
      b.addEventListener('click', () => {
        const k = b.dataset.sort;
        if (state.sort.key === k) state.sort.dir = -state.sort.dir;
        else state.sort = { key: k, dir: 1 };
        render();
      });
    }

    const rows = $('rows');
    rows.addEventListener('mouseenter', () => { state.hover = true; });
    rows.addEventListener('mouseleave', () => {
      state.hover = false;
      scheduleRender();
    });
    rows.addEventListener('click', (e) => {
      if (e.target.closest('a[href^="#/c/"]')) return; // the fragment change opens it
      const tr = e.target.closest('tr[data-key]');
      if (tr) openDetail(tr.dataset.key);
    });
    rows.addEventListener('keydown', (e) => {
      const tr = e.target.closest('tr[data-key]');
      if (!tr || e.target !== tr) return;
      if (e.key === 'Enter' || e.key === ' ') {
        e.preventDefault();
        openDetail(tr.dataset.key);
      } else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        e.preventDefault();
        const next = e.key === 'ArrowDown' ? tr.nextElementSibling : tr.previousElementSibling;
        if (next) next.focus();
        else if (e.key === 'ArrowUp') $('filter').focus();
      }
    });

    $('detail-actions').addEventListener('click', (e) => {
      const btn = e.target.closest('button[data-action]');
      if (btn) askConfirm(btn.dataset.action, btn.dataset.key);
    });
    $('detail-close').addEventListener('click', () => $('detail').close());
    $('detail').addEventListener('close', () => {
      // The close event is queued: the view may have been opened again since.
      if ($('detail').open) return;
      const key = state.detailId;
      state.detailId = null;
      if (keyOfHash(location.hash)) history.replaceState(null, '', location.pathname + location.search);
      const row = key && state.rows.get(key);
      if (row && row.el && row.el.isConnected) row.el.focus();
    });
    window.addEventListener('hashchange', followHash);
    $('detail').addEventListener('click', (e) => {
      if (e.target === $('detail')) $('detail').close(); // a click on the backdrop
    });

    $('confirm-form').addEventListener('submit', (e) => {
      e.preventDefault();
      doConfirm();
    });
    $('confirm-cancel').addEventListener('click', () => $('confirm').close());
    $('confirm').addEventListener('close', () => { state.confirm = null; });

    document.addEventListener('keydown', (e) => {
      const typing = e.target.closest && e.target.closest('input, select, textarea, dialog');
      if (e.key === '/' && !typing && !$('board').hidden) {
        e.preventDefault();
        $('filter').focus();
      }
    });
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') refreshList();
    });

    // A connection's URL opens it once its row is in.
    state.wantDetail = keyOfHash(location.hash) || null;
    setInterval(tick, TICK_MS);
    // The stream carries state changes; the counters of a connection move
    // with every report, so re-read the table now and then.
    // Every 2 s for small tenants, 6 s up to 2000 connections, 30 s beyond.
    let ticks = 0;
    setInterval(() => {
      ticks++;
      if (document.visibilityState !== 'visible') return;
      const every = state.rows.size < 200 ? 1 : state.rows.size < 2000 ? 3 : 15;
      if (ticks % every === 0) refreshList();
    }, 2000);

    start();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
