// The shardd dashboard: a job list (#/) and a job page (#/job/<id>) that poll
// the coordinator's /api every 2 s. Charts are plain SVG drawn here; each
// chart's <svg> carries data-points (points drawn) so tests can read the DOM.
"use strict";

const POLL_MS = 2000;
let timer = null;

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function fmt(v, digits) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
  return v.toFixed(digits === undefined ? (a >= 100 ? 0 : a >= 1 ? 3 : 4) : digits);
}
function duration(s) {
  if (s === null || s === undefined || s < 0 || !isFinite(s)) return "–";
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), sec = s % 60;
  return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(sec).padStart(2, "0")}s` : `${sec}s`;
}
function bytes(b) {
  if (!b) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) b /= 1024, i++;
  return `${b.toFixed(i ? 1 : 0)} ${u[i]}`;
}
function when(ms) { return ms ? new Date(ms).toLocaleString() : "–"; }
function state(s) { return `<span class="state ${esc(s)}">${esc(s)}</span>`; }
function bar(step, total) {
  const pct = total > 0 ? Math.min(100, 100 * step / total) : 0;
  return `<span class="bar"><span style="width:${pct.toFixed(1)}%"></span></span>${step}/${total}`;
}

async function api(path) {
  const res = await fetch(path, {credentials: "same-origin", cache: "no-store"});
  if (res.status === 401) { location.href = "/login"; throw new Error("unauthenticated"); }
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

// ---- SVG line chart -------------------------------------------------------

// xs/ys: equal-length arrays (ys may hold nulls); marks: {restarts, commits} steps.
function chart(id, title, color, xs, ys, marks, opts) {
  return linesChart(id, title, xs, [{color, ys}], marks, opts);
}

// Several lines on one y axis (a preference job's rewards): lines are
// [{name, color, ys}]; each named polyline carries data-series=<name> and
// data-points on the <svg> counts the points of all lines.
function linesChart(id, title, xs, lines, marks, opts) {
  const W = 400, H = 170, L = 46, R = 8, T = 8, B = 20;
  const drawn = lines.map(line => {
    const pts = [];
    for (let i = 0; i < xs.length; i++) if (line.ys[i] !== null && line.ys[i] !== undefined && isFinite(line.ys[i])) pts.push([xs[i], line.ys[i]]);
    return Object.assign({pts}, line);
  });
  const all = [].concat(...drawn.map(l => l.pts));
  let svg = `<svg id="chart-${id}" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" data-points="${all.length}">`;
  if (all.length === 0) {
    svg += `<text x="${W / 2}" y="${H / 2}" text-anchor="middle">no data yet</text></svg>`;
    return `<div class="chart"><h3>${esc(title)}</h3>${svg}</div>`;
  }
  let x0 = Math.min(...all.map(p => p[0])), x1 = Math.max(...all.map(p => p[0]));
  let y0 = Math.min(...all.map(p => p[1])), y1 = Math.max(...all.map(p => p[1]));
  const useLog = !!(opts && opts.log && y0 > 0);
  if (useLog) { y0 = Math.log10(y0); y1 = Math.log10(y1); }
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y1 += Math.abs(y1) * 0.05 + 1e-9; y0 -= Math.abs(y0) * 0.05 + 1e-9; }
  const tx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const ty = y => T + (1 - ((useLog ? Math.log10(y) : y) - y0) / (y1 - y0)) * (H - T - B);
  svg += `<line class="axis" x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}"/>`;
  svg += `<line class="axis" x1="${L}" y1="${T}" x2="${L}" y2="${H - B}"/>`;
  const yl = v => fmt(useLog ? Math.pow(10, v) : v);
  svg += `<text x="${L - 4}" y="${T + 8}" text-anchor="end">${yl(y1)}</text>`;
  svg += `<text x="${L - 4}" y="${H - B}" text-anchor="end">${yl(y0)}</text>`;
  svg += `<text x="${L}" y="${H - 6}">${x0}</text><text x="${W - R}" y="${H - 6}" text-anchor="end">step ${x1}</text>`;
  for (const s of marks.commits) if (s >= x0 && s <= x1)
    svg += `<line class="commit" x1="${tx(s)}" y1="${T}" x2="${tx(s)}" y2="${H - B}"><title>checkpoint ${s}</title></line>`;
  for (const s of marks.restarts) if (s >= x0 && s <= x1)
    svg += `<line class="restart" x1="${tx(s)}" y1="${T}" x2="${tx(s)}" y2="${H - B}"><title>new attempt from step ${s}</title></line>`;
  for (const l of drawn) {
    if (l.pts.length === 0) continue;
    const d = l.pts.map(p => `${tx(p[0]).toFixed(1)},${ty(p[1]).toFixed(1)}`).join(" ");
    const name = l.name ? ` data-series="${esc(l.name)}"` : "";
    svg += `<polyline class="line" stroke="${l.color}"${name} points="${d}"/>`;
  }
  svg += `</svg>`;
  // One line: its last value beside the title; several: each line's name in its colour and last value.
  const last = l => l.pts.length ? fmt(l.pts[l.pts.length - 1][1]) : "–";
  const legend = drawn.length === 1 ? last(drawn[0])
    : drawn.map(l => `<span style="color:${l.color}">${esc(l.name)}</span> ${last(l)}`).join(" · ");
  return `<div class="chart"><h3>${esc(title)} <span class="muted">${legend}</span></h3>${svg}</div>`;
}

