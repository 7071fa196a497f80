// aegis console: the page of one approval link. Everything host-chosen
// is set with textContent, never as HTML.
"use strict";

const $ = (sel, root) => (root || document).querySelector(sel);
function text(el, s) { el.textContent = s == null ? "" : String(s); return el; }
function utc(iso) {
  const d = new Date(iso);
  if (!iso || isNaN(d)) return iso || "";
  return d.toISOString().slice(0, 19).replace("T", " ") + " UTC";
}
function prettyArgs(p) {
  const s = p.arguments || "";
  const whole = new TextEncoder().encode(s).length >= (p.arguments_bytes || 0);
  if (whole && s) {
    try { return JSON.stringify(JSON.parse(s), null, 2); } catch (e) { /* shown as it is */ }
  }
  return s + (whole ? "" : "…");
}

let signer = "";

async function load() {
  const r = await fetch("info");
  const j = await r.json().catch(() => null);
  $("#loading").hidden = true;
  if (!r.ok || !j) {
    text($("#gone"), "This approval cannot be shown (HTTP " + r.status + ").");
    $("#gone").hidden = false;
    return;
  }
  if (j.decided) {
    text($("#result"), j.decided);
    return;
  }
  if (!j.pending) {
    text($("#gone"), j.gone || "This approval is no longer pending.");
    $("#gone").hidden = false;
    return;
  }
  signer = j.signer || "";
  const p = j.pending;
  const c = $("#approval");
  text($("#ask"), "The agent in aegis session " + p.session + " (process " + p.pid + ") asked to call the tool " + p.tool_id +
    (p.principal ? " on behalf of " + p.principal : "") + ". A policy says a human must approve this call before it runs.");
  text($(".tool", c), p.tool_id);
  text($(".args", c), p.arguments_bytes ? prettyArgs(p) : "(none)");
  if (p.arguments_bytes) {
    const cut = new TextEncoder().encode(p.arguments || "").length < p.arguments_bytes;
    text($(".digest", c), p.arguments_bytes + " bytes" + (cut ? " (cut for display)" : "") + " · sha256 " + (p.args_digest || "-"));
  }
  text($(".rule", c), "rule " + (p.matched_rule || "-") + (p.profile ? ", in profile " + p.profile : ""));
  text($(".effect", c), "the agent's next call of " + p.tool_id + " with exactly these arguments runs, once, until " + utc(p.expires_at) + ".");
  text($(".expires", c), utc(p.expires_at) + " (requested " + utc(p.requested_at) + ")");
  text($(".id", c), p.approval_id);
  text($(".session", c), p.session);
  const pass = $(".passphrase", c);
  pass.hidden = !signer;
  if (signer) pass.placeholder = "passphrase of " + signer;
  $(".approve", c).addEventListener("click", () => decide("approve"));
  $(".deny", c).addEventListener("click", () => decide("deny"));
  c.hidden = false;
}

async function decide(op) {
  const c = $("#approval");
  const result = $("#result");
  for (const b of c.querySelectorAll("button")) b.disabled = true;
  result.classList.remove("bad");
  text(result, op === "approve" ? "approving…" : "denying…");
  const body = { op: op };
  const reason = $(".reason", c).value.trim();
  if (op === "deny" && reason) body.reason = reason;
  const pass = $(".passphrase", c);
  if (op === "approve" && signer) {
    body.passphrase = pass.value;
    pass.value = "";
  }
  try {
    const r = await fetch("decide", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const j = await r.json().catch(() => ({ error: "HTTP " + r.status }));
    if (!r.ok) throw new Error(j.error || "HTTP " + r.status);
    text(result, j.message || "done");
    c.classList.add("done");
  } catch (e) {
    result.classList.add("bad");
    text(result, String(e.message || e));
    for (const b of c.querySelectorAll("button")) b.disabled = false;
  }
}

load();
