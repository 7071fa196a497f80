// aegis console: the page. Everything host-chosen is set with
// textContent, never as HTML.
"use strict";

const $ = (sel, root) => (root || document).querySelector(sel);
let offset = 0;          // server clock minus this clock, in ms
let pending = [];
let seen = null;         // approval keys already shown (null: first state)
let transcript = null;   // the open transcript's EventSource
let signer = "";         // the approver key approvals are signed with, "" for none
let commands = new Map(); // session id -> its command, as the sessions list shows it

function text(el, s) { el.textContent = s == null ? "" : String(s); return el; }

function el(tag, cls, s) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (s != null) e.textContent = String(s);
  return e;
}

function key(p) { return (p.host || "") + "/" + p.session + "/" + p.approval_id; }

function connect() {
  const es = new EventSource("/api/events");
  const live = $("#live");
  es.onopen = () => { live.classList.remove("off"); text(live, "live"); };
  es.onerror = () => { live.classList.add("off"); text(live, "reconnecting…"); };
  es.addEventListener("state", (ev) => {
    const msg = JSON.parse(ev.data);
    offset = Date.parse(msg.now) - Date.now();
    render(msg.state);
  });
}

function render(st) {
  signer = st.signer || "";
  renderPending(st.pending || []);
  renderSessions(st.sessions || []);
  renderRecords(st.records);
  renderFleet(st.fleet);
  const notes = $("#notes");
  notes.replaceChildren();
  for (const n of st.errors || []) notes.append(el("li", "err", n));
  for (const n of st.notes || []) notes.append(el("li", "", n));
}

function renderPending(list) {
  pending = list;
  const keys = new Set(list.map(key));
  const box = $("#approvals");
  // Keep the cards of approvals still pending (a half-typed reason
  // survives an update); add the new ones, drop the gone ones.
  for (const card of [...box.children]) {
    if (!keys.has(card.dataset.key)) card.remove();
  }
  const have = new Set([...box.children].map((c) => c.dataset.key));
  const fresh = [];
  for (const p of list) {
    if (have.has(key(p))) continue;
    box.append(card(p));
    if (seen !== null && !seen.has(key(p))) fresh.push(p);
  }
  seen = new Set([...(seen || []), ...keys]);
  const n = list.length;
  const count = $("#pending-count");
  text(count, n);
  count.classList.toggle("hot", n > 0);
  $("#no-pending").hidden = n > 0;
  document.title = (n > 0 ? "(" + n + ") " : "") + "aegis console";
  tick();
  notify(fresh);
}

function prettyArgs(p) {
  const s = p.arguments || "";
  const whole = new TextEncoder().encode(s).length >= (p.arguments_bytes || 0);
  if (whole && s) {
    try { return JSON.stringify(JSON.parse(s), null, 2); } catch (e) { /* shown as it is */ }
  }
  return s + (whole ? "" : "…");
}

function card(p) {
  const c = $("#approval-tpl").content.firstElementChild.cloneNode(true);
  c.dataset.key = key(p);
  c.dataset.expires = p.expires_at || "";
  text($(".tool", c), p.tool_id + (p.principal ? "  by " + p.principal : ""));
  if (p.host) {
    $(".host-dt", c).hidden = false;
    $(".host", c).hidden = false;
    text($(".host", c), p.host);
  }
  text($(".id", c), p.approval_id);
  text($(".session", c), p.session + "  (pid " + p.pid + ")");
  text($(".rule", c), (p.matched_rule || "-") + (p.profile ? "  (profile " + p.profile + ")" : ""));
  text($(".requested", c), utc(p.requested_at));
  text($(".args", c), p.arguments_bytes ? prettyArgs(p) : "(none)");
  if (p.arguments_bytes) {
    const cut = new TextEncoder().encode(p.arguments || "").length < p.arguments_bytes;
    text($(".digest", c), p.arguments_bytes + " bytes" + (cut ? " (cut for display)" : "") + " · sha256 " + (p.args_digest || "-"));
  }
  const pass = $(".passphrase", c);
  pass.hidden = !signer;
  if (signer) pass.placeholder = "passphrase of " + signer;
  $(".approve", c).addEventListener("click", () => decide(c, p, "approve"));
  $(".deny", c).addEventListener("click", () => decide(c, p, "deny"));
  return c;
}

