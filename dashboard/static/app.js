// captchaq dashboard: renders the snapshots /api/events sends (queues,
// workers, solve times, the last hour), pages and filters the lists
// (/api/tasks, /api/outcomes, /api/dead) and the server page (/api/servers:
// the NATS server, its streams and store, the workers), shows a task's
// trace beside them,
// and sends the admin's changes as JSON POSTs with the page's token and the
// operator's NATS credentials, checked when the operator signs in.
// Everything shown goes through textContent: nothing the stream holds is
// ever parsed as HTML.
"use strict";

const csrf = document.querySelector('meta[name="csrf"]').content;
const readOnly = document.querySelector('meta[name="read-only"]').content === "true";
// On a server without users any name signs in: the page says so.
const noUsers = document.querySelector('meta[name="no-users"]').content === "true";
const $ = id => document.getElementById(id);
let signed = null; // {user, password} once the dashboard has checked them

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
// lost to a redraw. Whether the admin's buttons work is not part of the
// look: syncButtons sets it on the rows in place.
function fill(body, rows, emptyText, cols) {
  if (!rows.length) rows = [el("tr", { class: "empty" }, el("td", { colSpan: cols }, emptyText))];
  const sig = rows.map(r => r.outerHTML).join("");
  if (body.dataset.sig === sig) return;
  body.dataset.sig = sig;
  body.replaceChildren(...rows);
  body.querySelectorAll("button.admin").forEach(syncButton);
}
function fillTable(id, rows, emptyText) {
  fill(document.querySelector("#" + id + " tbody"), rows, emptyText, document.querySelectorAll("#" + id + " thead th").length);
}

function isZero(iso) { return !iso || iso.startsWith("0001"); }
// stampCell is a list's time of day for what happened in the last 24 hours
// (a time names one moment in them, across midnight too) and its date for
// what is older; the cell's title holds both. A date beside the time broke
// each row of a narrow list over a third line just after midnight (CI's
// TestDashboardAtScale, at 00:0x), while a date alone or a time alone is
// never wider than the time was by day. A time ahead of the page's clock
// on the page's next day names its date (TestATimeAheadOfThePageAcross-
// MidnightNamesItsDate).
function stampCell(iso) {
  if (isZero(iso)) return td("-", "when");
  const d = new Date(iso), now = new Date();
  const date = d.toLocaleDateString(undefined, d.getFullYear() === now.getFullYear() ? { month: "short", day: "numeric" } : { year: "numeric", month: "short", day: "numeric" });
  const time = d.toLocaleTimeString();
  // A time ahead of the page's clock (its clock behind the server's or a
  // worker's) is a time only on the page's own day: on its next day the
  // time would read as yesterday's.
  const ago = now - d, recent = ago < 864e5 && (ago >= 0 || d.toDateString() === now.toDateString());
  return el("td", { class: "when", title: date + " " + time }, recent ? time : date);
}
function age(fromISO, now) { return isZero(fromISO) ? "-" : dur((now - new Date(fromISO)) / 1000); }
function dur(s) {
  if (s < 0) s = 0;
  if (s < 1) return Math.round(s * 1000) + "ms";
  if (s < 60) return s.toFixed(1) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + Math.round(s % 60) + "s";
  return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
}

function taskLink(id) { return el("a", { onclick: () => showTask(id), title: "show the task's trace", data: { task: id } }, id); }

// Admin buttons work once the operator has signed in.
function adminButton(label, onclick, cls) {
  return el("button", { class: "admin" + (cls ? " " + cls : ""), onclick, type: "button" }, label);
}
function syncButton(b) {
  b.disabled = readOnly || !signed;
  b.title = readOnly ? "this dashboard is read-only" : signed ? "" : "sign in as the admin first";
}
function syncButtons() { document.querySelectorAll("button.admin").forEach(syncButton); }

// ---- the snapshot: queues, workers, methods, history ----

// workerState is a worker's state cell: stopped, running, or running while
// its solving service does not answer, since when and with how many of its
// captchas held there (WorkerInfo.ServiceState says the same in the CLI).
function workerState(w) {
  if (w.stopped) return td("stopped", "dead");
  if (w.service_down_since) {
    return td(`running; service unreachable since ${new Date(w.service_down_since).toISOString().replace(/\.\d+Z$/, "Z")}` +
      ` (${w.held_at_service || 0} captchas held at the service)`, "dead");
  }
  return td("running", "solved");
}

