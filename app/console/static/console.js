// The quota-streams console: plain DOM, no dependencies. Every name a client chose (client ids,
// user names) reaches the page as text (textContent), never as markup, in a <bdi> of its own
// (a right-to-left name cannot reorder the text around it), its control and bidi formatting
// characters shown as escapes.
"use strict";

const UNITS = {
  producer_byte_rate: "B/s", consumer_byte_rate: "B/s", request_percentage: "%",
  controller_mutation_rate: "partitions/s", connection_creation_rate: "connections/s",
  "max_connection_creation_rate": "connections/s",
};
const COLORS = ["#2d5fb8", "#e07b39", "#3a9d5d", "#8e5bb5", "#c9a227", "#3fa7b5", "#b5485d", "#6b7280"];
const REFRESH_MS = 2000;
const PAGE = 50;

const state = { sort: "utilization", desc: true, offset: 0, timer: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function human(value, unit) {
  if (value === null || value === undefined) return "unlimited";
  if (unit === "B/s") {
    const steps = [[1e9, "GB/s"], [1e6, "MB/s"], [1e3, "kB/s"]];
    for (const [size, name] of steps) if (Math.abs(value) >= size) return (value / size).toFixed(2) + " " + name;
    return value.toFixed(0) + " B/s";
  }
  return (Math.abs(value) >= 100 ? value.toFixed(0) : value.toFixed(2)) + " " + unit;
}

// a rate, or a token bucket's tokens left (controller mutations have no rate to show)
function rateText(row, unit) {
  if (row.observed !== null) return human(row.observed, unit);
  return row.tokens !== null ? `${row.tokens.toFixed(2)} tokens left` : "-";
}

// control characters and the bidi formatting ones (marks, embeddings, overrides, isolates)
const INVISIBLE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const SHORT_ESCAPES = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function escaped(ch) {
  return SHORT_ESCAPES[ch] || "\\u" + ch.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0");
}

// a name as the page shows it: isolated, each invisible character a visible escape
function nameNode(name) {
  const node = el("bdi", { class: "name" });
  let last = 0;
  for (const m of name.matchAll(INVISIBLE)) {
    if (m.index > last) node.append(name.slice(last, m.index));
    node.append(el("span", { class: "ctl", title: "U+" + m[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") }, escaped(m[0])));
    last = m.index + m[0].length;
  }
  if (last < name.length) node.append(name.slice(last));
  return node;
}

function namesOf(entity) {
  return Object.values(entity || {}).map(String).filter((v) => v !== "" && v !== "<default>");
}

// server text (a config level, an explanation) with every occurrence of a name as nameNode
function withNames(text, names) {
  const sorted = [...new Set(names)].sort((a, b) => b.length - a.length);
  if (!sorted.length) return [text];
  const pattern = new RegExp(sorted.map((n) => n.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|"), "g");
  const nodes = [];
  let last = 0;
  for (const m of text.matchAll(pattern)) {
    if (m.index > last) nodes.push(text.slice(last, m.index));
    nodes.push(nameNode(m[0]));
    last = m.index + m[0].length;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}

// user=alice, client_id=app: each name a nameNode
function entityNodes(entity) {
  const nodes = [];
  for (const [k, v] of Object.entries(entity).filter(([, v]) => v !== "")) {
    if (nodes.length) nodes.push(", ");
    nodes.push(k + "=", nameNode(String(v)));
  }
  return nodes;
}

function clock(ms) {
  return new Date(ms).toISOString().slice(11, 19) + " UTC";
}

// the answer's JSON; an error answer (JSON or not: a proxy's or aiohttp's own page) throws
// with what the server said
async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  const text = await response.text();
  let body = null;
  try { body = JSON.parse(text); } catch (e) { body = null; }
  if (!response.ok || body === null) {
    const said = body && body.error ? body.error : text.trim().slice(0, 200) || response.statusText;
    throw new Error(`${response.status} ${said}`);
  }
  return body;
}

function setStatus(text) {
  document.getElementById("status").textContent = text;
}

function entityHash(id) {
  return "#entity=" + id;
}

// -- the overview ---------------------------------------------------------------------------

async function loadOverview() {
  const params = new URLSearchParams({
    sort: state.sort, desc: state.desc ? "1" : "0", offset: String(state.offset), limit: String(PAGE),
    q: document.getElementById("filter-text").value,
    quota: document.getElementById("filter-quota").value,
    throttled: document.getElementById("filter-throttled").checked ? "1" : "0",
  });
  const data = await getJSON("/console/api/entities?" + params);
  const body = document.querySelector("#entities tbody");
  body.replaceChildren(...data.rows.map((row) => overviewRow(row, data.now_ms)));
  const first = data.total ? data.offset + 1 : 0;
  document.getElementById("range").textContent =
    `windows ${first}-${data.offset + data.rows.length} of ${data.total}`;
  document.getElementById("prev").disabled = state.offset === 0;
  document.getElementById("next").disabled = data.offset + data.rows.length >= data.total;
  const missing = data.missing.length ? ` (no answer from ${data.missing.join(", ")})` : "";
  setStatus(`${data.workers} worker(s) at ${clock(data.now_ms)}${missing}`);
  for (const th of document.querySelectorAll("#entities th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === state.sort);
    th.classList.toggle("asc", th.dataset.sort === state.sort && !state.desc);
  }
}

function overviewRow(row, now) {
  const unit = UNITS[row.quota] || "";
  const named = entityNodes(row.entity);
  const link = el("a", { href: entityHash(row.id), "data-testid": "entity-link" }, ...(named.length ? named : ["(all)"]));
  const utilization = el("td", { class: "num", "data-testid": "utilization" });
  if (row.utilization !== null) {
    const pct = row.utilization * 100;
    const bar = el("span", { class: "bar" + (pct > 100 ? " over" : "") }, el("span"));
    bar.firstChild.style.width = Math.min(100, pct).toFixed(0) + "%";
    utilization.append(pct.toFixed(1) + "%", bar);
  } else {
    utilization.append("-");
  }
  const throttled = row.throttled_until
    ? el("span", { class: "throttled" }, "until " + clock(row.throttled_until)) : "no";
  let inForce = "-";
  if (row.in_force && row.in_force.kind === "directive") {
    inForce = `directive: ${row.in_force.action} ${row.in_force.throttle_time_ms} ms`;
  } else if (row.in_force) {
    inForce = "allocation: " + Object.entries(row.in_force.enforcers)
      .map(([e, limit]) => `${e}=${human(limit, unit)}`).join(", ");
  }
  const where = row.broker !== null ? "broker " + row.broker
    : row.enforcers.length ? row.enforcers.join(", ") : "all (cluster)";
  return el("tr", { "data-key": row.key },
    el("td", { class: "entity" }, link),
    el("td", {}, row.quota),
    el("td", {}, ...withNames(row.level || "-", namesOf(row.entity))),
    el("td", { class: "num", "data-testid": "limit" }, human(row.limit, unit)),
    el("td", { class: "num", "data-testid": "observed", "data-value": String(row.observed) }, rateText(row, unit)),
    utilization,
    el("td", {}, throttled),
    el("td", {}, inForce),
    el("td", {}, where),
    el("td", {}, `${((now - row.checked_ms) / 1000).toFixed(1)} s ago`));
}

// -- an entity ------------------------------------------------------------------------------

async function loadEntity(id) {
  const data = await getJSON("/console/api/entity?" + new URLSearchParams({ id }));
  document.getElementById("entity-title").replaceChildren(...entityNodes(data.entity));
  document.getElementById("entity-level").replaceChildren(
    ...withNames("config entity " + data.level, namesOf(data.entity)));
  const cards = data.windows.map((w) => windowCard(w, data.now_ms));
  if (!cards.length) cards.push(el("p", { class: "muted" }, "No active window of this entity on any worker."));
  document.getElementById("windows").replaceChildren(...cards);
  setStatus(`updated ${clock(data.now_ms)}`);
}

function windowCard(w, now) {
  const unit = UNITS[w.quota] || "";
  const where = w.broker !== null ? ` on broker ${w.broker}` : " (cluster-wide)";
  const card = el("div", { class: "window", "data-testid": "window", "data-quota": w.quota },
    el("h3", {}, w.quota + where),
    el("p", {}, `${w.observed === null ? "" : "rate "}${rateText(w, unit)} · quota ${human(w.limit, unit)}`,
      w.throttled_until ? el("span", { class: "throttled" }, ` · throttled until ${clock(w.throttled_until)}`) : ""));
  card.append(w.history ? chart(w, unit) : el("p", { class: "muted" }, "No history yet: charted from now on."));
  const levels = el("table", { class: "levels" }, el("tr", {}, el("th", {}, "Config level Kafka checks"), el("th", { class: "num" }, "Value")));
  const names = namesOf(w.entity);
  for (const level of w.precedence) {
    levels.append(el("tr", {}, el("td", {}, ...withNames(level.level, names)), el("td", { class: "num" }, level.value === null ? "-" : human(level.value, unit))));
  }
  card.append(levels, el("h4", {}, "Why (the explanation explain gives)"),
    el("pre", { "data-testid": "explanation" }, ...withNames(w.explanation, names)));
  return card;
}

function chart(w, unit) {
  const h = w.history;
  const width = 900, height = 200, left = 70, bottom = 20;
  const n = h.total.length;
  const parts = Object.entries(h.parts);
  const series = parts.length ? parts : [["rate", h.total]];
  let top = 0;
  for (let i = 0; i < n; i++) {
    let sum = 0;
    for (const [, values] of series) sum += values[i] || 0;
    top = Math.max(top, sum, h.limit[i] || 0);
  }
  top = top || 1;
  const x = (i) => left + (i / Math.max(1, n - 1)) * (width - left - 5);
  const y = (v) => height - bottom - (v / top) * (height - bottom - 10);
  const root = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img",
    "data-testid": "chart", "aria-label": `${w.quota} over the last ${Math.round(n / 60)} minutes` });
  root.append(svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width, y2: height - bottom }));
  const label = svg("text", { x: 4, y: 14 });
  label.textContent = human(top, unit);
  const start = svg("text", { x: left, y: height - 4 });
  start.textContent = `-${Math.round(n / 60)} min`;
  root.append(label, start);
  const base = new Array(n).fill(0);
  series.forEach(([name, values], k) => {
    let d = "";
    const upper = values.map((v, i) => base[i] + (v || 0));
    for (let i = 0; i < n; i++) d += (i ? "L" : "M") + x(i).toFixed(1) + "," + y(upper[i]).toFixed(1);
    for (let i = n - 1; i >= 0; i--) d += "L" + x(i).toFixed(1) + "," + y(base[i]).toFixed(1);
    root.append(svg("path", { d: d + "Z", fill: COLORS[k % COLORS.length], "fill-opacity": 0.55, "data-series": name }));
    upper.forEach((v, i) => { base[i] = v; });
  });
  const line = (values) => {
    let d = "";
    values.forEach((v, i) => { if (v !== null) d += (d ? "L" : "M") + x(i).toFixed(1) + "," + y(v).toFixed(1); });
    return d;
  };
  const limit = line(h.limit);
  if (limit) root.append(svg("path", { class: "limit", d: limit }));
  const rate = parts.length ? line(h.total) : "";
  if (rate) root.append(svg("path", { class: "rate", d: rate }));
  const startMs = h.start_s * 1000;
  for (const [ts] of w.throttles) {
    const i = (ts - startMs) / 1000;
    if (i >= 0 && i < n) root.append(svg("line", { class: "mark", x1: x(i), x2: x(i), y1: height - bottom, y2: height - bottom - 8 }));
  }
  const legend = el("p", { class: "legend" });
  series.forEach(([name], k) => {
    const swatch = el("i");
    swatch.style.background = COLORS[k % COLORS.length];
    legend.append(el("span", {}, swatch, parts.length ? "broker or gateway " + name : "rate"));
  });
  legend.append(el("span", { class: "muted" }, (parts.length
    ? "areas: usage per second by source · line: the rate over the quota window · " : "")
    + "dashed: quota · red ticks: throttles"));
  return el("div", {}, root, legend);
}

// -- quotas ---------------------------------------------------------------------------------

async function loadQuotas() {
  const data = await getJSON("/console/api/quotas");
  const body = document.querySelector("#quota-table tbody");
  body.replaceChildren(...data.quotas.map((q) => {
    const cell = el("td");
    if (data.editable) {
      const remove = el("button", { type: "button", "data-testid": "delete-quota" }, "delete");
      remove.addEventListener("click", () => change(partsOf(q.entity), "", q.quota));
      cell.append(remove);
    }
    return el("tr", {}, el("td", {}, ...withNames(q.level, namesOf(q.entity))), el("td", {}, q.quota),
      el("td", { class: "num" }, q.value === null ? "-" : String(q.value)), cell);
  }));
  document.getElementById("alter").hidden = !data.editable;
  document.getElementById("readonly").hidden = data.editable;
  setStatus(`${data.quotas.length} quota(s) configured`);
}

function partsOf(entity) {
  const types = { user: "users", client_id: "clients", ip: "ips", broker: "brokers" };
  return Object.entries(entity).filter(([k]) => k in types).map(([k, v]) =>
    v === "<default>" ? { type: types[k], default: true } : { type: types[k], name: String(v) });
}

function formParts() {
  const parts = [];
  for (const i of [1, 2]) {
    const type = document.getElementById("type-" + i).value;
    if (!type) continue;
    const isDefault = document.getElementById("default-" + i).checked;
    parts.push(isDefault ? { type, default: true } : { type, name: document.getElementById("name-" + i).value });
  }
  return parts;
}

async function change(entity, add, remove) {
  const result = document.getElementById("alter-result");
  const token = document.getElementById("token").value || sessionStorage.getItem("qs-console-token") || "";
  const response = await fetch("/console/api/quotas", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + token },
    body: JSON.stringify({ entity, add, delete: remove }),
  });
  const body = await response.json();
  result.classList.toggle("error", !response.ok);
  if (!response.ok) {
    result.textContent = body.error;
    return;
  }
  sessionStorage.setItem("qs-console-token", token);
  result.textContent = "written: " + body.written.map((r) => JSON.stringify(r.quotas)).join("; ")
    + (body.in_force ? "" : " (this worker has not read it back yet: the list shows it when it has)");
  await loadQuotas();
}

// -- routing --------------------------------------------------------------------------------

function route() {
  clearTimeout(state.timer);
  const hash = location.hash;
  const view = hash.startsWith("#entity=") ? "entity" : hash === "#quotas" ? "quotas" : "overview";
  for (const id of ["overview", "entity", "quotas"]) document.getElementById(id).hidden = id !== view;
  let load;
  if (view === "entity") {
    const id = hash.slice("#entity=".length);
    load = () => loadEntity(id);
  } else if (view === "quotas") {
    load = loadQuotas;
  } else {
    load = loadOverview;
  }
  const tick = async () => {
    try { await load(); } catch (e) { setStatus("error: " + e.message); }
    state.timer = setTimeout(tick, REFRESH_MS);
  };
  tick();
}

function start() {
  for (const th of document.querySelectorAll("#entities th[data-sort]")) {
    th.addEventListener("click", () => {
      const sort = th.dataset.sort;
      state.desc = sort === state.sort ? !state.desc : !["entity", "quota"].includes(sort);
      state.sort = sort;
      state.offset = 0;
      route();
    });
  }
  for (const id of ["filter-text", "filter-quota", "filter-throttled"]) {
    document.getElementById(id).addEventListener("input", () => { state.offset = 0; route(); });
  }
  document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
  document.getElementById("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); route(); });
  document.getElementById("next").addEventListener("click", () => { state.offset += PAGE; route(); });
  document.getElementById("alter").addEventListener("submit", (e) => {
    e.preventDefault();
    change(formParts(), document.getElementById("add-config").value, document.getElementById("delete-config").value)
      .catch((err) => { document.getElementById("alter-result").textContent = err.message; });
  });
  window.addEventListener("hashchange", route);
  route();
}

document.addEventListener("DOMContentLoaded", start);
