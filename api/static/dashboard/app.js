// binlog-mirror dashboard: polls /position, /lag, /tables, /health/ready and /dashboard/info every
// POLL_MS and reads /ws/events for the live tail. Plain DOM + canvas; no library, no other origin.
"use strict";
(() => {
  const POLL_MS = 2000;
  const WINDOW_MS = 5 * 60 * 1000; // what the charts show
  const HISTORY = 600; // samples kept at most (5 minutes of polls, with room for faster ones)
  const TAIL_KEEP = 500; // changes kept in memory for the tail
  const TAIL_SHOW = 100; // rows rendered
  const TOKEN_KEY = "binlog-mirror.token";

  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let pollTimer = null;
  let pollChain = 0; // a new token starts a new chain; an older one stops at its next turn
  let stopped = false; // waiting for a token
  const history = []; // {t, lag, rows, txns}
  let last = null; // previous {t, rows, txns} for the rates
  let keys = new Map(); // "schema.table" -> primary key columns
  let keysSig = "";

  // ---------- formatting ----------
  const nf = new Intl.NumberFormat();
  const num = (v) => (v === null || v === undefined ? "-" : nf.format(v));
  function bytes(v) {
    if (v === null || v === undefined) return "-";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : String(v)) + " " + units[i];
  }
  function seconds(v) {
    if (v === null || v === undefined) return "unknown";
    if (v < 60) return v.toFixed(1) + " s";
    if (v < 3600) return Math.floor(v / 60) + " min " + Math.round(v % 60) + " s";
    return (v / 3600).toFixed(1) + " h";
  }
  function ago(iso) {
    if (!iso) return "-";
    const s = (Date.now() - Date.parse(iso)) / 1000;
    if (s < 1) return "just now";
    return seconds(s).replace(".0 s", " s") + " ago";
  }
  function when(iso) { return iso ? new Date(iso).toLocaleString() : "-"; }
  function rate(v) { return v === null ? "-" : v < 10 ? v.toFixed(1) : nf.format(Math.round(v)); }
  function text(id, value, title) {
    const el = $(id);
    el.textContent = value === null || value === undefined || value === "" ? "-" : String(value);
    if (title !== undefined) el.title = title || "";
  }
  function badge(id, label, cls) { const el = $(id); el.textContent = label; el.className = "badge " + cls; }
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) for (const [k, v] of Object.entries(props)) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c);
    return e;
  }
  function short(v) {
    const s = v === null ? "NULL" : JSON.stringify(v) ?? String(v);
    return s.length > 40 ? s.slice(0, 39) + "…" : s;
  }

  // ---------- HTTP ----------
  class Unauthorized extends Error {}
  class Refused extends Error {} // 403: no token set on a public address (the detail says what to set)
  async function get(path) {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const r = await fetch(path, { headers, cache: "no-store" });
    if (r.status === 401) throw new Unauthorized(path);
    if (r.status === 503 && path !== "/health/ready") return null; // replicator not started
    if (!r.ok && r.status !== 503) {
      let detail = "";
      try { detail = (await r.json()).detail || ""; } catch (e) { /* not JSON */ }
      const message = path + ": HTTP " + r.status + (detail ? " (" + detail + ")" : "");
      throw r.status === 403 ? new Refused(message) : new Error(message);
    }
    return r.json();
  }

  function askToken(message) {
    stopped = true;
    clearTimeout(pollTimer);
    closeSocket();
    $("login").hidden = false;
    $("main").hidden = true;
    text("token-error", message);
    badge("state", "token needed", "warn");
    $("token").focus();
  }
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token").value.trim();
    $("token").value = "";
    sessionStorage.setItem(TOKEN_KEY, token);
    $("login").hidden = true;
    $("main").hidden = false;
    stopped = false;
    clearTimeout(pollTimer);
    poll(++pollChain);
    openSocket();
  });

  // ---------- polling ----------
  async function poll(chain) {
    if (stopped || chain !== pollChain) return;
    const paths = ["/position", "/lag", "/tables", "/dashboard/info", "/health/ready"];
    const results = await Promise.allSettled(paths.map(get));
    if (results.some((r) => r.status === "rejected" && r.reason instanceof Unauthorized)) {
      askToken(token ? "That token was refused." : "");
      return;
    }
    const [position, lag, tables, info, ready] = results.map((r) => (r.status === "fulfilled" ? r.value : null));
    const failed = results.filter((r) => r.status === "rejected");
    try {
      render(position, lag, tables, info, ready);
      if (results[0].status === "rejected") {
        badge("state", results[0].reason instanceof Refused ? "refused" : "API unreachable", "bad");
      }
      text("updated", failed.length ? "update failed: " + failed[0].reason.message : "updated " + new Date().toLocaleTimeString());
    } finally {
      if (!stopped && chain === pollChain) pollTimer = setTimeout(poll, POLL_MS, chain);
    }
  }

  function render(position, lag, tables, info, ready) {
    renderState(position, info, ready);
    if (position) renderPosition(position);
    renderLag(lag);
    sample(position, lag);
    if (tables) renderTables(tables.tables, info ? info.resyncs : []);
  }

  function renderState(p, info, ready) {
    if (!p) { badge("state", "starting", "warn"); text("state-long", "replicator not started"); return; }
    const good = { streaming: "ok", resyncing: "info", starting: "warn", reconnecting: "warn", stopped: "warn", failed: "bad" };
    badge("state", p.state, good[p.state] || "info");
    if (info) {
      badge("role", info.leader ? "leader" : "standby", info.leader ? "ok" : "warn");
      text("state-long", p.state + " since " + when(info.state_since) + (info.leader ? ", holding the writer lease" : ", standby (another instance holds the writer lease)"));
      text("redis-url", info.redis_url + (info.redis_reachable ? "" : " (unreachable)"));
    }
    if (ready) {
      badge("ready", ready.ready ? "ready" : "not ready", ready.ready ? "ok" : "bad");
      text("reasons", ready.reasons && ready.reasons.length ? ready.reasons.join("; ") : "nothing: ready");
    }
    const s = p.source;
    text("source", [s.flavour, s.version, s.server_id !== null ? "server_id " + s.server_id : null,
      s.server_uuid ? "server_uuid " + s.server_uuid : null,
      s.gtid_domain_id !== null && s.gtid_domain_id !== undefined ? "GTID domain " + s.gtid_domain_id : null,
      s.connected ? "connected" : "not connected"].filter(Boolean).join(", "));
    text("source-url", s.url);
    const f = p.failovers;
    text("failover", f && f.count ? f.count + " since start, last " + when(f.last_time) + " (" + ago(f.last_time) + "): " + f.last : "none since start");
  }

  function renderPosition(p) {
    const a = p.applied;
    text("applied-pos", a && a.file ? a.file + ":" + a.pos : "nothing applied yet");
    text("applied-time", a ? when(a.time) : "-");
    text("applied-gtid", a ? a.gtid_set || "(not in GTID mode)" : "-");
    text("received-pos", p.received_file ? p.received_file + ":" + p.received_pos : "-");
    text("received-gtid", p.received_gtid);
    text("last-event", p.last_event_time ? when(p.last_event_time) + " (" + ago(p.last_event_time) + ")" : "-");
    const e = p.errors;
    text("err-count", num(e.count));
    text("err-last", e.last || "none");
    text("err-time", e.last_time ? when(e.last_time) + " (" + ago(e.last_time) + ")" : "-");
    text("err-retriable", e.retriable === null ? "-" : e.retriable ? "yes (retried with backoff)" : "no");
    text("totals", num(p.transactions_applied) + " transactions, " + num(p.rows_applied) + " rows applied since start");
  }

  function renderLag(l) {
    if (!l) { text("lag-seconds", "-"); text("lag-bytes", "-"); return; }
    text("lag-seconds", seconds(l.seconds_behind));
    $("lag-seconds").classList.toggle("bad", l.over_limit);
    text("lag-bytes", bytes(l.bytes_behind));
    text("lag-waiting", num(l.transactions_waiting) + " transactions (" + num(l.rows_waiting) + " rows) read, not yet applied; limit " + l.max_lag_seconds + " s");
  }

  function sample(p, l) {
    const t = Date.now();
    let rows = null, txns = null;
    if (p && last && t > last.t) {
      rows = Math.max(0, (p.rows_applied - last.rows) * 1000 / (t - last.t));
      txns = Math.max(0, (p.transactions_applied - last.txns) * 1000 / (t - last.t));
    }
    if (p) last = { t, rows: p.rows_applied, txns: p.transactions_applied };
    history.push({ t, lag: l ? l.seconds_behind : null, rows, txns });
    while (history.length > HISTORY || (history.length && history[0].t < t - WINDOW_MS)) history.shift();
    text("rows-rate", rate(rows));
    text("txn-rate", rate(txns));
    drawCharts();
  }

  // ---------- charts (canvas) ----------
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }
  function drawChart(canvas, times, series, unit) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (!w || !h) return;
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const style = getComputedStyle(document.documentElement);
    const left = 44, right = 6, top = 6, bottom = 18;
    const pw = w - left - right, ph = h - top - bottom, now = Date.now();
    let max = 0, points = 0;
    for (const s of series) for (const v of s.values) if (v !== null) { max = Math.max(max, v); points++; }
    const ymax = niceMax(max);
    g.font = "11px system-ui, sans-serif";
    g.fillStyle = style.getPropertyValue("--muted");
    g.strokeStyle = style.getPropertyValue("--line");
    g.lineWidth = 1;
    g.textAlign = "right"; g.textBaseline = "middle";
    for (let i = 0; i <= 4; i++) {
      const y = top + ph - (ph * i) / 4;
      g.beginPath(); g.moveTo(left, Math.round(y) + 0.5); g.lineTo(left + pw, Math.round(y) + 0.5); g.stroke();
      const v = (ymax * i) / 4;
      g.fillText((v >= 1000 ? nf.format(v) : String(+v.toFixed(2))) + unit, left - 4, y);
    }
    g.textBaseline = "top";
    g.textAlign = "left"; g.fillText("-5 min", left, top + ph + 4);
    g.textAlign = "right"; g.fillText("now", left + pw, top + ph + 4);
    for (const s of series) {
      g.strokeStyle = style.getPropertyValue(s.color); g.lineWidth = 2; g.beginPath();
      let pen = false;
      s.values.forEach((v, i) => {
        if (v === null) { pen = false; return; }
        const x = left + pw - (Math.min(WINDOW_MS, now - times[i]) * pw) / WINDOW_MS;
        const y = top + ph - (Math.min(v, ymax) / ymax) * ph;
        if (pen) g.lineTo(x, y); else g.moveTo(x, y);
        pen = true;
      });
      g.stroke();
    }
    canvas.dataset.points = String(points);
    canvas.dataset.max = String(max);
  }
  function drawCharts() {
    const lags = history.map((h) => h.lag);
    const rows = history.map((h) => h.rows), txns = history.map((h) => h.txns), times = history.map((h) => h.t);
    drawChart($("lag-chart"), times, [{ values: lags, color: "--c1" }], "s");
    drawChart($("rate-chart"), times, [{ values: rows, color: "--c1" }, { values: txns, color: "--c2" }], "");
    const lastOf = (a) => { for (let i = a.length - 1; i >= 0; i--) if (a[i] !== null) return a[i]; return null; };
    $("lag-chart").setAttribute("aria-label", "Lag in seconds, last 5 minutes; now " + seconds(lastOf(lags)));
    $("rate-chart").setAttribute("aria-label", "Applied rows per second, last 5 minutes; now " + rate(lastOf(rows)) + " rows/s, " + rate(lastOf(txns)) + " transactions/s");
  }
  window.addEventListener("resize", drawCharts);

  // ---------- tables ----------
  function shapeText(s) { // a [table] section: its fields' count, what it leaves out, its renames,
    if (!s) return "-";     // its key template and indexes with how many rows/entries they hold
    const counted = (n, what) => (n === null || n === undefined ? "" : " (" + num(n) + " " + what + ")");
    const renames = Object.entries(s.fields).filter(([c, f]) => c !== f).map(([c, f]) => c + "→" + f);
    const parts = [(s.key ? s.key + counted(s.copies, "rows") + ": " : "") + Object.keys(s.fields).length + " fields"];
    if (s.excluded.length) parts.push("without " + s.excluded.join(", "));
    if (s.hidden && s.hidden.length) parts.push("hidden " + s.hidden.join(", "));
    if (renames.length) parts.push(renames.join(", "));
    if (s.indexes && s.indexes.length) parts.push(s.indexes.map((i) => i.kind + " " + i.key + counted(i.entries, "entries")).join(", "));
    if (s.ttl) parts.push("ttl " + s.ttl);
    return parts.join("; ");
  }

  function renderTables(list, resyncs) {
    keys = new Map(list.map((t) => [t.schema + "." + t.table, t.primary_key]));
    const byName = new Map((resyncs || []).map((r) => [r.schema + "." + r.table, r.resync]));
    const body = el("tbody");
    for (const t of list) {
      const name = t.schema + "." + t.table;
      const mirrored = t.mirrored ? "yes" : "skipped: no usable key";
      const key = t.primary_key.length ? t.primary_key.join(", ") + (t.key_source === "unique" ? " (unique)" : "") : "none";
      const r = byName.get(name);
      const resync = el("td");
      if (r) {
        const bar = el("progress", { max: String(r.rows_total || 1), "aria-label": "resync of " + name });
        bar.value = r.rows_total ? Math.min(r.rows_done, r.rows_total) : 0;
        if (!r.rows_total) bar.removeAttribute("value");
        resync.append(bar, " " + num(r.rows_done) + " / " + (r.rows_total === null ? "?" : num(r.rows_total)));
        resync.title = r.reason;
      } else resync.textContent = "-";
      const shape = el("td", { class: "mono", text: shapeText(t.shape) });
      if (t.shape) shape.title = 'section [table."' + t.shape.section + '"], fingerprint ' + t.shape.fingerprint;
      const changed = el("td", { text: ago(t.last_change_time) });
      if (t.last_change_time) changed.title = when(t.last_change_time);
      const ra = t.rows_applied;
      body.append(el("tr", { "data-table": name },
        el("th", { scope: "row", class: "mono", text: name }),
        el("td", { text: mirrored }), el("td", { class: "mono", text: key }),
        el("td", { class: "num", text: num(ra.insert) }), el("td", { class: "num", text: num(ra.update) }),
        el("td", { class: "num", text: num(ra.delete) }), el("td", { class: "num", text: num(ra.skipped) }),
        changed, resync, shape));
    }
    if (!list.length) body.append(el("tr", null, el("td", { colspan: "10", class: "muted", text: "no tables yet" })));
    $("tables").tBodies[0].replaceWith(body);
    const sig = JSON.stringify([...keys]);
    if (sig !== keysSig && !renderQueued && !paused) { renderQueued = true; requestAnimationFrame(renderTail); }
    keysSig = sig; // the tail's key column reads `keys`
  }

  // ---------- live tail (websocket) ----------
  const tail = []; // newest last
  let ws = null, stream = null, lastSeq = null, retry = 0, reconnectTimer = null;
  let paused = false, unseen = 0, renderQueued = false;

  function openSocket() {
    if (stopped) return;
    const q = new URLSearchParams({ batch: "1" });
    if (lastSeq !== null) { q.set("after", String(lastSeq)); if (stream) q.set("stream", stream); }
    if (token) q.set("token", token); // browsers cannot set headers here; the server redacts it in logs
    const url = new URL("/ws/events?" + q, location.href); // same origin as the page
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    ws = new WebSocket(url);
    text("tail-status", "connecting");
    ws.onmessage = (ev) => {
      const m = JSON.parse(ev.data);
      if (m.type === "subscribed") {
        stream = m.stream; retry = 0;
        text("tail-status", "live");
      } else if (m.type === "changes") m.changes.forEach(add);
      else if (m.type === "change") add(m);
      else if (m.type === "gap") add(m);
    };
    ws.onclose = (ev) => {
      ws = null;
      if (stopped) return;
      if (ev.code === 4401) { askToken("That token was refused."); return; }
      if (ev.code === 1012) { lastSeq = null; stream = null; }
      const delay = Math.min(30000, 1000 * 2 ** retry++);
      text("tail-status", "disconnected (" + ev.code + (ev.reason ? ": " + ev.reason : "") + "); retrying in " + Math.round(delay / 1000) + " s");
      reconnectTimer = setTimeout(openSocket, delay);
    };
  }
  function closeSocket() {
    clearTimeout(reconnectTimer);
    if (ws) { const s = ws; ws = null; s.onclose = null; s.close(1000); }
  }
  function add(item) {
    if (item.type !== "gap") lastSeq = item.seq;
    tail.push(item);
    if (tail.length > TAIL_KEEP) tail.splice(0, tail.length - TAIL_KEEP);
    if (paused) { unseen++; text("tail-status", "paused, " + num(unseen) + " new"); return; }
    if (!renderQueued) { renderQueued = true; requestAnimationFrame(renderTail); }
  }
  function matcher() {
    const f = $("tail-filter").value.trim();
    if (!f) return () => true;
    if (/[*?[]/.test(f)) {
      const re = new RegExp("^" + f.replace(/[.+^${}()|\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".") + "$");
      return (name) => re.test(name);
    }
    return (name) => name.includes(f);
  }
  function changed(c) {
    if (c.op === "delete") return "(row deleted)";
    const after = c.after || {}, before = c.before || {};
    const cols = Object.keys(after).filter((k) => c.op === "insert" || !(k in before) || JSON.stringify(before[k]) !== JSON.stringify(after[k]));
    if (!cols.length) return "(no column changed)";
    return cols.map((k) => k + "=" + short(after[k])).join(", ");
  }
  function keyOf(c) {
    const pk = keys.get(c.schema + "." + c.table);
    const row = c.after || c.before || {};
    if (!pk || !pk.length) return "-";
    return pk.map((k) => short(row[k])).join(", ");
  }
  function renderTail() {
    renderQueued = false;
    if (paused) return;
    const match = matcher();
    const body = el("tbody");
    let n = 0;
    for (let i = tail.length - 1; i >= 0 && n < TAIL_SHOW; i--) {
      const c = tail[i];
      if (c.type === "gap") {
        body.append(el("tr", { class: "gap" }, el("td", { colspan: "6", text: "gap: changes " + c.from_seq + " to " + (c.to_seq === null ? "?" : c.to_seq) + " were missed (" + c.reason + ")" })));
        n++;
        continue;
      }
      const name = c.schema + "." + c.table;
      if (!match(name)) continue;
      body.append(el("tr", { "data-seq": String(c.seq) },
        el("td", { class: "num", text: String(c.seq) }),
        el("td", { text: c.ts ? new Date(c.ts * 1000).toLocaleTimeString() : "-" }),
        el("td", { class: "op op-" + c.op, text: c.op }),
        el("td", { class: "mono", text: name }),
        el("td", { class: "mono", text: keyOf(c) }),
        el("td", { class: "mono wrap", text: changed(c) })));
      n++;
    }
    if (!n) body.append(el("tr", null, el("td", { colspan: "6", class: "muted", text: tail.length ? "no change matches the filter" : "waiting for changes" })));
    $("tail").tBodies[0].replaceWith(body);
  }
  $("tail-filter").addEventListener("input", () => requestAnimationFrame(renderTail));
  $("tail-pause").addEventListener("click", () => {
    paused = !paused;
    $("tail-pause").setAttribute("aria-pressed", String(paused));
    $("tail-pause").textContent = paused ? "Resume" : "Pause";
    if (!paused) { unseen = 0; text("tail-status", ws ? "live" : "disconnected"); renderTail(); }
    else text("tail-status", "paused");
  });

  renderTail();
  poll(pollChain);
  openSocket();
})();