// outage is the page's banner while any worker alive says its solving
// service does not answer: how many workers, since when (the earliest),
// what failed last, and the captchas the service holds of them, whose
// answers wait for it to come back (WorkerInfo.ServiceState, per worker).
function outage(workers) {
  const running = workers.filter(w => !w.stopped);
  const down = running.filter(w => w.service_down_since);
  const banner = $("outage");
  if (!down.length) { banner.hidden = true; banner.replaceChildren(); return; }
  const since = new Date(Math.min(...down.map(w => new Date(w.service_down_since))));
  const held = down.reduce((n, w) => n + (w.held_at_service || 0), 0);
  const text = `Solving service unreachable for ${down.length} of ${running.length} worker(s) since ` +
    `${since.toISOString().replace(/\.\d+Z$/, "Z")}: ${held} captcha(s) held at the service; ` +
    "they submit nothing until it answers again" + (down[0].service_down ? ` (${down[0].service_down})` : "");
  if (banner.textContent !== text) banner.replaceChildren(el("strong", {}, "Service down. "), text);
  banner.hidden = false;
}

// laneState is a queue's state cell: taking tasks, or paused, with how
// many of its waiting tasks reach their deadline before the pause ends
// (QueueStats.DeadlinesInPause; `captchaq stats` warns of the same).
function laneState(q, now) {
  if (!q.paused) return td("taking tasks", "state");
  if (!q.deadlines_in_pause) return td("paused", "state paused");
  const first = new Date(q.first_deadline);
  const when = first > now ? "the first in " + dur((first - now) / 1000) : "the first " + dur((now - first) / 1000) + " ago";
  return td(`paused: ${q.deadlines_in_pause} deadlines pass before it resumes (${when})`, "state paused");
}

// spendTable shows what each provider was paid for each producer's solves
// in the last hour, the rows of `captchaq stats` (Stats.Spend) and a total
// per provider; the section shows only when workers solve through
// providers (worker --providers).
function spendTable(rows) {
  $("spend-section").hidden = !rows.length;
  const totals = new Map();
  for (const r of rows) {
    const t = totals.get(r.provider) || { solves: 0, plan_solves: 0, cost: 0 };
    t.solves += r.solves; t.plan_solves += r.plan_solves; t.cost += r.cost;
    totals.set(r.provider, t);
  }
  const money = x => String(Math.round(x * 1e6) / 1e6);
  const row = (p, who, r, cls) => el("tr", cls ? { class: cls } : {}, td(p), td(who), td(r.solves, "num"), td(r.plan_solves, "num"), td(money(r.cost), "num"));
  fillTable("spend", [...rows.map(r => row(r.provider, r.producer || "(unnamed)", r)),
    ...[...totals].map(([p, t]) => row(p, "total", t, "total"))], "nothing solved through providers in the last hour");
}

// render shows a snapshot: one of the events (live), or the one the page
// came with (loaded), shown until the first event arrives.
function render(s, loaded) {
  const now = new Date(s.at);
  const st = s.stats;
  fillTable("queues", (st.queues || []).map(q => el("tr", { data: { lane: q.lane, priority: q.priority } },
    td(q.lane), td(q.priority), td(q.queued, "num"), td(q.solving, "num"), td(q.retrying, "num"),
    td(q.oldest_queued_seconds > 0 ? dur(q.oldest_queued_seconds) : "-"), td(q.lane_limit > 0 ? q.lane_limit : "no limit"),
    laneState(q, now),
    el("td", { class: "actions" }, adminButton(q.paused ? "resume lane " + q.lane : "pause lane " + q.lane,
      () => change("/api/lane", { lane: q.lane, action: q.paused ? "resume" : "pause" }))))), "no queues");
  const plan = st.plan_threads > 0
    ? `solving now: ${st.solving} of ${st.plan_threads} plan threads (${Math.round(100 * st.solving / st.plan_threads)}%)`
    : `solving now: ${st.solving} (no plan-wide thread quota)`;
  $("plan").textContent = `${plan}; waiting to retry: ${st.retrying}; last hour: solved ${st.solved}, dead ${st.dead}` +
    (st.dead_over_budget > 0 ? ` (${st.dead_over_budget} over a budget: BUDGET_EXCEEDED)` : "") +
    (st.solved > 0 ? `, ${st.solved_per_minute.toFixed(1)} solved/min while solving` : "");

  // A stopped worker's last heartbeat stays listed until it expires; its
  // threads count among none in use (Stats.WorkersAlive, ThreadsInUse).
  fillTable("workers", (st.workers || []).map(w => el("tr", {},
    td(w.name), td(w.host || "-"), td(w.threads, "num"), td(w.stopped ? "-" : w.in_use, "num"), td(age(w.at, now) + " ago"),
    workerState(w))), "no worker seen in the last 15s");
  const stopped = (st.workers || []).length - st.workers_alive;
  $("workers-summary").textContent = `alive: ${st.workers_alive}` +
    (st.workers_alive ? `, ${st.threads_in_use} of ${st.threads} threads in use` : "") +
    (stopped > 0 ? `; ${stopped} stopped in the last 15s, not counted` : "");
  outage(st.workers || []);

  const methods = Object.keys(st.by_method || {}).sort();
  fillTable("methods", methods.map(m => {
    const x = st.by_method[m];
    return el("tr", {}, td(m), td(x.solved, "num"), td(x.dead, "num"), td(x.p50_seconds.toFixed(1) + "s", "num"), td(x.p95_seconds.toFixed(1) + "s", "num"));
  }), "nothing solved in the last hour");
  spendTable(st.spend || []);
  lastHour = s.history || [];
  if (span === "1h") charts(lastHour);
  else if (Date.now() - spanRead > 30000) readSpan();

  const live = $("live");
  live.textContent = s.error ? "error: " + s.error : (loaded ? "as of " : "live ") + now.toLocaleTimeString();
  live.className = "badge " + (s.error ? "off" : loaded ? "" : "on");
  refreshList();
}

