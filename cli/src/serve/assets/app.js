// tune serve's page: the list of sweeps, a sweep, a trial. Everything it shows is put in the
// page as text (textContent), never as markup: a param value `<script>` shows as text.
"use strict";

const main = () => document.getElementById("main");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = String(value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function number(x) {
  if (x === null || x === undefined) return "";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? x.toExponential(3) : String(Number(x.toPrecision(4)));
}

function paramsText(params) {
  return Object.entries(params || {}).map(([k, v]) => `${k}=${number(v)}`).join(" ");
}

function when(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}

function enc(name) {
  return encodeURIComponent(name);
}

// What the current view is, so that a route change ends the previous one's stream.
let view = { close() {} };

function route() {
  view.close();
  const hash = decodeURIComponent(location.hash.slice(1) || "/");
  const trial = hash.match(/^\/s\/(.+)\/t\/(\d+)$/);
  const sweep = hash.match(/^\/s\/(.+)$/);
  if (trial) view = trialView(trial[1], Number(trial[2]));
  else if (sweep) view = sweepView(sweep[1]);
  else view = listView();
}

function crumbs(...parts) {
  const c = document.getElementById("crumbs");
  c.replaceChildren(...parts.flatMap((p) => [" / ", p]));
}

function listView() {
  crumbs();
  const body = el("tbody");
  const table = el("table", { id: "sweeps" },
    el("thead", {}, el("tr", {}, ["sweep", "state", "trials", "best", "search", "started"].map((h) => el("th", { text: h })))),
    body);
  main().replaceChildren(el("h2", { text: "Sweeps" }), table);
  let stopped = false;
  async function load() {
    if (stopped) return;
    try {
      const { sweeps } = await api("/api/sweeps");
      body.replaceChildren(...sweeps.map((s) => el("tr", { "data-sweep": s.name },
        el("td", {}, el("a", { href: `#/s/${enc(s.name)}`, text: s.name })),
        el("td", { class: `status-${s.state}`, text: s.state }),
        el("td", { text: `${s.created}/${s.total}: ` + Object.entries(s.counts).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(", ") }),
        el("td", { text: s.best ? `${s.metric} ${number(s.best.value)} (trial ${s.best.trial})` : "" }),
        el("td", { text: `${s.search} + ${s.scheduler}` }),
        el("td", { text: when(s.started_at) }))));
    } catch (e) {
      body.replaceChildren(el("tr", {}, el("td", { class: "error", text: e.message })));
    }
  }
  load();
  // The list only: a sweep's page is pushed its changes.
  const timer = setInterval(load, 3000);
  return { close() { stopped = true; clearInterval(timer); } };
}

// Runs `fn` at most once per `ms`, the last call winning.
function throttle(fn, ms) {
  let due = null;
  let last = 0;
  return () => {
    if (due) return;
    const wait = Math.max(0, last + ms - Date.now());
    due = setTimeout(() => { due = null; last = Date.now(); fn(); }, wait);
  };
}

function control(name, body, message) {
  message.textContent = "…";
  message.className = "";
  return api(`/api/sweeps/${enc(name)}/control`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  }).then((r) => { message.textContent = r.message; return r; },
    (e) => { message.textContent = e.message; message.className = "error"; });
}