async function decide(c, p, op) {
  const result = $(".result", c);
  for (const b of c.querySelectorAll("button")) b.disabled = true;
  result.classList.remove("bad");
  text(result, op === "approve" ? "approving…" : "denying…");
  const body = { op: op, session: p.session, approval_id: p.approval_id };
  if (p.host) body.host = p.host;
  const reason = $(".reason", c).value.trim();
  if (op === "deny" && reason) body.reason = reason;
  const pass = $(".passphrase", c);
  if (op === "approve" && signer) {
    body.passphrase = pass.value;
    pass.value = "";
  }
  try {
    const r = await fetch("/api/decide", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const j = await r.json().catch(() => ({ error: "HTTP " + r.status }));
    if (!r.ok) throw new Error(j.error || "HTTP " + r.status);
    text(result, j.message || "done");
  } catch (e) {
    result.classList.add("bad");
    text(result, String(e.message || e));
    for (const b of c.querySelectorAll("button")) b.disabled = false;
  }
}

function tick() {
  const now = Date.now() + offset;
  for (const c of $("#approvals").children) {
    const exp = $(".expires", c);
    if (!c.dataset.expires) { text(exp, ""); continue; }
    const left = Math.round((Date.parse(c.dataset.expires) - now) / 1000);
    exp.classList.toggle("gone", left <= 0);
    if (left <= 0) { text(exp, "expired"); continue; }
    const m = Math.floor(left / 60), s = left % 60;
    text(exp, "expires in " + (m > 0 ? m + "m" + String(s).padStart(2, "0") + "s" : s + "s"));
  }
}

function notify(fresh) {
  if (!fresh.length || !("Notification" in window) || Notification.permission !== "granted") return;
  const p = fresh[0];
  const more = fresh.length > 1 ? " and " + (fresh.length - 1) + " more" : "";
  try {
    new Notification("aegis: approval needed", { body: p.tool_id + more, tag: "aegis-approval" });
  } catch (e) { /* some browsers allow notifications only from a service worker */ }
}

function setupNotify() {
  const b = $("#notify");
  if (!("Notification" in window) || Notification.permission !== "default") return;
  b.hidden = false;
  b.addEventListener("click", async () => {
    await Notification.requestPermission();
    b.hidden = Notification.permission === "default";
  });
}

// label names each cell of a table after its column: a narrow window
// shows each row as a card, the name beside each value.
function label(table) {
  const names = [...table.tHead.rows[0].cells].map((th) => th.textContent);
  for (const tr of table.tBodies[0].rows) {
    [...tr.cells].forEach((td, i) => { td.dataset.label = names[i] || ""; });
  }
}

// when is a cell that shows a time, which may break between the date and
// the time of day (nowhere else) when the table needs the room.
function when(iso, mark) {
  const td = el("td", "time");
  const s = utc(iso);
  const i = s.indexOf(" ");
  if (i < 0) return text(td, s);
  td.append(el("span", "", (mark || "") + s.slice(0, i)), " ", el("span", "", s.slice(i + 1)));
  return td;
}

function renderSessions(list) {
  const tbody = $("#sessions tbody");
  tbody.replaceChildren();
  $("#no-sessions").hidden = list.length > 0;
  const open = transcript ? transcript.session : "";
  commands = new Map(list.map((s) => [s.id, s.command]));
  for (let i = list.length - 1; i >= 0; i--) { // newest first
    const s = list[i];
    const tr = el("tr", s.id === open ? "sel" : "");
    tr.dataset.session = s.id;
    const id = el("td", "mono");
    const a = el("a", "sid", s.id);
    a.href = "#session=" + encodeURIComponent(s.id);
    id.append(a);
    // The command in two lines at most; the whole of it is the cell's
    // title, and the transcript's heading when the session is opened.
    const cmd = el("td", "cmd mono");
    cmd.title = s.command;
    cmd.append(el("div", "clamp", s.command));
    const end = s.ended || "";
    tr.append(id, when(s.started), end.startsWith("~") ? when(end.slice(1), "~") : when(end), el("td", "st-" + s.state, s.state),
      el("td", "", s.exit), el("td", "", s.calls), el("td", "", s.refused), el("td", "", s.approvals), cmd);
    tr.addEventListener("click", (ev) => { ev.preventDefault(); location.hash = "session=" + encodeURIComponent(s.id); });
    tbody.append(tr);
  }
  label($("#sessions"));
  showCommand();
}

// showCommand writes the open session's whole command under the
// transcript's heading.
function showCommand() {
  const c = transcript ? commands.get(transcript.session) : undefined;
  const p = $("#transcript-command");
  text(p, c);
  p.hidden = !c;
}

// A count with thin groups: 1 234 567.
function count(n) { return String(n || 0).replace(/\B(?=(\d{3})+(?!\d))/g, "\u202f"); }

// utc writes a time as the console writes every time, whatever this
// browser's zone: 2006-01-02 15:04:05 UTC (console.TimeLayout).
function utc(iso) {
  const d = new Date(iso);
  if (!iso || isNaN(d)) return iso || "";
  return d.toISOString().slice(0, 19).replace("T", " ") + " UTC";
}

function ago(ms) {
  if (ms < 0) return "never";
  if (ms < 1000) return "just now";
  const s = Math.round(ms / 1000);
  if (s < 120) return s + " s ago";
  const m = Math.round(s / 60);
  return m < 120 ? m + " min ago" : Math.round(m / 60) + " h ago";
}

// renderRecords shows each record file with its verify status; the
// section is hidden when the state has no records (a fleet console).
function renderRecords(list) {
  const sec = $("#records-section");
  sec.hidden = list == null;
  if (list == null) return;
  const tbody = $("#records tbody");
  tbody.replaceChildren();
  $("#no-records").hidden = list.length > 0;
  for (const r of list) {
    const tr = el("tr", "");
    const path = el("td", "mono path", r.path);
    if (r.files > 1) path.append(el("div", "sub", r.files + " files (segments and the live file)"));
    const st = el("td", "status");
    const verdict = (r.verdict || "unchecked").toLowerCase();
    st.append(el("span", "badge v-" + verdict, r.verdict || "not checked"));
    const why = r.status && r.verdict && r.status.startsWith(r.verdict) ? r.status.slice(r.verdict.length).replace(/^:? /, "") : r.status;
    if (why) st.append(el("div", "why", why));
    if (r.note) st.append(el("div", "sub warn", r.note));
    const checked = el("td", "when");
    if (r.checked_at) {
      text(checked, "checked " + utc(r.checked_at) + ", " + count(r.lines) + (r.lines === 1 ? " line" : " lines"));
      if (r.changed) checked.append(el("div", "sub", "changed since; checked again shortly"));
    }
    const cp = el("td", "cp");
    if (r.checkpoint) {
      const c = r.checkpoint;
      text(cp, count(c.size) + " lines · root ");
      const root = el("span", "mono", (c.root || "").slice(0, 12) + "…");
      root.title = c.root || "";
      cp.append(root);
      if (c.time) cp.append(document.createTextNode(" · " + utc(c.time)));
      const m = el("div", "sub " + (c.matches ? "ok" : "bad"), (c.matches ? "matches" : "does not match") +
        (c.count > 1 ? " (" + count(c.count) + " checkpoints)" : "") + " · " + c.name.split("/").pop());
      cp.append(m);
    } else if (r.checked_at) {
      text(cp, "none");
    }
    tr.append(path, st, checked, cp);
    tbody.append(tr);
  }
  label($("#records"));
}

// renderFleet shows the hosts of the hub and their mirrors; hidden when
// the state has no fleet (a console of one state directory).
function renderFleet(f) {
  const sec = $("#fleet-section");
  sec.hidden = f == null;
  if (f == null) return;
  text($("#fleet-hub"), f.hub);
  const tbody = $("#fleet tbody");
  tbody.replaceChildren();
  const hosts = f.hosts || [];
  $("#no-hosts").hidden = hosts.length > 0 || !f.checked_at;
  for (const h of hosts) {
    const tr = el("tr", "");
    const host = el("td", "mono", h.host);
    if (h.error) host.append(el("div", "sub bad", h.error));
    if (!h.mirrored) host.append(el("div", "sub warn", "no mirror on the hub"));
    const lag = el("td", h.lag > 0 ? "warn" : "", h.mirrored ? count(h.lag) + (h.lag > 0 ? " behind" : "") : "-");
    tr.append(host, lag, el("td", "", h.mirrored ? ago(h.active_ms) : "-"),
      el("td", "", h.mirrored ? count(h.last_seq) : "-"), h.last_time ? when(h.last_time) : el("td", "", "-"),
      el("td", "", h.mirrored ? count(h.messages) : "-"), el("td", h.pending > 0 ? "hot" : "", h.pending));
    tbody.append(tr);
  }
  label($("#fleet"));
  text($("#fleet-checked"), f.checked_at ? "asked the hub at " + utc(f.checked_at) : "asking the hub…");
}

function openTranscript(id) {
  if (transcript) transcript.es.close();
  transcript = null;
  const sec = $("#transcript-section");
  if (!id) { sec.hidden = true; showCommand(); return; }
  sec.hidden = false;
  text($("#transcript-id"), id);
  const state = $("#transcript-state");
  text(state, "following");
  const pre = $("#transcript");
  pre.replaceChildren();
  const es = new EventSource("/api/transcript?session=" + encodeURIComponent(id));
  transcript = { es: es, session: id };
  es.addEventListener("line", (ev) => {
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.append(document.createTextNode(JSON.parse(ev.data) + "\n"));
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  });
  es.addEventListener("end", () => { text(state, "ended"); es.close(); });
  es.addEventListener("failed", (ev) => { text(state, "failed: " + JSON.parse(ev.data)); es.close(); });
  for (const tr of document.querySelectorAll("#sessions tbody tr")) tr.classList.toggle("sel", tr.dataset.session === id);
  showCommand();
}

function route() {
  const m = /^#session=([0-9A-Za-z]+)$/.exec(location.hash);
  openTranscript(m ? decodeURIComponent(m[1]) : "");
}

document.addEventListener("DOMContentLoaded", () => {
  setupNotify();
  $("#transcript-close").addEventListener("click", () => { history.replaceState(null, "", location.pathname); openTranscript(""); });
  window.addEventListener("hashchange", route);
  route();
  connect();
  setInterval(tick, 1000);
});