const svgNS = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs, text) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
}

// The charts' span: the last hour comes with every snapshot; a longer one
// (as far back as the stream keeps events and outcomes) is read from
// /api/history?span= when chosen, and again every 30 s while it is shown.
const spanStart = { "1h": "-60 min", "6h": "-6 h", "24h": "-24 h" };
let span = "1h", spanRead = 0, lastHour = [];

async function readSpan() {
  const want = span;
  spanRead = Date.now();
  try {
    const res = await fetch("/api/history?span=" + encodeURIComponent(want));
    const out = await res.json();
    if (!res.ok) { notice(out.error || res.statusText, true); return; }
    if (want === span) charts(out);
  } catch (e) {
    notice("request failed: " + e, true);
  }
}

function setSpan(v) {
  if (v === span) return;
  span = v;
  $("history-span").value = v;
  spanRead = 0;
  if (span === "1h") charts(lastHour);
  else readSpan();
}
$("history-span").addEventListener("change", ev => { setSpan(ev.target.value); writeURL(); });

// charts draws the span's history: bars of tasks ended per step (solved
// and dead stacked), and the open tasks at each step.
function charts(h) {
  const W = 300, H = 110, L = 30, B = 14, T = 6;
  const frame = (svg, maxY) => {
    const kids = [];
    for (let i = 0; i <= 2; i++) {
      const y = H - B - (H - B - T) * i / 2;
      kids.push(svgEl("line", { x1: L, y1: y, x2: W - 2, y2: y, stroke: "#e5e7eb" }),
        svgEl("text", { x: L - 3, y: y + 3, "text-anchor": "end" }, Math.round(maxY * i / 2)));
    }
    kids.push(svgEl("text", { x: L, y: H - 3 }, spanStart[span]), svgEl("text", { x: W - 2, y: H - 3, "text-anchor": "end" }, "now"));
    return kids;
  };
  const n = Math.max(h.length, 1);
  const bw = (W - 2 - L) / n;
  const y = (v, maxY) => H - B - (H - B - T) * v / maxY;

  const maxT = Math.max(1, ...h.map(p => p.solved + p.dead));
  const tk = frame($("throughput"), maxT);
  h.forEach((p, i) => {
    const x = L + i * bw;
    const title = `${new Date(p.at).toLocaleTimeString()}: ${p.solved} solved, ${p.dead} dead`;
    if (p.solved) tk.push(svgEl("rect", { x: x.toFixed(1), y: y(p.solved, maxT).toFixed(1), width: Math.max(bw - 1, 1).toFixed(1), height: (H - B - y(p.solved, maxT)).toFixed(1), fill: "#16a34a" }), svgEl("title", {}, title));
    if (p.dead) tk.push(svgEl("rect", { x: x.toFixed(1), y: y(p.solved + p.dead, maxT).toFixed(1), width: Math.max(bw - 1, 1).toFixed(1), height: (y(p.solved, maxT) - y(p.solved + p.dead, maxT)).toFixed(1), fill: "#dc2626" }));
  });
  $("throughput").replaceChildren(...tk);

  const maxD = Math.max(1, ...h.map(p => p.open));
  const dk = frame($("depth"), maxD);
  if (h.length) {
    const pts = h.map((p, i) => `${(L + (i + 0.5) * bw).toFixed(1)},${y(p.open, maxD).toFixed(1)}`);
    dk.push(svgEl("polygon", { points: `${(L + 0.5 * bw).toFixed(1)},${H - B} ${pts.join(" ")} ${(L + (h.length - 0.5) * bw).toFixed(1)},${H - B}`, fill: "#bfdbfe", stroke: "#2563eb" }));
    const last = h[h.length - 1];
    dk.push(svgEl("text", { x: W - 4, y: T + 8, "text-anchor": "end" }, `now ${last.open}`));
  }
  $("depth").replaceChildren(...dk);
}