function sweepView(name) {
  crumbs(el("a", { href: `#/s/${enc(name)}`, text: name }));
  const query = { offset: 0, limit: 50, sort: "id", order: "asc", status: "", q: "", range: "" };
  const compare = new Set();
  const headline = el("div", { class: "headline", id: "headline" });
  const message = el("div", { id: "message" });
  const samples = el("input", { type: "number", min: 1, value: 10, id: "add-count" });
  const point = el("textarea", { id: "enqueue-params", placeholder: '{"lr": 0.01}' });
  const controls = el("div", { class: "controls" },
    el("button", { class: "danger", id: "stop-sweep", onclick: () => control(name, { action: "stop_sweep" }, message) }, "Stop sweep"),
    samples,
    el("button", { id: "add-samples", onclick: () => control(name, { action: "add_samples", count: Number(samples.value) }, message) }, "Add samples"),
    point,
    el("button", { id: "enqueue", onclick: () => {
      let params;
      try { params = JSON.parse(point.value || "{}"); } catch (e) { message.textContent = `the point is not JSON: ${e.message}`; message.className = "error"; return; }
      control(name, { action: "enqueue", params }, message);
    } }, "Enqueue point"));
  const statusFilter = el("select", { id: "status-filter", onchange: (e) => { query.status = e.target.value; query.offset = 0; loadTable(); } },
    ["", "pending", "running", "paused", "completed", "stopped", "failed"].map((s) => el("option", { value: s, text: s || "any status" })));
  const textFilter = el("input", { id: "text-filter", placeholder: "filter text", oninput: (e) => { query.q = e.target.value; query.offset = 0; loadTable(); } });
  const rangeParam = el("select", { id: "range-param" });
  const rangeLow = el("input", { id: "range-low", placeholder: "min", size: 6 });
  const rangeHigh = el("input", { id: "range-high", placeholder: "max", size: 6 });
  const applyRange = () => {
    query.range = rangeParam.value && (rangeLow.value || rangeHigh.value) ? `${rangeParam.value}:${rangeLow.value}:${rangeHigh.value}` : "";
    query.offset = 0;
    loadTable();
  };
  rangeLow.addEventListener("change", applyRange);
  rangeHigh.addEventListener("change", applyRange);
  rangeParam.addEventListener("change", applyRange);
  const compareButton = el("button", { id: "compare", onclick: () => drawCompare() }, "Compare selected");
  const filters = el("div", { class: "filters" }, statusFilter, textFilter, "param", rangeParam, rangeLow, rangeHigh, compareButton);
  const tbody = el("tbody", { id: "trials" });
  const sortable = [["", null], ["id", "id"], ["status", "status"], ["step", "step"], ["value", "value"], ["params", null], ["", null]];
  const thead = el("thead", {}, el("tr", {}, sortable.map(([label, key]) => el("th", {
    text: label,
    onclick: key && (() => { query.order = query.sort === key && query.order === "asc" ? "desc" : "asc"; query.sort = key; loadTable(); }),
  }))));
  const pageInfo = el("span", { id: "page-info" });
  const pager = el("div", { class: "pager" },
    el("button", { onclick: () => { query.offset = Math.max(0, query.offset - query.limit); loadTable(); } }, "‹ prev"),
    pageInfo,
    el("button", { id: "next-page", onclick: () => { query.offset += query.limit; loadTable(); } }, "next ›"));
  const charts = el("div", { class: "charts", id: "charts" });
  const compareChart = el("div", { class: "charts", id: "compare-chart" });
  const scheduler = el("div", { class: "log", id: "scheduler" });
  const workers = el("div", { class: "log", id: "workers" });
  const log = el("div", { class: "log", id: "log" });
  main().replaceChildren(
    el("div", { class: "card" }, headline, controls, message),
    el("div", { class: "card" }, filters, el("table", {}, thead, tbody), pager),
    compareChart,
    el("h3", { text: "Charts" }), charts,
    el("div", { class: "cols" },
      el("div", { class: "card" }, el("h3", { text: "Scheduler" }), scheduler, el("h3", { text: "Workers" }), workers),
      el("div", { class: "card" }, el("h3", { text: "Log" }), log)));

  let closed = false;
  let version = 0;
  let chartNames = [];
  let paramsKnown = "";

  async function loadHeader() {
    if (closed) return;
    try {
      const s = await api(`/api/sweeps/${enc(name)}`);
      version = s.version;
      const elapsed = ((s.ended_at || Date.now()) - s.started_at) / 1000;
      const counts = Object.entries(s.counts).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(" ");
      headline.textContent = `tune · ${s.name} · ${s.search} + ${s.scheduler} · ${elapsed.toFixed(0)} s · ${s.state}\n` +
        `${s.created}/${s.total} trials: ${counts} · ${s.steps_trained} steps trained\n` +
        (s.best ? `best ${s.metric} ${number(s.best.value)} (trial ${s.best.trial})` : `no completed trial yet (${s.mode} ${s.metric})`) +
        (s.pareto_front ? ` · Pareto front: trials ${s.pareto_front.join(", ")}` : "");
      headline.dataset.state = s.state;
      for (const b of controls.querySelectorAll("button")) b.disabled = !s.live;
      scheduler.textContent = (s.scheduler_state || []).join("\n");
      const slots = (s.slots || []).map((slot, i) => `${slot}: ${s.workers[i] === null || s.workers[i] === undefined ? "idle" : `trial ${s.workers[i]}`}`);
      const gib = (b) => (b / 2 ** 30).toFixed(1);
      const gpu = (g) => `  gpu ${g.index} ${g.name} · ${g.busy_percent}% busy · ${gib(g.memory_used_bytes)} / ${gib(g.memory_total_bytes)} GiB`;
      const remote = (s.remote_workers || []).flatMap((w) => [
        `${w.id}: ${w.slots} slots · ${w.live ? "live" : "lost"} · ${w.running.length ? `trials ${w.running.join(", ")}` : "idle"}`,
        ...(w.gpus || []).map(gpu)]);
      const gpus = (s.gpus || []).map(gpu);
      workers.textContent = [...slots, ...remote, ...gpus].join("\n") || "none";
      log.textContent = (s.log || []).map(([at, text]) => `${new Date(at).toLocaleTimeString()} ${text}`).join("\n");
      if (s.params.join() !== paramsKnown) {
        paramsKnown = s.params.join();
        rangeParam.replaceChildren(el("option", { value: "", text: "(none)" }), ...s.params.map((p) => el("option", { value: p, text: p })));
      }
      const names = s.charts.map((c) => c.name);
      if (names.join() !== chartNames.join()) {
        chartNames = names;
        charts.replaceChildren(...s.charts.map((c) => el("figure", {},
          el("figcaption", { text: c.title }),
          el("img", { id: `chart-${c.name}`, alt: c.title, "data-chart": c.name, loading: "lazy" }))));
      }
    } catch (e) {
      headline.textContent = e.message;
    }
  }

  async function loadTable() {
    if (closed) return;
    const params = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== ""));
    try {
      const page = await api(`/api/sweeps/${enc(name)}/trials?${params}`);
      pageInfo.textContent = `${page.matching ? page.offset + 1 : 0}–${Math.min(page.offset + query.limit, page.matching)} of ${page.matching}`;
      tbody.replaceChildren(...page.rows.map((t) => {
        const box = el("input", { type: "checkbox", checked: compare.has(t.id), onchange: (e) => { if (e.target.checked) compare.add(t.id); else compare.delete(t.id); } });
        const ends = ["pending", "running", "paused"].includes(t.status);
        return el("tr", { "data-trial": t.id },
          el("td", {}, box),
          el("td", {}, el("a", { href: `#/s/${enc(name)}/t/${t.id}`, text: t.id })),
          el("td", { class: `status-${t.status}`, text: t.status }),
          el("td", { text: number(t.step) }),
          el("td", { class: "value", text: number(t.value) }),
          el("td", { class: "params", text: paramsText(t.params) }),
          el("td", {}, ends ? el("button", { class: "danger stop-trial", "data-trial": t.id, onclick: () => control(name, { action: "stop_trial", trial: t.id }, message) }, "stop") : ""));
      }));
    } catch (e) {
      tbody.replaceChildren(el("tr", {}, el("td", { class: "error", colspan: 7, text: e.message })));
    }
  }

  // How long the charts took to arrive last time: a large sweep's charts are drawn again
  // less often (at most every 2 s, and never more than a tenth of the time).
  let chartMs = 0;
  function loadCharts() {
    if (closed) return;
    const started = performance.now();
    for (const img of charts.querySelectorAll("img")) {
      img.onload = () => { chartMs = Math.max(chartMs * 0.5, performance.now() - started); };
      img.src = `/api/sweeps/${enc(name)}/charts/${img.dataset.chart}.svg?v=${version}`;
      img.dataset.version = version;
    }
  }

  function drawCompare() {
    const ids = [...compare].sort((a, b) => a - b);
    if (ids.length === 0) { compareChart.replaceChildren(); return; }
    compareChart.replaceChildren(el("figure", {},
      el("figcaption", { text: `Learning curves of trials ${ids.join(", ")}` }),
      el("img", { id: "compare-img", src: `/api/sweeps/${enc(name)}/charts/curves.svg?trials=${ids.join(",")}&v=${version}` })));
  }

  const refresh = throttle(() => { loadHeader().then(loadTable); }, 500);
  let chartsDue = null;
  const refreshCharts = () => {
    if (chartsDue) return;
    chartsDue = setTimeout(() => {
      chartsDue = null;
      loadCharts();
      if (compare.size && compareChart.firstChild) drawCompare();
    }, Math.max(2000, 10 * chartMs));
  };
  const conn = document.getElementById("connection");
  let events = null;
  // (Re)connects the stream, and loads everything again: a sweep that does not exist yet (its
  // page opened as it starts) or a server restarted is picked up when it answers.
  function connect() {
    if (closed) return;
    events = new EventSource(`/api/sweeps/${enc(name)}/events`);
    events.onopen = () => { conn.textContent = "live"; loadHeader().then(() => { loadTable(); loadCharts(); }); };
    events.onerror = () => {
      conn.textContent = "reconnecting…";
      if (events.readyState === EventSource.CLOSED) setTimeout(connect, 1000);
    };
    events.onmessage = (m) => {
      const data = JSON.parse(m.data);
      if (data.version) version = data.version;
      const kind = data.event && data.event.kind;
      if (kind === "log") {
        log.textContent = `${new Date(data.event.at).toLocaleTimeString()} ${data.event.text}\n` + log.textContent;
      }
      refresh();
      if (kind !== "log") refreshCharts();
    };
  }
  loadHeader().then(() => { loadTable(); loadCharts(); });
  connect();
  return { close() { closed = true; if (events) events.close(); conn.textContent = ""; } };
}

