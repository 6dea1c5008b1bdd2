// @ts-check
/**
 * The Replays page (#/replays), registered by dashboard.js: upload a trace, run a replay
 * (one policy) or a sweep (several policies or clusters) with a progress bar, pick
 * finished replays to compare side by side (headline figures, JCT CDF, utilisation and
 * queue length over time, Themis finish-time fairness) and download their result files.
 * Reads /api/v1/traces, /replays, /replays/sweeps/{id}, /replays/{id}/series and
 * /replays/{id}/files/{name}.
 */
import { comparisonChart } from "./charts.js";
import { announce, api, button, byId, download, duration, el, fixed, head, percent,
  replaceKeepingFocus, report, send } from "./common.js";

/**
 * @typedef {{id: number, name: string, fmt: string, jobs: number, span_s: number}} Trace
 * @typedef {{id: number, trace_id: number, sweep_id: number|null, policy: string,
 *   cluster: string, status: string, progress: number, error: string|null}} Replay
 * @typedef {{t_s: number[], gpus_total: number[], gpus_allocated: number[],
 *   gpus_busy: number[], queued: number[], running: number[]}} Timeline
 * @typedef {{ftf_jobs: number|null, jain_index: number|null, avg_ftf_rho: number|null,
 *   max_ftf_rho: number|null, frac_ftf_rho_gt_1: number|null, ftf_rho: number[],
 *   ftf_fraction: number[]}} Fairness
 * @typedef {{id: number, policy: string, cluster: string, jobs: number, jct_s: number[],
 *   jct_fraction: number[], timeline: Timeline, fairness: Fairness}} Series
 * @typedef {{avg_jct_s: number|null, p95_jct_s: number|null, makespan_s: number,
 *   gpu_utilization: number, finished: number, jobs: number}} Summary
 */

const FILES = ["summary.json", "jobs.csv", "timeline.csv"];
const LISTED = 50; // the most recent replays listed to pick from
const DONE = ["succeeded", "failed"];
const POLICIES_LEGEND = "Policies (two or more make a sweep)";

/** Labels that tell runs apart: the policy, with the cluster and id added where needed.
 * @param {Series[]} runs @returns {string[]} */
function labels(runs) {
  const count = (/** @type {(s: Series) => string} */ key) => (/** @type {Series} */ s) =>
    runs.filter((r) => key(r) === key(s)).length;
  const byPolicy = count((s) => s.policy);
  const byBoth = count((s) => `${s.policy} ${s.cluster}`);
  return runs.map((s) => byPolicy(s) === 1 ? s.policy
    : byBoth(s) === 1 ? `${s.policy} on ${s.cluster}` : `${s.policy} on ${s.cluster} #${s.id}`);
}