// ---- the lists ----

const since = [["", "any time"], ["5m", "last 5 min"], ["15m", "last 15 min"], ["1h", "last hour"], ["6h", "last 6 h"], ["24h", "last 24 h"]];
const reasons = ["permanent", "attempts-exhausted", "invalid-task", "expired", "crashed", "canceled"];
// size prints a byte count.
function size(n) {
  if (n < 0) return "none";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}
const tabs = {
  tasks: {
    filters: [["state", "state", ["queued", "solving", "retrying", "canceled"]], ["lane", "lane", ["fast", "slow"]],
      ["priority", "priority", ["high", "normal"]], ["method", "method", null], ["since", "submitted", since]],
    head: ["id", "lane", "priority", "status", "method", "host", "attempts", "last code", "submitted", "worker", ""],
    row: t => el("tr", { data: { task: t.id } },
      el("td", {}, taskLink(t.id)), td(t.lane), td(t.priority), td(t.canceled ? t.status + " (canceled)" : t.status, t.canceled ? "canceled" : t.status),
      td(t.method || "-"), td(t.host || "-"), td(t.attempts, "num"), td(t.last_code || "-", "code"), stampCell(t.submitted), td(t.worker || "-", "code"),
      el("td", { class: "actions" }, t.cancelable ? adminButton("cancel", () => change("/api/cancel", { id: t.id })) : "")),
    empty: "no task waits or runs",
  },
  outcomes: {
    filters: [["status", "status", ["solved", "dead"]], ["method", "method", null], ["reason", "reason", reasons], ["since", "ended", since]],
    head: ["id", "status", "method", "attempts", "seconds", "ended", "why"],
    row: o => el("tr", { data: { task: o.id } },
      el("td", {}, taskLink(o.id)), td(o.status, o.status), td(o.method || "-"), td(o.attempts, "num"),
      td(o.solve_seconds ? o.solve_seconds.toFixed(1) : "", "num"), stampCell(o.at), td([o.reason, o.error, o.detail].filter(Boolean).join(" "), "detail")),
    empty: "no outcome matches",
  },
  dead: {
    filters: [["reason", "reason", reasons], ["method", "method", null], ["replayed", "replayed", ["no", "yes"]], ["since", "died", since]],
    head: ["id", "method", "host", "reason", "error", "attempts", "dead at", "replayed", ""],
    row: d => el("tr", { data: { task: d.id, seq: d.seq } },
      el("td", {}, taskLink(d.id)), td(d.method || "-"), td(d.host || "-"), td(d.reason, "dead"),
      el("td", { title: d.detail || "", class: "code" }, d.error || "-"), td(d.attempts, "num"), stampCell(d.dead_at), td(d.replayed ? "yes" : "no"),
      el("td", { class: "actions" },
        d.replayable ? adminButton("replay", () => change("/api/replay", { id: d.id })) : "",
        adminButton("delete", () => change("/api/delete", { seq: d.seq }), "danger"))),
    empty: "no dead letter matches",
  },
  // The server page: every worker seen, as asynqmon lists its servers,
  // below the NATS server's facts (serverBox); id filters by name.
  servers: {
    filters: [],
    idLabel: "name",
    head: ["worker", "host", "pid", "threads", "in use", "up", "last seen", "state", "at the service now"],
    row: w => el("tr", { data: { worker: w.name } },
      td(w.name, "code"), td(w.host || "-"), td(w.pid || "-", "num"), td(w.threads, "num"), td(w.stopped ? "-" : w.in_use, "num"),
      td(dur(w.up_seconds)), td(age(w.at, new Date(state.page.server.at)) + " ago"), workerState(w),
      // A worker holding more tasks than one heartbeat message names
      // splits the list over several (held_parts, each a part): the count
      // stands here.
      el("td", {}, ...(w.held_parts || w.part ? [`${w.held} tasks, too many to list here`]
        : (w.tasks || []).flatMap((x, i) => i ? [" ", taskLink(x.id)] : [taskLink(x.id)])))),
    empty: "no worker seen in the last 15s",
  },
};
const state = { tab: "tasks", query: { tasks: {}, outcomes: {}, dead: {}, servers: {} }, offset: { tasks: 0, outcomes: 0, dead: 0, servers: 0 }, page: null };
const pageSize = 25;
let listing = false;
// listSeq numbers the list's reads: a forced read (a filter picked) may start
// while an older one is under way, and only the newest may fill the list.
let listSeq = 0;