// The held-out evaluation's loss and greedy exact match (eval: in the job
// file), only when the metrics carry them; null between evaluated steps.
function evalCharts(m, marks) {
  if (!m.eval_loss) return "";
  const matched = (m.eval_exact_match || []).some(v => v !== null);
  return chart("eval_loss", "Loss (eval)", "#17683a", m.steps, m.eval_loss, marks) +
    (matched ? chart("eval_exact_match", "Exact match (eval)", "#8a4fd1", m.steps, m.eval_exact_match, marks) : "");
}

// The optional figures' charts, drawn from the coordinator's table of them
// (GET /api/metric_fields: name, display, split, chart, series, color), only
// for the figures the metrics carry: one chart per chart group, id = the
// figure's name for a group of one, else the group's name (eval_* series are
// null between evaluated steps).
let metricFields = null;
async function figureFields() {
  if (!metricFields) metricFields = await api("/api/metric_fields");
  return metricFields;
}
function figureCharts(m, marks, fields) {
  const groups = [];
  for (const f of fields) {
    if (!f.chart || !m[f.name]) continue;
    let g = groups.find(x => x.chart === f.chart);
    if (!g) groups.push(g = {chart: f.chart, split: f.split, members: []});
    g.members.push(f);
  }
  const where = split => split === "eval" ? " (eval)" : " (train)";
  return groups.map(g => g.members.length === 1
    ? chart(g.members[0].name, g.members[0].display + where(g.split), g.members[0].color, m.steps, m[g.members[0].name], marks)
    : linesChart(g.chart, g.chart.replace(/_/g, " ") + where(g.split), m.steps,
                 g.members.map(f => ({name: f.series, color: f.color, ys: m[f.name]})), marks)).join("");
}

