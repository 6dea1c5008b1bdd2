// @ts-check
/**
 * The Job page (#/job/<id>), imported by dashboard.js: the job's fields and why it
 * waits, its timeline (GET /api/v1/jobs/{id}/timeline) as a band chart of its states
 * over time and a table of the intervals with the decision, the reason and the jobs
 * that preempted it (linked when the caller may see them), its allocations over time,
 * its speed on each GPU type it has run on (GET /jobs/{id}'s type_throughput: measured
 * from its reports in cluster mode, the simulator's in local mode) as a table, its
 * reported metrics as charts, its events, its workers' logs (job_logs.js), and Cancel.
 * Charts are uPlot (the vendored global); states are told apart by the Okabe-Ito colour and by their
 * lane's text label, never by colour alone.
 */
import { announce, api, byId, clockName, duration, el, FINISHED, head, instant, reasonText, report, WAITING }
  from "./common.js";
import { logsSection } from "./job_logs.js";

/**
 * @typedef {import("./common.js").Job} Job
 * @typedef {import("./common.js").Page} Page
 * @typedef {{kind: string, sim_s: number|null, detail: string, at: string}} JobEvent
 * @typedef {{name: string, value: number, step: number}} Metric
 * @typedef {{id: string|null, name: string|null}} JobRef
 * @typedef {{node: string, gpus: number[]}} Placed
 * @typedef {{state: string, from_s: number|null, to_s: number|null, decision: string,
 *   reason: string, preempted_by: JobRef[], allocation: Placed[]|null}} Interval
 * @typedef {{job_id: string, status: string, now_s: number|null, intervals: Interval[]}} Timeline
 * @typedef {{gpu_type: string, steps_per_s: number, samples_per_s: number|null, gpus: number,
 *   batch_size: number|null, measured_s: number, source: string}} TypeThroughput
 * @typedef {{deadline_s: number|null, deadline: string|null, predicted_finish_s: number|null,
 *   predicted_finish: string|null, on_track: boolean|null}} Outlook
 */

/** @type {any} */
const uPlot = /** @type {any} */ (window).uPlot;

// Metric names gpuflow.train reports (docs/api.md, "Metrics from running jobs").
const CHARTS = [
  { name: "samples_per_s", title: "Throughput (samples/s)", colour: "#0072b2" },
  { name: "loss", title: "Loss", colour: "#d55e00" },
  { name: "batch_size", title: "Global batch size", colour: "#009e73" },
];
// The timeline's lanes, bottom to top, each in an Okabe-Ito colour (Okabe & Ito 2008).
const LANES = [
  { state: "Queued", colour: "#e69f00" },
  { state: "Preempted", colour: "#d55e00" },
  { state: "Suspended", colour: "#cc79a7" },
  { state: "Running", colour: "#009e73" },
];
const BAND_PX = 14; // the thickness of a state's band
const TICK_GAP_PX = 90; // the least room between two time ticks: "12h 30m" takes ~60 px
// The time axis' tick steps, in seconds: whole seconds, minutes, hours and days.
const TICK_STEPS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
  43200, 86400, 172800, 604800];