function showTab(tab) {
  state.tab = tab;
  document.querySelectorAll(".tab").forEach(b => b.classList.toggle("on", b.dataset.tab === tab));
  $("bulk").hidden = tab !== "dead";
  $("server-box").hidden = tab !== "servers";
  $("confirm").hidden = true;
  const t = tabs[tab];
  $("filters").replaceChildren(
    ...t.filters.map(([key, label, options]) => {
      const sel = el("select", { name: key, id: "f-" + key });
      sel.append(el("option", { value: "" }, key === "since" ? "any time" : "any"));
      for (const o of options || []) {
        const [v, text] = Array.isArray(o) ? o : [o, o];
        if (v) sel.append(el("option", { value: v }, text));
      }
      sel.value = state.query[tab][key] || "";
      sel.addEventListener("change", () => setQuery(key, sel.value));
      return el("label", {}, label, sel);
    }),
    (() => {
      const name = t.idLabel || "id";
      const input = el("input", { id: "f-id", placeholder: name + " contains", value: state.query[tab].id || "", size: 14 });
      input.addEventListener("change", () => setQuery("id", input.value.trim()));
      return el("label", {}, name, input);
    })());
  const head = el("tr", {}, ...t.head.map(h => el("th", {}, h)));
  document.querySelector("#list thead").replaceChildren(head);
  const body = document.querySelector("#list tbody");
  body.dataset.sig = "";
  body.replaceChildren();
  refreshList(true);
}

// The page's address names what it shows: the tab, its filters, its page
// the task whose trace is open and the charts' span when not the hour
// (#dead?reason=canceled&offset=25&trace=t-1&history=24h),
// so that a link, a bookmark or a reload opens the same view. writeURL
// keeps it in step (replacing the entry: paging adds no history); readURL
// takes it on load and when it is changed by hand, ignoring what it does
// not know.
// shownHash is the address the page last wrote or read: one that differs
// was changed by hand (or a link), and its hashchange, still to come,
// reads it first; a list's refresh answered meanwhile must not write over
// it.
let shownHash = location.hash;
function writeURL() {
  if (location.hash !== shownHash) return;
  const p = new URLSearchParams(state.query[state.tab]);
  if (state.offset[state.tab]) p.set("offset", state.offset[state.tab]);
  if (asking || picked) p.set("trace", asking || picked);
  if (span !== "1h") p.set("history", span);
  const q = p.toString();
  const hash = "#" + state.tab + (q ? "?" + q : "");
  if (location.hash !== hash) history.replaceState(null, "", hash);
  shownHash = location.hash;
}

function readURL() {
  shownHash = location.hash;
  const h = location.hash.slice(1);
  const at = h.indexOf("?");
  const tab = at < 0 ? h : h.slice(0, at);
  if (!tabs[tab]) return "";
  const p = new URLSearchParams(at < 0 ? "" : h.slice(at + 1));
  const keys = new Set([...tabs[tab].filters.map(f => f[0]), "id"]);
  const query = {};
  for (const [k, v] of p) if (keys.has(k) && v) query[k] = v;
  state.tab = tab;
  state.query[tab] = query;
  const off = Number(p.get("offset"));
  state.offset[tab] = Number.isInteger(off) && off > 0 ? off - off % pageSize : 0;
  setSpan(spanStart[p.get("history")] ? p.get("history") : "1h");
  return p.get("trace") || "";
}

function setQuery(key, value) {
  if (value) state.query[state.tab][key] = value;
  else delete state.query[state.tab][key];
  state.offset[state.tab] = 0;
  $("confirm").hidden = true;
  refreshList(true);
}

function queryString(tab) {
  const p = new URLSearchParams(state.query[tab]);
  p.set("offset", state.offset[tab]);
  p.set("limit", pageSize);
  return p.toString();
}