function trialView(name, id) {
  crumbs(el("a", { href: `#/s/${enc(name)}`, text: name }), el("span", { text: `trial ${id}` }));
  const message = el("div", { id: "message" });
  const box = el("div", {});
  main().replaceChildren(box);
  let closed = false;
  async function load() {
    if (closed) return;
    try {
      const t = await api(`/api/sweeps/${enc(name)}/trials/${id}`);
      const params = el("table", { id: "trial-params" }, el("tbody", {}, Object.entries(t.params).map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: number(v) })))));
      const metrics = [...new Set(t.results.flatMap((r) => Object.keys(r.metrics)))];
      const reports = el("table", { id: "trial-reports" },
        el("thead", {}, el("tr", {}, ["step", "attempt", ...metrics].map((h) => el("th", { text: h })))),
        el("tbody", {}, t.results.map((r) => el("tr", {}, el("td", { text: r.step }), el("td", { text: r.attempt }), metrics.map((m) => el("td", { text: number(r.metrics[m]) }))))));
      const ends = ["pending", "running", "paused"].includes(t.status);
      box.replaceChildren(
        el("div", { class: "card" },
          el("h2", { text: `Trial ${t.id}: ${t.status}` }),
          el("div", { class: "muted", text: `attempts ${t.attempts} · device ${t.device || "-"} · created ${when(t.created_at)} · started ${when(t.started_at)} · finished ${when(t.finished_at)}` }),
          ends ? el("button", { class: "danger", id: "stop-this-trial", onclick: () => control(name, { action: "stop_trial", trial: t.id }, message).then(load) }, "Stop trial") : "",
          message,
          t.error ? el("pre", { class: "log error", id: "trial-error", text: t.error }) : "",
          t.lineage && t.lineage.length ? el("div", { class: "log", text: t.lineage.map((l) => `step ${l.step}: took trial ${l.from}'s weights; before ${paramsText(l.previous)}`).join("\n") }) : ""),
        el("div", { class: "cols" },
          el("div", { class: "card" }, el("h3", { text: "Params" }), params),
          el("div", { class: "card" }, el("h3", { text: "Learning curve" }), el("img", { class: "curve", src: `/api/sweeps/${enc(name)}/charts/curves.svg?trials=${t.id}&v=${t.results.length}` }))),
        el("div", { class: "card" }, el("h3", { text: `Reports (${t.results.length})` }), reports),
        el("div", { class: "card" }, el("h3", { text: "Log (its end)" }),
          el("pre", { class: "log", id: "trial-log", text: t.log_tail === null ? "kept on the machine that ran it" : (t.log_tail || "empty") })));
    } catch (e) {
      box.replaceChildren(el("div", { class: "error", text: e.message }));
    }
  }
  load();
  const events = new EventSource(`/api/sweeps/${enc(name)}/events`);
  const reload = throttle(load, 1000);
  events.onmessage = (m) => {
    const data = JSON.parse(m.data);
    const e = data.event || {};
    if (e.id === id || e.kind === "reload") reload();
  };
  return { close() { closed = true; events.close(); } };
}

// The token came in the address (the printed URL): it is in a cookie now, out of sight.
if (new URLSearchParams(location.search).has("token")) {
  history.replaceState(null, "", location.pathname + location.hash);
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);