/** @param {string} jobId @returns {Page} */
export function jobPage(jobId) {
  /** @type {Map<string, any>} */
  const plots = new Map();
  const logs = logsSection(jobId);
  return {
    mount(view) {
      const cancel = el("button", { type: "button", class: "danger", id: "cancel-job" }, "Cancel job");
      cancel.addEventListener("click", () => void cancelJob(jobId, this).catch(report));
      view.append(
        el("h2", { id: "job-title" }, "Job"),
        el("dl", { class: "job", id: "job-fields" }), el("p", {}, cancel),
        el("h3", { id: "type-throughput-title" }, "Throughput by GPU type"),
        el("table", { id: "type-throughput", "aria-labelledby": "type-throughput-title" },
          head(["GPU type", "GPUs", "Batch", "Steps/s", "Samples/s", `Measured at (${clockName()})`, "Source"],
            [1, 2, 3, 4]),
          el("tbody", { id: "type-throughput-rows" })),
        el("h3", {}, "Timeline"), el("div", { class: "charts", id: "timeline-chart" }),
        el("table", { id: "timeline-table" }, el("thead", {}, el("tr", {},
          ...["State", "From", "To", "Decision", "Reason", "Preempted by"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", { id: "timeline-rows" })),
        el("h3", {}, "Allocations over time"),
        el("table", { id: "allocation-table" }, el("thead", {}, el("tr", {},
          ...["From", "To", "Decision", "Nodes and GPUs"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", { id: "allocation-rows" })),
        el("h3", {}, "Metrics"), el("div", { class: "charts", id: "charts" }),
        el("h3", {}, "Events"),
        el("p", {}, el("a", { href: `#/events?job=${jobId}` }, "This job in the cluster's event stream")),
        el("table", {}, el("thead", {}, el("tr", {}, ...["Event", `Time (${clockName()})`, "Detail", "Recorded at"]
          .map((h) => el("th", { scope: "col" }, h)))), el("tbody", { id: "job-events" })),
      );
      logs.mount(view);
    },
    async refresh() {
      const logsShown = logs.refresh(); // reports its own failure in its section
      /** @type {[Job, {data: JobEvent[]}, {data: Metric[]}, Timeline]} */
      const [job, events, metrics, timeline] = await Promise.all([
        api(`/jobs/${jobId}`), api(`/jobs/${jobId}/events`), api(`/jobs/${jobId}/metrics?limit=1000`),
        api(`/jobs/${jobId}/timeline`),
      ]);
      byId("job-title").textContent = `Job ${job.name}`;
      const position = /** @type {any} */ (job).queue_position;
      const fields = [
        ["Id", job.id], ["Status", job.status], ["Tenant", job.tenant], ["Model", job.model],
        ["GPUs", String(job.num_gpus)], ["Progress", `${(job.progress * 100).toFixed(1)} %`],
        ["Nodes", job.nodes || "—"], ["Restarts", String(job.restarts)],
        ["Position in queue", position === null || position === undefined ? "—" : String(position)],
        ["Why it waits", WAITING.includes(job.status) ? reasonText(job) : "—"],
        ...deadlineFields(/** @type {any} */ (job)),
      ];
      byId("job-fields").replaceChildren(...fields.flatMap(([k, v]) =>
        [el("dt", {}, k), el("dd", { "data-field": k.toLowerCase() }, v)]));
      /** @type {HTMLButtonElement} */ (byId("cancel-job")).disabled = FINISHED.includes(job.status);
      drawTypeThroughput(/** @type {any} */ (job).type_throughput ?? []);
      drawTimeline(timeline, plots);
      byId("job-events").replaceChildren(...events.data.map((e) => el("tr", {}, el("td", {}, e.kind),
        el("td", {}, instant(e.sim_s)), el("td", {}, e.detail || "—"),
        el("td", {}, new Date(e.at).toLocaleString()))));
      drawCharts(metrics.data, plots);
      await logsShown;
    },
  };
}

/** A deadline job's deadline beside its predicted finish (GET /jobs/{id} forecasts it as
 * the what-if page does, under the active policy); none for a best-effort job.
 * @param {Outlook} job @returns {[string, string][]} */
function deadlineFields(job) {
  if (job.deadline_s === null || job.deadline_s === undefined) return [];
  /** @param {number} s @param {string|null} at */
  const when = (s, at) => `${duration(s)} after submission` +
    (at ? ` (${new Date(at).toLocaleString()})` : "");
  const predicted = job.predicted_finish_s === null
    ? "not forecast" : when(job.predicted_finish_s, job.predicted_finish);
  const verdict = job.on_track === null ? "unknown" : job.on_track ? "on track" : "misses its deadline";
  return [["Deadline", when(job.deadline_s, job.deadline)], ["Predicted finish", `${predicted}: ${verdict}`]];
}

/** One row per GPU type the job has run on, types by name as the API lists them.
 * @param {TypeThroughput[]} rows */
function drawTypeThroughput(rows) {
  const num = (/** @type {number|null} */ v, /** @type {number} */ digits) =>
    el("td", { class: "num" }, v === null ? "—" : v.toFixed(digits));
  byId("type-throughput-rows").replaceChildren(...(rows.length ? rows.map((r) =>
    el("tr", { "data-gpu-type": r.gpu_type }, el("th", { scope: "row" }, r.gpu_type),
      el("td", { class: "num" }, String(r.gpus)),
      el("td", { class: "num" }, r.batch_size === null ? "—" : String(r.batch_size)),
      num(r.steps_per_s, 3), num(r.samples_per_s, 1), el("td", {}, instant(r.measured_s)),
      el("td", {}, r.source === "measured" ? "its reports" : "simulated")))
    : [el("tr", {}, el("td", { colspan: "7" }, "Not run on any GPU type yet."))]));
}

/** @param {string} jobId @param {Page} page */
async function cancelJob(jobId, page) {
  /** @type {Job} */
  const job = await api(`/jobs/${jobId}/cancel`, { method: "POST" });
  announce(`Job ${job.name} is now ${job.status}.`);
  await page.refresh();
}

/** @param {number|null} s */
function at(s) {
  return s === null ? "now" : instant(s);
}

/** @param {JobRef[]} refs @returns {(Node|string)[]} */
function preemptors(refs) {
  if (!refs.length) return ["—"];
  return refs.flatMap((r, i) => [i ? ", " : "", r.id === null
    ? "another tenant's job"
    : el("a", { href: `#/job/${r.id}` }, `${r.name ?? "job"} (${r.id.slice(0, 8)})`)]);
}

/** @param {Placed[]} placed */
function placement(placed) {
  return placed.map((p) => `${p.node}: GPU ${p.gpus.join(", ")}`).join("; ");
}

/** The state band chart, the interval table and the allocations table.
 * @param {Timeline} timeline @param {Map<string, any>} plots */
function drawTimeline(timeline, plots) {
  const spans = timeline.intervals.filter((i) => i.from_s !== null);
  const now = timeline.now_s;
  byId("timeline-rows").replaceChildren(...timeline.intervals.map((i) => el("tr", { "data-state": i.state },
    el("td", {}, i.state), el("td", {}, at(i.from_s)), el("td", {}, i.to_s === null ? "now" : at(i.to_s)),
    el("td", {}, i.decision), el("td", { class: "reason" }, i.reason || "—"),
    el("td", { class: "preempted-by" }, ...preemptors(i.preempted_by)))));
  const placed = timeline.intervals.filter((i) => i.allocation);
  byId("allocation-rows").replaceChildren(...(placed.length ? placed.map((i) => el("tr", {},
    el("td", {}, at(i.from_s)), el("td", {}, i.to_s === null ? "now" : at(i.to_s)), el("td", {}, i.decision),
    el("td", {}, placement(i.allocation ?? [])))) : [el("tr", {}, el("td", { colspan: "4" }, "Not run yet."))]));
  // The chart: one series per state, its band drawn from each interval's start to its
  // end, on a time axis of the time elapsed since the first interval began (readable on
  // either clock: cluster mode's are Unix seconds).
  const ends = spans.map((i) => i.to_s ?? Math.max(now ?? 0, i.from_s ?? 0));
  const t0 = spans.length ? Math.min(...spans.map((i) => /** @type {number} */ (i.from_s))) : 0;
  const xs = [...new Set([...spans.map((i) => /** @type {number} */ (i.from_s)), ...ends])].sort((a, b) => a - b);
  /** @type {(number|null)[][]} */
  const ys = LANES.map((lane, k) => xs.map((x) => spans.some((i, j) =>
    i.state === lane.state && /** @type {number} */ (i.from_s) <= x && x <= ends[j]) ? k : null));
  const data = [xs.map((x) => x - t0), ...ys];
  const label = `States over time: ${spans.map((i) => `${i.state} from ${at(i.from_s)}`).join(", ") || "none yet"}`;
  const axis = `time since ${instant(t0)} (${clockName()})`;
  const plot = plots.get("timeline");
  if (plot) {
    plot.setData(data);
    plot.root.parentElement?.setAttribute("aria-label", label);
    return;
  }
  if (!xs.length) return;
  // Framed as the charts are, but not one of them: "figure.chart" are the metrics.
  const holder = el("figure", { class: "timeline", role: "img", "aria-label": label,
    style: "border: 1px solid var(--line); padding: 0.3rem; margin: 0" },
  el("h3", {}, `States over time (${clockName()})`));
  byId("timeline-chart").replaceChildren(holder);
  plots.set("timeline", new uPlot({
    width: 720, height: 200, scales: { x: { time: false }, y: { range: [-0.6, LANES.length - 0.4] } },
    legend: { show: true },
    series: [{ label: "elapsed", value: (/** @type {any} */ _u, /** @type {number|null} */ v) => v === null ? "—" : duration(v) },
      ...LANES.map((lane) => ({ label: lane.state, stroke: lane.colour, width: BAND_PX, spanGaps: false,
        points: { show: false }, value: (/** @type {any} */ _u, /** @type {number|null} */ v) => v === null ? "" : lane.state }))],
    axes: [
      // Ticks at least TICK_GAP_PX apart on whole seconds, minutes or hours, each a short
      // duration: labels never collide or repeat.
      { label: axis, space: TICK_GAP_PX, incrs: TICK_STEPS_S,
        values: (/** @type {any} */ _u, /** @type {number[]} */ ticks) => ticks.map((t) => duration(t)) },
      { size: 90, splits: () => LANES.map((_, k) => k),
        values: (/** @type {any} */ _u, /** @type {number[]} */ ticks) => ticks.map((t) => LANES[t]?.state ?? "") },
    ],
  }, data, holder));
}

/** One uPlot chart per metric, created once and given new data on each poll.
 * @param {Metric[]} metrics @param {Map<string, any>} plots */
function drawCharts(metrics, plots) {
  const box = byId("charts");
  const drawn = CHARTS.filter((c) => plots.has(c.name)).length;
  if (!metrics.length && !drawn) {
    box.replaceChildren(el("p", { class: "muted" }, "No metrics reported yet."));
    return;
  }
  for (const { name, title, colour } of CHARTS) {
    const rows = metrics.filter((m) => m.name === name).sort((a, b) => a.step - b.step);
    if (!rows.length) continue;
    /** @type {[number[], number[]]} */
    const data = [rows.map((m) => m.step), rows.map((m) => m.value)];
    if (plots.has(name)) { plots.get(name).setData(data); continue; }
    if (!CHARTS.some((c) => plots.has(c.name))) box.replaceChildren();
    const holder = el("figure", { class: "chart", role: "img", "aria-label": `${title} by step, ${rows.length} reports` },
      el("h3", {}, title));
    box.append(holder);
    plots.set(name, new uPlot({ width: 420, height: 220, scales: { x: { time: false } },
      series: [{ label: "step" }, { label: name, stroke: colour, width: 2 }] }, data, holder));
  }
}