async function refreshList(force) {
  if (listing && !force) return;
  listing = true;
  const tab = state.tab;
  const seq = ++listSeq;
  writeURL();
  try {
    const res = await fetch("/api/" + tab + "?" + queryString(tab));
    const p = await res.json();
    if (seq !== listSeq) return; // a newer read (another filter, page or tab) fills the list
    if (!res.ok) { notice(p.error || res.statusText, true); return; }
    if (tab !== state.tab) return;
    if (p.total > 0 && p.offset >= p.total) {
      // The list shrank under this page (a purge, tasks that ended): show its last page.
      state.offset[tab] = Math.floor((p.total - 1) / pageSize) * pageSize;
      writeURL();
      listing = false;
      refreshList(true);
      return;
    }
    state.page = p;
    // The method filter offers the methods the list holds.
    const sel = $("f-method");
    if (sel) {
      const have = [...sel.options].map(o => o.value).join();
      const want = ["", ...p.methods].join();
      if (have !== want) {
        sel.replaceChildren(el("option", { value: "" }, "any"), ...p.methods.map(m => el("option", { value: m }, m)));
      }
      // The address's method, set before its option existed (an address
      // typed or opened while the list held other methods), is shown once
      // the list offers it, whether or not the choices changed.
      sel.value = state.query[tab].method || "";
    }
    if (tab === "servers") serverBox(p.server);
    fill(document.querySelector("#list tbody"), p.items.map(tabs[tab].row), tabs[tab].empty, tabs[tab].head.length);
    markPicked();
    $("count-" + tab).textContent = Object.keys(state.query[tab]).length ? `(${p.total.toLocaleString()} matching)` : `(${p.total.toLocaleString()})`;
    $("range").textContent = p.total ? `${(p.offset + 1).toLocaleString()}–${(p.offset + p.items.length).toLocaleString()} of ${p.total.toLocaleString()}` : "none";
    $("prev").disabled = p.offset === 0;
    $("next").disabled = p.offset + p.items.length >= p.total;
    if (tab === "dead") {
      $("bulk-replay").textContent = `replay all ${p.total.toLocaleString()} matching`;
      $("bulk-purge").textContent = `purge all ${p.total.toLocaleString()} matching`;
      if (!p.total) { $("bulk-replay").disabled = $("bulk-purge").disabled = true; }
    }
  } catch (e) {
    notice("request failed: " + e, true);
  } finally {
    listing = false;
  }
}

// serverBox shows the NATS server the dashboard is connected to, the
// streams it holds for captchaq (contents, limits, replicas) and its
// store, as /api/servers reads them.
function serverBox(s) {
  const st = s.store;
  const store = !st ? "not reported (a nats-server without captchaq's store watch)" :
    `${size(st.used)} used of ${size(st.max_store)}, room for ${size(st.room)} more, ${size(st.free)} free on the disk; ` +
    (st.encrypted ? "encrypted at rest" : "not encrypted at rest") + (st.refusing ? `; refusing writes: ${st.error}` : "") +
    (st.action ? `; ${st.action}` : "");
  fill(document.querySelector("#server-info tbody"), [
    ["NATS server", `${s.name} (nats-server ${s.version})` + (s.cluster ? `, cluster ${s.cluster}` : ", not clustered")],
    ["connected to", `${s.url}, round trip ${s.rtt_ms.toFixed(1)} ms` + (s.known && s.known.length ? `; fails over to ${s.known.join(", ")}` : "")],
    ["users", s.auth_required ? "checked: changes need the admin's NATS user" : "none (a local trial): any name signs in and may change anything"],
    ["store", store],
  ].map(([k, v]) => el("tr", {}, el("th", {}, k), td(v))), "", 2);
  fillTable("streams", (s.streams || []).map(x => el("tr", { data: { stream: x.name } },
    td(x.name, "code"), td(x.messages.toLocaleString(), "num"), td(size(x.bytes), "num"),
    td(x.messages ? `${x.first_seq.toLocaleString()}–${x.last_seq.toLocaleString()}` : "-"), td(x.consumers, "num"),
    td(x.max_age_seconds > 0 ? dur(x.max_age_seconds) : "for ever"), td(x.max_bytes > 0 ? size(x.max_bytes) : "the store's"),
    td(!(x.peers || []).length ? String(x.replicas) : `${x.replicas}: leader ${x.leader}` + x.peers.map(p =>
      `, ${p.name} ${p.offline ? "offline" : p.current ? "current" : "behind by " + p.lag}`).join("")))), "no stream");
}