/** @returns {import("./common.js").Page} */
export function replaysPage() {
  /** @type {Map<number, Trace>} */
  let traces = new Map();
  /** @type {Set<number>} */
  const compared = new Set();
  /** @type {Map<number, Series>} */
  const series = new Map();
  /** @type {Map<number, Summary>} */
  const summaries = new Map();
  /** @type {{kind: "replay"|"sweep", id: number}|null} */
  let run = null;
  let drawn = "";
  /** @type {any[]} */
  let plots = [];

  async function upload() {
    const input = /** @type {HTMLInputElement} */ (byId("trace-file"));
    const file = input.files?.[0];
    if (!file) { announce("Choose a trace file first."); input.focus(); return; }
    const form = new FormData();
    form.append("file", file);
    /** @type {Trace} */
    const trace = await api("/traces", { method: "POST", body: form });
    input.value = "";
    await loadTraces();
    /** @type {HTMLSelectElement} */ (byId("run-trace")).value = String(trace.id);
    announce(`Trace ${trace.name} uploaded: ${trace.jobs} jobs over ${duration(trace.span_s)}.`);
  }

  async function loadTraces() {
    /** @type {{data: Trace[]}} */
    const list = await api("/traces?limit=1000");
    traces = new Map(list.data.map((t) => [t.id, t]));
    const select = /** @type {HTMLSelectElement} */ (byId("run-trace"));
    const chosen = select.value;
    select.replaceChildren(...list.data.map((t) =>
      el("option", { value: String(t.id) }, `${t.name} (#${t.id}, ${t.jobs} jobs)`)));
    if (chosen && traces.has(Number(chosen))) select.value = chosen;
  }

  async function start() {
    const trace = Number(/** @type {HTMLSelectElement} */ (byId("run-trace")).value);
    const policies = [...document.querySelectorAll("#run-policies input:checked")]
      .map((i) => /** @type {HTMLInputElement} */ (i).value);
    const clusters = /** @type {HTMLInputElement} */ (byId("run-clusters")).value
      .split(",").map((c) => c.trim()).filter(Boolean);
    const options = {
      seed: Number(/** @type {HTMLInputElement} */ (byId("run-seed")).value),
      interval_s: Number(/** @type {HTMLInputElement} */ (byId("run-interval")).value),
    };
    if (!trace) { announce("Upload or choose a trace first."); return; }
    if (!policies.length || !clusters.length) { announce("Choose at least one policy and one cluster."); return; }
    if (policies.length === 1 && clusters.length === 1) {
      /** @type {Replay} */
      const replay = await send("/replays", "POST",
        { trace_id: trace, policy: policies[0], cluster: clusters[0], ...options });
      run = { kind: "replay", id: replay.id };
      announce(`Replay ${replay.id} queued.`);
    } else {
      /** @type {{id: number, replays: Replay[]}} */
      const sweep = await send("/replays/sweeps", "POST",
        { trace_ids: [trace], policies, clusters, ...options });
      run = { kind: "sweep", id: sweep.id };
      announce(`Sweep ${sweep.id} queued: ${sweep.replays.length} replays.`);
    }
    compared.clear();
    showProgress(0, "queued");
    await refresh();
  }

  /** @param {number} fraction @param {string} text */
  function showProgress(fraction, text) {
    const bar = /** @type {HTMLProgressElement} */ (byId("run-progress"));
    bar.value = fraction;
    bar.setAttribute("aria-valuetext", `${Math.round(fraction * 100)} %, ${text}`);
    byId("run-state").textContent = run ? `${run.kind === "sweep" ? "Sweep" : "Replay"} ${run.id}: ${text}` : text;
  }

  async function followRun() {
    if (!run) return;
    if (run.kind === "replay") {
      /** @type {Replay} */
      const r = await api(`/replays/${run.id}`);
      showProgress(r.progress, r.error ? `${r.status}: ${r.error}` : r.status);
      if (DONE.includes(r.status)) { if (r.status === "succeeded") compared.add(r.id); run = null; }
      return;
    }
    /** @type {{status: string, progress: number, replays: Replay[]}} */
    const sweep = await api(`/replays/sweeps/${run.id}`);
    const finished = sweep.replays.filter((r) => DONE.includes(r.status)).length;
    showProgress(sweep.progress, `${sweep.status}, ${finished} of ${sweep.replays.length} replays finished`);
    if (finished === sweep.replays.length) {
      for (const r of sweep.replays) if (r.status === "succeeded") compared.add(r.id);
      run = null;
    }
  }

  /** @param {Replay[]} replays */
  function listReplays(replays) {
    const rows = replays.map((r) => {
      const box = el("input", { type: "checkbox", "data-key": `compare-${r.id}`,
        "aria-label": `Compare replay ${r.id} (${r.policy} on ${r.cluster})` });
      const check = /** @type {HTMLInputElement} */ (box);
      check.checked = compared.has(r.id);
      check.disabled = r.status !== "succeeded";
      check.addEventListener("change", () => {
        if (check.checked) compared.add(r.id); else compared.delete(r.id);
        void drawComparison().catch(report);
      });
      const trace = traces.get(r.trace_id);
      return el("tr", { "data-replay": String(r.id) },
        el("td", {}, check), el("td", { class: "num" }, String(r.id)),
        el("td", {}, trace ? trace.name : `#${r.trace_id}`), el("td", {}, r.policy), el("td", {}, r.cluster),
        el("td", {}, r.sweep_id === null ? "—" : String(r.sweep_id)),
        el("td", { title: r.error || "" }, r.error ? `${r.status}: ${r.error}` : r.status),
        el("td", { class: "num" }, `${Math.round(r.progress * 100)} %`));
    });
    replaceKeepingFocus(byId("replay-rows"), rows);
  }

  async function drawComparison() {
    const ids = [...compared].sort((a, b) => a - b);
    const key = ids.join(",");
    if (key === drawn) return;
    drawn = key;
    try {
      await Promise.all(ids.filter((id) => !series.has(id)).map(async (id) => {
        const [found, results] = await Promise.all([api(`/replays/${id}/series`), api(`/replays/${id}/results`)]);
        series.set(id, found);
        summaries.set(id, results.summary);
      }));
    } catch (err) {
      drawn = ""; // try again on the next poll
      throw err;
    }
    if (drawn !== key) return; // the selection changed while fetching
    const runs = ids.map((id) => /** @type {Series} */ (series.get(id)));
    for (const plot of plots) plot.destroy();
    plots = [];
    const box = byId("comparison");
    if (!runs.length) {
      box.replaceChildren(el("p", { class: "muted" }, "Tick finished replays above to compare them."));
      return;
    }
    const names = labels(runs);
    const charts = [
      { title: "Job completion time CDF", x: "JCT", y: "fraction of finished jobs", stepped: true,
        xSeconds: true, xFormat: duration, yFormat: (/** @type {number} */ v) => v.toFixed(2),
        lines: runs.map((s, i) => ({ label: names[i], x: s.jct_s, y: s.jct_fraction })) },
      { title: "GPU utilisation over time", x: "time", y: "GPUs busy / GPUs up", stepped: true, xSeconds: true, xFormat: duration,
        yFormat: (/** @type {number} */ v) => `${Math.round(v * 100)} %`,
        lines: runs.map((s, i) => ({ label: names[i], x: s.timeline.t_s,
          y: s.timeline.gpus_busy.map((b, j) => b / Math.max(1, s.timeline.gpus_total[j])) })) },
      { title: "Queue length over time", x: "time", y: "jobs waiting", stepped: true, xSeconds: true, xFormat: duration,
        lines: runs.map((s, i) => ({ label: names[i], x: s.timeline.t_s, y: s.timeline.queued })) },
      { title: "Finish-time fairness (Themis ρ) CDF", x: "ρ", y: "fraction of jobs", stepped: true,
        xFormat: (/** @type {number} */ v) => v.toFixed(2), yFormat: (/** @type {number} */ v) => v.toFixed(2),
        lines: runs.map((s, i) => ({ label: names[i], x: s.fairness.ftf_rho, y: s.fairness.ftf_fraction })) },
    ].map(comparisonChart);
    plots = charts.map((c) => c.plot);
    box.replaceChildren(headlines(runs, names), el("div", { class: "charts" }, ...charts.map((c) => c.figure)));
  }

  /** @param {Series[]} runs @param {string[]} names @returns {HTMLElement} */
  function headlines(runs, names) {
    const rows = runs.map((s, i) => {
      const sum = summaries.get(s.id);
      const f = s.fairness;
      const files = FILES.map((name) => button(name, { "aria-label": `Download ${name} of replay ${s.id}`,
        class: "link" }, () => download(`/replays/${s.id}/files/${name}`, `replay-${s.id}-${name}`)));
      return el("tr", { "data-replay": String(s.id) }, el("th", { scope: "row" }, names[i]),
        el("td", { class: "num" }, String(s.id)),
        el("td", { class: "num" }, sum ? `${sum.finished} / ${sum.jobs}` : "—"),
        el("td", { class: "num" }, duration(sum?.avg_jct_s)), el("td", { class: "num" }, duration(sum?.p95_jct_s)),
        el("td", { class: "num" }, duration(sum?.makespan_s)), el("td", { class: "num" }, percent(sum?.gpu_utilization)),
        el("td", { class: "num" }, fixed(f.jain_index, 3)), el("td", { class: "num" }, fixed(f.avg_ftf_rho)),
        el("td", { class: "num" }, fixed(f.max_ftf_rho)), el("td", { class: "num" }, percent(f.frac_ftf_rho_gt_1)),
        el("td", { class: "files" }, ...files));
    });
    return el("table", { id: "compare-table" }, el("caption", {}, "Side by side (JCT and makespan on the replay's clock)"),
      head(["Run", "Replay", "Finished", "Avg JCT", "p95 JCT", "Makespan", "GPU utilisation",
        "Jain's index", "Avg ρ", "Max ρ", "ρ > 1", "Download"], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
      el("tbody", {}, ...rows));
  }

  async function refresh() {
    await followRun();
    /** @type {{data: Replay[]}} */
    const list = await api(`/replays?limit=${LISTED}`);
    const unknown = list.data.some((r) => !traces.has(r.trace_id));
    if (unknown) await loadTraces();
    listReplays(list.data);
    await drawComparison();
  }

  /** @param {HTMLElement} view */
  function mount(view) {
    const policyBox = el("fieldset", { id: "run-policies" }, el("legend", {}, POLICIES_LEGEND));
    const file = el("input", { id: "trace-file", type: "file", accept: ".csv,.json,.trace,.txt" });
    const uploadForm = el("form", { "aria-labelledby": "upload-title" },
      el("h3", { id: "upload-title" }, "Upload a trace"),
      el("label", { for: "trace-file" }, "Trace file "), file, " ",
      el("button", { type: "submit" }, "Upload trace"));
    uploadForm.addEventListener("submit", (e) => { e.preventDefault(); void upload().catch(report); });
    const runForm = el("form", { "aria-labelledby": "run-title", class: "fields" },
      el("h3", { id: "run-title" }, "Run a replay or a sweep"),
      el("label", { for: "run-trace" }, "Trace"), el("select", { id: "run-trace" }),
      policyBox,
      el("label", { for: "run-clusters" }, "Clusters (comma-separated: preset, PRESET:N or NODESxGPUS)"),
      el("input", { id: "run-clusters", type: "text", value: "16x4", spellcheck: "false" }),
      el("label", { for: "run-seed" }, "Seed"), el("input", { id: "run-seed", type: "number", value: "0", min: "0" }),
      el("label", { for: "run-interval" }, "Scheduling interval (s)"),
      el("input", { id: "run-interval", type: "number", value: "60", min: "0" }),
      el("button", { type: "submit" }, "Run"));
    runForm.addEventListener("submit", (e) => { e.preventDefault(); void start().catch(report); });
    view.append(
      el("h2", {}, "Replays"), uploadForm, runForm,
      el("div", { class: "progress" },
        el("label", { for: "run-progress" }, "Progress "),
        el("progress", { id: "run-progress", max: "1", value: "0" }), " ",
        el("span", { id: "run-state", "aria-live": "polite" }, "Nothing running.")),
      el("h3", {}, "Recent replays"),
      el("table", {}, el("caption", { class: "muted" }, `Your tenant's latest ${LISTED}; tick finished ones to compare`),
        head(["Compare", "Replay", "Trace", "Policy", "Cluster", "Sweep", "Status", "Progress"], [1, 7]),
        el("tbody", { id: "replay-rows" })),
      el("h3", {}, "Comparison"),
      el("div", { id: "comparison" }, el("p", { class: "muted" }, "Tick finished replays above to compare them.")),
    );
    void setUp(policyBox).catch(report);
  }

  /**
   * Fill this mount's policy box (not whatever the page shows by then: a page mounted
   * again while the answers were on their way, as signing in and the address's change
   * both do, fills its own; before, both filled the newest box and every policy was
   * listed twice).
   * @param {HTMLElement} policyBox
   */
  async function setUp(policyBox) {
    /** @type {[{data: import("./common.js").Policy[]}, {name: string}|null]} */
    const [policies, cluster] = await Promise.all([api("/policies"), api("/cluster").catch(() => null)]);
    policyBox.replaceChildren(el("legend", {}, POLICIES_LEGEND),
      ...policies.data.map((p) => el("label", { class: "check" },
        el("input", { type: "checkbox", value: p.name, name: "policy" }), ` ${p.name}`)));
    if (!policyBox.isConnected) return;
    if (cluster) /** @type {HTMLInputElement} */ (byId("run-clusters")).value = cluster.name;
    await loadTraces();
  }

  return { mount, refresh };
}
