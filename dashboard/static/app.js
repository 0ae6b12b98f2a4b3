// captchaq dashboard: renders the snapshots /api/events sends, and sends
// the admin's changes as JSON POSTs with the page's token and the operator's
// NATS credentials. Everything shown goes through textContent: nothing the
// stream holds is ever parsed as HTML.
"use strict";

const csrf = document.querySelector('meta[name="csrf"]').content;
const readOnly = document.querySelector('meta[name="read-only"]').content === "true";
const colors = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563"];
const methodColor = {};
let last = null;

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") e.className = v;
    else if (k === "onclick") e.addEventListener("click", v);
    else if (k === "data") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return e;
}

function td(v, cls) { return el("td", cls ? { class: cls } : {}, v); }

// fill replaces a table's rows, unless they would look the same: rows that
// stay put keep their nodes, so a click on one of their buttons is never
// lost to a redraw.
function fill(tableId, rows, emptyText) {
  const body = document.querySelector("#" + tableId + " tbody");
  const cols = document.querySelectorAll("#" + tableId + " thead th").length;
  if (!rows.length) rows = [el("tr", { class: "empty" }, el("td", { colSpan: cols }, emptyText))];
  const sig = rows.map(r => r.outerHTML + (r.querySelector("button") ? "|" + String(r.querySelector("button").disabled) : "")).join("");
  if (body.dataset.sig === sig) return;
  body.dataset.sig = sig;
  body.replaceChildren(...rows);
}

function clock(iso) {
  if (!iso || iso.startsWith("0001")) return "-";
  return new Date(iso).toLocaleTimeString();
}

function age(fromISO, now) {
  if (!fromISO || fromISO.startsWith("0001")) return "-";
  return dur((now - new Date(fromISO)) / 1000);
}

function dur(s) {
  if (s < 0) s = 0;
  if (s < 1) return Math.round(s * 1000) + "ms";
  if (s < 60) return s.toFixed(1) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + Math.round(s % 60) + "s";
  return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
}

function taskLink(id) { return el("a", { onclick: () => showTask(id), title: "show the task's trace", data: { task: id } }, id); }

function adminButton(label, onclick) {
  const b = el("button", { class: "admin", onclick }, label);
  b.disabled = readOnly;
  return b;
}