function describe(tab) {
  const q = Object.entries(state.query[tab]);
  return q.length ? q.map(([k, v]) => `${k} ${v}`).join(", ") : "no filter: every dead letter";
}

// bulk asks, in the page, before a change to many letters: it names how
// many and which, and acts on none newer than those counted.
function bulk(kind) {
  const p = state.page;
  if (!p || !p.total) return;
  const verb = kind === "replay" ? "Replay" : "Purge";
  $("confirm-text").textContent = `${verb} ${p.total.toLocaleString()} dead letter(s) (${describe("dead")})?` +
    (kind === "purge" ? " They are erased; the tasks' event logs stay." : " Each task is queued again and paid again if solved.");
  $("confirm-yes").textContent = `yes, ${verb.toLowerCase()} ${p.total.toLocaleString()}`;
  $("confirm-yes").onclick = async () => {
    $("confirm").hidden = true;
    await change(kind === "replay" ? "/api/replay-all" : "/api/purge", { ...state.query.dead, upto: p.max_seq });
  };
  $("confirm").hidden = false;
}

// ---- changes and sign-in ----

function notice(text, isError) {
  $("notice").replaceChildren(el("div", { class: "msg" + (isError ? " error" : ""), id: "notice-msg" }, text));
}

async function post(path, body, user, password) {
  const res = await fetch(path, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Captchaq-CSRF": csrf, "Authorization": "Basic " + btoa(user + ":" + password) },
    body: JSON.stringify(body),
  });
  return [res, await res.json()];
}

async function change(path, body) {
  if (!signed) { notice("sign in with the admin's NATS user and password first", true); return; }
  let res, out;
  try {
    [res, out] = await post(path, body, signed.user, signed.password);
  } catch (e) {
    notice("request failed: " + e, true);
    return;
  }
  if (res.ok) notice(out.ok, false);
  else notice(out.error || res.statusText, true);
  if (res.status === 401 || res.status === 403 && /may not change/.test(out.error || "")) signOut();
  refreshList(true);
}

function setWho() {
  const who = $("who");
  if (readOnly) {
    who.textContent = "read-only dashboard: changes are made with the captchaq command";
    $("user").disabled = $("password").disabled = $("signin-button").disabled = true;
    syncButtons();
    return;
  }
  who.textContent = signed ? `changes as NATS user ${signed.user}` : "read-only: sign in as the admin to replay, delete, purge, cancel or pause";
  if (noUsers) who.textContent += "; this server has no users (a local trial): any name signs in, no password is checked";
  who.classList.toggle("signed", !!signed);
  $("signout").hidden = !signed;
  $("signin-button").hidden = !!signed;
  $("user").disabled = $("password").disabled = !!signed;
  syncButtons();
}

function signOut() { signed = null; setWho(); }

$("signin").addEventListener("submit", async ev => {
  ev.preventDefault();
  const user = $("user").value.trim(), password = $("password").value;
  if (!user) { notice("type the admin's NATS user and password", true); return; }
  $("who").textContent = `checking NATS user ${user}…`;
  let res, out;
  try {
    [res, out] = await post("/api/signin", {}, user, password);
  } catch (e) {
    notice("request failed: " + e, true);
    setWho();
    return;
  }
  if (res.ok) {
    signed = { user, password };
    $("password").value = "";
    notice(noUsers ? `signed in as NATS user ${user}: ${out.ok}` : `signed in as NATS user ${user}`, false);
  } else {
    signed = null;
    notice(out.error || res.statusText, true);
  }
  setWho();
});
$("signout").addEventListener("click", () => { signOut(); notice("signed out", false); });

// ---- a task's trace ----

let picked = "";
function markPicked() {
  document.querySelectorAll("#list tbody tr").forEach(r => r.classList.toggle("picked", r.dataset.task === picked));
}