// A sparse model's expert load: one heatmap per sparse layer, step (x) by
// expert (y), each cell's shade the expert's share of the layer's routed
// slots relative to an even share (white = 0, full = 2x even or more).
// data-cells on each <svg> counts the cells drawn.
function expertLoadCharts(m) {
  const e = m.expert_load;
  if (!e || !e.experts) return "";
  const W = 400, H = 170, L = 46, T = 8, B = 20, R = 8;
  const even = 1 / e.experts, n = e.load.length;
  const cw = (W - L - R) / Math.max(n, 1), ch = (H - T - B) / e.experts;
  let out = "";
  for (let l = 0; l < e.layers; l++) {
    let cells = "", count = 0;
    for (let i = 0; i < n; i++) {
      const point = e.load[i];
      if (!point) continue;
      for (let x = 0; x < e.experts; x++) {
        const share = point[l * e.experts + x];
        if (share === null || share === undefined) continue;
        const t = Math.min(1, share / (2 * even));
        const c = Math.round(255 * (1 - t));
        cells += `<rect x="${(L + i * cw).toFixed(1)}" y="${(T + x * ch).toFixed(1)}" width="${(cw + 0.5).toFixed(1)}" height="${(ch + 0.5).toFixed(1)}" fill="rgb(255,${c},${c})"><title>step ${m.steps[i]} expert ${x}: ${(100 * share).toFixed(1)} %</title></rect>`;
        count++;
      }
    }
    out += `<div class="chart"><h3>Expert load, layer ${l} <span class="muted">step × expert, darker = busier</span></h3>
      <svg id="expert_load_${l}" viewBox="0 0 ${W} ${H}" data-cells="${count}">${cells}
      <text x="${L - 4}" y="${T + 10}" text-anchor="end" font-size="10">0</text>
      <text x="${L - 4}" y="${H - B}" text-anchor="end" font-size="10">${e.experts - 1}</text>
      <text x="${L}" y="${H - 4}" font-size="10">${m.steps[0] ?? ""}</text>
      <text x="${W - R}" y="${H - 4}" text-anchor="end" font-size="10">${m.steps[n - 1] ?? ""}</text></svg></div>`;
  }
  return out;
}

// ---- Pages -----------------------------------------------------------------

async function listPage() {
  const data = await api("/api/jobs");
  const rows = data.jobs.map(j => {
    const p = j.progress;
    return `<tr><td><a href="#/job/${encodeURIComponent(j.id)}">${esc(j.id)}</a></td><td>${state(j.state)}${j.state === "QUEUED" && j.reason ? `<div class="muted">${esc(j.reason)}</div>` : ""}</td>
      <td>${bar(p.step, p.total_steps)}</td><td class="num">${fmt(p.loss)}</td>
      <td class="num">${fmt(p.tokens_per_s, 0)}</td><td class="num">${j.state === "RUNNING" ? duration(p.eta_s) : "–"}</td>
      <td class="num">${j.restarts}</td><td class="num">${j.world_size}</td><td>${esc(j.launcher)}</td>
      <td>${when(j.created_unix_ms)}</td></tr>`;
  }).join("");
  document.getElementById("app").innerHTML = `<h1>Jobs</h1>
    <table id="jobs" data-jobs="${data.jobs.length}"><tr><th>Job</th><th>State</th><th>Progress</th><th>Loss</th>
    <th>Tokens/s</th><th>ETA</th><th>Restarts</th><th>World</th><th>Launcher</th><th>Submitted</th></tr>
    ${rows || '<tr><td colspan="10" class="muted">No jobs yet: shardctl submit JOB.yaml</td></tr>'}</table>`;
}