function render(s) {
  last = s;
  const now = new Date(s.at);
  const st = s.stats;
  fill("queues", (st.queues || []).map(q => {
    const paused = q.paused;
    return el("tr", { data: { lane: q.lane, priority: q.priority } },
      td(q.lane), td(q.priority), td(q.queued, "num"), td(q.solving, "num"), td(q.retrying, "num"),
      td(q.oldest_queued_seconds > 0 ? dur(q.oldest_queued_seconds) : "-"), td(q.lane_limit > 0 ? q.lane_limit : "no limit"),
      td(paused ? "paused" : "taking tasks", paused ? "paused" : ""),
      el("td", {}, q.priority === "high" ? adminButton(paused ? "resume lane" : "pause lane",
        () => change("/api/lane", { lane: q.lane, action: paused ? "resume" : "pause" })) : ""));
  }), "no queues");
  const plan = st.plan_threads > 0
    ? `solving now: ${st.solving} of ${st.plan_threads} plan threads (${Math.round(100 * st.solving / st.plan_threads)}%)`
    : `solving now: ${st.solving} (no plan-wide thread quota)`;
  document.getElementById("plan").textContent = `${plan}; waiting to retry: ${st.retrying}; last hour: solved ${st.solved}, dead ${st.dead}` +
    (st.solved > 0 ? `, ${st.solved_per_minute.toFixed(1)} solved/min while solving` : "");

  fill("workers", (st.workers || []).map(w => el("tr", {},
    td(w.name), td(w.host || "-"), td(w.threads, "num"), td(w.in_use, "num"), td(age(w.at, now) + " ago"),
    td(w.stopped ? "stopped" : "running", w.stopped ? "dead" : "solved"))), "no worker seen in the last 15s");

  const methods = Object.keys(st.by_method || {}).sort();
  methods.forEach(m => { if (!(m in methodColor)) methodColor[m] = colors[Object.keys(methodColor).length % colors.length]; });
  fill("methods", methods.map(m => {
    const x = st.by_method[m];
    return el("tr", {}, td(m), td(x.solved, "num"), td(x.dead, "num"), td(x.p50_seconds.toFixed(1) + "s", "num"), td(x.p95_seconds.toFixed(1) + "s", "num"));
  }), "nothing solved in the last hour");
  chart(s.outcomes, now);

  fill("tasks", s.tasks.map(t => el("tr", { data: { task: t.id } },
    el("td", {}, taskLink(t.id)), td(t.lane), td(t.priority), td(t.canceled ? t.status + " (canceled)" : t.status, t.status),
    td(t.method || "-"), td(t.host || "-"), td(t.attempts, "num"), td(t.last_code || "-"), td(clock(t.submitted)), td(t.worker || "-"),
    el("td", {}, t.canceled ? "" : adminButton("cancel", () => change("/api/cancel", { id: t.id }))))), "nothing waits or runs");

  fill("outcomes", s.outcomes.map(o => el("tr", { data: { task: o.id } },
    el("td", {}, taskLink(o.id)), td(o.status, o.status), td(o.method || "-"), td(o.attempts, "num"),
    td(o.solve_seconds ? o.solve_seconds.toFixed(1) : "", "num"), td([o.reason, o.error, o.detail].filter(Boolean).join(" "), "detail"))),
    "no outcome in the last 30 minutes");

  fill("dead", s.dead.map(d => el("tr", { data: { task: d.id, seq: d.seq } },
    el("td", {}, taskLink(d.id)), td(d.method || "-"), td(d.host || "-"), td(d.reason, "dead"), td(d.error || "-"), td(d.detail || "", "detail"),
    td(d.attempts, "num"), td(new Date(d.dead_at).toISOString().replace(".000", "")), td(d.replayed ? "yes" : "no"),
    el("td", {}, d.replayed ? "" : adminButton("replay", () => change("/api/replay", { id: d.id }))))), "no dead letters");

  const live = document.getElementById("live");
  live.textContent = s.error ? "error: " + s.error : "live " + now.toLocaleTimeString();
  live.className = "badge " + (s.error ? "off" : "on");
}

function chart(outcomes, now) {
  const svg = document.getElementById("chart");
  const ns = "http://www.w3.org/2000/svg";
  const W = 600, H = 180, L = 36, B = 18;
  const pts = outcomes.filter(o => o.status === "solved" && o.solve_seconds > 0 && o.solved_at);
  const span = 30 * 60 * 1000;
  const maxY = Math.max(1, ...pts.map(o => o.solve_seconds));
  const kids = [];
  const text = (x, y, s, anchor) => { const t = document.createElementNS(ns, "text"); t.setAttribute("x", x); t.setAttribute("y", y); if (anchor) t.setAttribute("text-anchor", anchor); t.textContent = s; return t; };
  const line = (x1, y1, x2, y2) => { const l = document.createElementNS(ns, "line"); for (const [k, v] of Object.entries({ x1, y1, x2, y2 })) l.setAttribute(k, v); l.setAttribute("stroke", "#e5e7eb"); return l; };
  for (let i = 0; i <= 4; i++) {
    const y = H - B - (H - B - 8) * i / 4;
    kids.push(line(L, y, W - 4, y), text(L - 4, y + 3, (maxY * i / 4).toFixed(maxY < 4 ? 1 : 0) + "s", "end"));
  }
  kids.push(text(L, H - 4, "-30 min"), text(W - 4, H - 4, "now", "end"));
  for (const o of pts) {
    const x = L + (W - 4 - L) * (1 - (now - new Date(o.solved_at)) / span);
    if (x < L) continue;
    const c = document.createElementNS(ns, "circle");
    c.setAttribute("cx", x.toFixed(1));
    c.setAttribute("cy", (H - B - (H - B - 8) * o.solve_seconds / maxY).toFixed(1));
    c.setAttribute("r", 3);
    c.setAttribute("fill", methodColor[o.method] || colors[colors.length - 1]);
    const title = document.createElementNS(ns, "title");
    title.textContent = `${o.id}: ${o.method} in ${o.solve_seconds.toFixed(1)}s`;
    c.append(title);
    kids.push(c);
  }
  svg.replaceChildren(...kids);
  const legend = document.getElementById("legend");
  legend.replaceChildren(...Object.entries(methodColor).map(([m, c]) => { const i = el("i"); i.style.background = c; return el("span", {}, i, m); }));
}