// showSeq numbers the picks: a read answered after a newer pick (another
// task, the trace closed) shows nothing. asking is the task whose trace is
// being read, which the address names meanwhile (a reload asks again).
let showSeq = 0, asking = "";
async function showTask(id) {
  const seq = ++showSeq;
  asking = id;
  let res, out;
  // A read the server fails (a broker slow to answer: 502) or that never
  // reaches it is asked again while this task is still the one picked,
  // 0.5 s, 1 s, 2 s … up to 5 s apart; a 4xx (no such task, a bad id) is
  // the answer and ends it.
  for (let wait = 500, failed = false; ; wait = Math.min(2 * wait, 5000)) {
    let why = "";
    try {
      res = await fetch("/api/task?id=" + encodeURIComponent(id));
      out = await res.json();
      if (res.ok) {
        if (failed && seq === showSeq) $("notice").replaceChildren();
        break;
      }
      why = out.error || res.statusText;
    } catch (e) {
      why = "request failed: " + e;
    }
    if (seq !== showSeq) return;
    if (res && res.status < 500 && !res.ok) { asking = ""; writeURL(); notice(why, true); return; }
    failed = true;
    notice(`${id}'s trace: ${why}; asking again in ${dur(wait / 1000)}`, true);
    await new Promise(r => setTimeout(r, wait));
    if (seq !== showSeq) return;
    res = undefined;
  }
  if (seq !== showSeq) return;
  asking = "";
  picked = id;
  markPicked();
  writeURL();
  $("task-id").textContent = id;
  $("task-id").className = "";
  $("task-close").hidden = false;
  const t = out.task;
  const parts = [t.method && t.host ? `${t.method} on ${t.host}` : t.method || t.host,
    t.lane && `${t.lane} lane`, t.priority && `${t.priority} priority`, `${t.attempts} attempt(s)`, t.last_code && `last ${t.last_code}`,
    t.use_at && `token used at ${new Date(t.use_at).toLocaleTimeString()}`,
    t.not_before && `not before ${new Date(t.not_before).toLocaleTimeString()}`,
    t.start_at && `solve starts at ${new Date(t.start_at).toLocaleTimeString()}`];
  $("task-state").textContent = `${t.status}${t.canceled ? " (canceled)" : ""}: ` + parts.filter(Boolean).join(", ");
  $("task-state").className = "";
  fillTable("trace", (out.trace || []).map(e => el("tr", {},
    td(new Date(e.at).toLocaleTimeString(), "when"),
    td(e.kind + (e.attempt ? " " + e.attempt : ""), e.kind === "dead" || e.kind === "dead-letter" ? "dead" : e.kind === "outcome" || e.kind === "solved" ? "solved" : ""),
    td(e.worker || e.client || ""),
    td([e.code, e.reason, e.delay ? "wait " + dur(e.delay / 1e9) : "", e.detail].filter(Boolean).join("; "), "detail"))), "no steps");
  $("trace-box").scrollTop = 0;
  const panel = $("task-panel");
  if (panel.getBoundingClientRect().top < 0 || panel.getBoundingClientRect().top > window.innerHeight) panel.scrollIntoView({ block: "start" });
}

$("search").addEventListener("submit", ev => {
  ev.preventDefault();
  const id = $("search-id").value.trim();
  if (id) showTask(id);
});
$("task-close").addEventListener("click", closeTask);
function closeTask() {
  showSeq++;
  asking = picked = "";
  markPicked();
  writeURL();
  $("task-id").textContent = ": pick a task";
  $("task-id").className = "muted";
  $("task-state").textContent = "Click a task id in the list (or search one above) to see its steps here.";
  $("task-close").hidden = true;
  fillTable("trace", [], "");
}
document.querySelectorAll(".tab").forEach(b => b.addEventListener("click", () => showTab(b.dataset.tab)));
$("prev").addEventListener("click", () => { state.offset[state.tab] = Math.max(0, state.offset[state.tab] - pageSize); refreshList(true); });
$("next").addEventListener("click", () => { state.offset[state.tab] += pageSize; refreshList(true); });
$("bulk-replay").addEventListener("click", () => bulk("replay"));
$("bulk-purge").addEventListener("click", () => bulk("purge"));
$("confirm-no").addEventListener("click", () => { $("confirm").hidden = true; });
$("filters").addEventListener("submit", ev => ev.preventDefault());

setWho();
const traced = readURL();
showTab(state.tab);
if (traced) showTask(traced);
// An address changed by hand (or a link within the page) opens its view.
window.addEventListener("hashchange", () => {
  const id = readURL();
  showTab(state.tab);
  if (id && id !== picked) showTask(id);
  else if (!id) closeTask();
});
// The snapshot the page came with, shown before the first event arrives.
render(JSON.parse($("first-snapshot").textContent), true);
const events = new EventSource("/api/events");
events.addEventListener("snapshot", ev => render(JSON.parse(ev.data)));
events.addEventListener("error", () => {
  const live = $("live");
  live.textContent = "reconnecting…";
  live.className = "badge off";
});