async function jobPage(id) {
  const q = encodeURIComponent(id);
  const [j, m, fields] = await Promise.all([api(`/api/jobs/${q}`), api(`/api/jobs/${q}/metrics?max_points=2000`),
                                           figureFields()]);
  const p = j.progress;
  const marks = {restarts: m.restarts, commits: m.commits};
  const card = (label, value) => `<div class="card"><span class="muted">${label}</span><b>${value}</b></div>`;
  const charts = [
    chart("loss", "Loss (train)", "#2a62c9", m.steps, m.loss, marks),
    evalCharts(m, marks),
    figureCharts(m, marks, fields),
    expertLoadCharts(m),
    chart("lr", "Learning rate", "#8a4fd1", m.steps, m.lr, marks),
    chart("grad_norm", "Gradient norm", "#d1622a", m.steps, m.grad_norm, marks),
    chart("tokens_per_s", "Tokens/s", "#17683a", m.steps, m.tokens_per_s, marks),
    chart("loss_scale", "Loss scale", "#777", m.steps, m.loss_scale, marks, {log: true}),
  ].join("");
  // Straggler detection and the flight recorder (docs/control-plane.md): a flagged
  // rank's row carries class="straggler" and a STRAGGLER badge.
  const workers = j.workers.map(w => `<tr${w.straggler ? ' class="straggler"' : ""} data-rank="${w.rank}"><td class="num">${w.rank}</td><td>${esc(w.hostname)}</td><td class="num">${w.pid}</td>
      <td>${esc(w.state)}${w.straggler ? ' <span class="badge">STRAGGLER</span>' : ""}</td><td class="num">${w.step}</td><td class="num">${w.heartbeat_age_s < 0 ? "never" : fmt(w.heartbeat_age_s, 1) + " s"}</td>
      <td class="num">${bytes(w.rss_bytes)}</td><td class="num">${fmt(w.step_seconds)}</td><td class="num">${w.compute_seconds > 0 ? fmt(w.compute_seconds) : "–"}</td>
      <td>${esc(w.collective || "–")}</td><td>${esc(w.devices || "cpu")}</td></tr>`).join("");
  const stall = j.stall && j.stall.text ? `<div id="stall" class="stall"><b>Stall, attempt ${j.stall.attempt} (${esc(j.stall.trigger)}):</b> ${esc(j.stall.text)}</div>` : "";
  const events = j.events.slice().reverse().map(e => `<tr><td>${when(e.unix_ms)}</td><td class="num">${e.attempt}</td>
      <td>${esc(e.kind)}</td><td>${state(e.state)}</td><td>${esc(e.message)}</td></tr>`).join("");
  const ckpts = j.checkpoints.map(c => `<tr><td class="num">${c.step}</td><td class="num">${c.world}</td><td class="num">${c.files}</td>
      <td class="num">${bytes(c.bytes)}</td><td>${when(c.committed_unix_ms)}</td><td>${esc(c.path)}</td></tr>`).join("");
  document.getElementById("app").innerHTML = `<h1>${esc(j.id)} ${state(j.state)}</h1>
    ${j.reason ? `<p class="muted">${esc(j.reason)}</p>` : ""}${stall}
    <div class="cards">${card("Progress", bar(p.step, p.total_steps))}${card("Loss", fmt(p.loss))}
      ${card("LR", fmt(p.lr))}${card("Tokens/s", fmt(p.tokens_per_s, 0))}
      ${card("MFU", p.mfu >= 0 ? (100 * p.mfu).toFixed(1) + " %" : "unknown")}${card("Step time", fmt(p.step_seconds) + " s")}
      ${card("ETA", j.state === "RUNNING" ? duration(p.eta_s) : "–")}${card("Attempt", j.attempt)}
      ${card("Restarts", `${j.restarts}/${j.max_restarts}`)}${card("Committed", p.last_committed_step >= 0 ? p.last_committed_step : "none")}</div>
    <div class="legend">${m.total_rows} steps reported, ${m.steps.length} points drawn
      <i style="background:#2a9d55"></i>checkpoint committed <i style="background:#d33"></i>new attempt (restart or preemption)
      · ${m.eval_loss ? "held-out evaluation: the eval charts" : "no held-out evaluation reported (eval: in the job file)"}</div>
    <div class="charts" id="charts">${charts}</div>
    <h2>Workers</h2><table id="workers"><tr><th>Rank</th><th>Host</th><th>PID</th><th>State</th><th>Step</th>
      <th>Heartbeat age</th><th>RSS</th><th>Step time (s)</th><th>Compute/step (s)</th><th>Collective</th><th>Devices</th></tr>${workers}</table>
    <h2>Events</h2><table id="events"><tr><th>Time</th><th>Attempt</th><th>Kind</th><th>State</th><th>Message</th></tr>${events}</table>
    <h2>Committed checkpoints</h2><table id="checkpoints"><tr><th>Step</th><th>World</th><th>Files</th><th>Size</th>
      <th>Committed</th><th>Path</th></tr>${ckpts || '<tr><td colspan="6" class="muted">none yet</td></tr>'}</table>
    <h2>Admission plan</h2><pre id="plan">${esc(j.plan || "not recorded")}</pre>`;
}

async function refresh() {
  clearTimeout(timer);
  const hash = location.hash || "#/";
  const status = document.getElementById("status");
  try {
    if (hash.startsWith("#/job/")) await jobPage(decodeURIComponent(hash.slice(6)));
    else await listPage();
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = "1";
  } catch (e) {
    status.textContent = `error: ${e.message}`;
  }
  timer = setTimeout(refresh, POLL_MS);
}

window.addEventListener("hashchange", refresh);
refresh();