function notice(text, isError) {
  document.getElementById("notice").replaceChildren(el("div", { class: "msg" + (isError ? " error" : ""), id: "notice-msg" }, text));
}

async function change(path, body) {
  const user = document.getElementById("user").value;
  const password = document.getElementById("password").value;
  if (!user) { notice("sign in with the admin's NATS user and password first", true); return; }
  let res, out;
  try {
    res = await fetch(path, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Captchaq-CSRF": csrf, "Authorization": "Basic " + btoa(user + ":" + password) },
      body: JSON.stringify(body),
    });
    out = await res.json();
  } catch (e) {
    notice("request failed: " + e, true);
    return;
  }
  if (res.ok) notice(out.ok, false);
  else notice(out.error || res.statusText, true);
}

async function showTask(id) {
  let res, out;
  try {
    res = await fetch("/api/task?id=" + encodeURIComponent(id));
    out = await res.json();
  } catch (e) {
    notice("request failed: " + e, true);
    return;
  }
  if (!res.ok) { notice(out.error || res.statusText, true); return; }
  const panel = document.getElementById("task-panel");
  document.getElementById("task-id").textContent = id;
  const t = out.task;
  const parts = [t.method && t.host ? `${t.method} on ${t.host}` : t.method || t.host,
    t.lane && `${t.lane} lane`, t.priority && `${t.priority} priority`, `${t.attempts} attempt(s)`, t.last_code && `last ${t.last_code}`];
  document.getElementById("task-state").textContent = `${t.status}${t.canceled ? " (canceled)" : ""}: ` + parts.filter(Boolean).join(", ");
  fill("trace", (out.trace || []).map(e => el("tr", {},
    td(new Date(e.at).toISOString()), td(e.kind), td(e.attempt || ""), td(e.worker || e.client || ""), td(e.code || ""), td(e.reason || ""),
    td(e.delay ? dur(e.delay / 1e9) : ""), td(e.detail || "", "detail"))), "no steps");
  panel.hidden = false;
  panel.scrollIntoView({ block: "nearest" });
}

document.getElementById("search").addEventListener("submit", ev => {
  ev.preventDefault();
  const id = document.getElementById("search-id").value.trim();
  if (id) showTask(id);
});
document.getElementById("signin").addEventListener("submit", ev => ev.preventDefault());
document.getElementById("task-close").addEventListener("click", () => { document.getElementById("task-panel").hidden = true; });
document.getElementById("purge").addEventListener("click", () => {
  if (confirm("Delete every dead letter? Their tasks' event logs stay for the audit.")) change("/api/purge", {});
});
document.getElementById("purge").disabled = readOnly;
document.getElementById("user").addEventListener("input", () => {
  const u = document.getElementById("user").value;
  document.getElementById("who").textContent = u ? `changes as NATS user ${u}` : "read-only: sign in as the admin to replay, purge, cancel or pause";
});

const events = new EventSource("/api/events");
events.addEventListener("snapshot", ev => render(JSON.parse(ev.data)));
events.addEventListener("error", () => {
  const live = document.getElementById("live");
  live.textContent = "reconnecting…";
  live.className = "badge off";
});
