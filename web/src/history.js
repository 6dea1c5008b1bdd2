// @ts-check
/**
 * The History page (#/history), registered by dashboard.js: the live cluster over a
 * chosen window, from GET /api/v1/history/... (the service's samples, api/samples/):
 * the GPUs' utilisation and allocation, the queue's length and waits, GPU memory,
 * each tenant's GPUs (a user's own tenant, an admin's every tenant), and one node's
 * GPUs (utilisation, memory, temperature, power) with their health. Each quota's
 * GPUs against its guarantee are the Quotas page's chart (GET /quotas/series).
 * Drawn with charts.js's comparisonChart (uPlot); times on the service's clock (the
 * wall clock's HH:MM in cluster mode, the simulated clock as a duration in local mode).
 * Refetched every SERIES_EVERY_MS, or at once when the window or the node changes.
 */
import { comparisonChart } from "./charts.js";
import { api, byId, clock, clockName, duration, el, fixed, report } from "./common.js";

/**
 * @typedef {(number|null)[]} Series
 * @typedef {{clock: string, from_s: number, to_s: number, step_s: number, sample_s: number,
 *   t_s: number[]}} Frame
 * @typedef {Frame & {gpus: Series, gpus_allocated: Series, util: Series, mem_used_mib: Series,
 *   mem_total_mib: Series, gpus_unhealthy: Series, running: Series, waiting: Series,
 *   wait_mean_s: Series, wait_max_s: Series}} ClusterHistory
 * @typedef {{tenant: string, gpus: Series, running: Series, waiting: Series, wait_max_s: Series}} TenantRow
 * @typedef {Frame & {data: TenantRow[], count: number}} TenantsHistory
 * @typedef {{index: number, util: Series, allocated: Series, mem_used_mib: Series,
 *   temperature_c: Series, power_w: Series, ecc_errors: Series, healthy: Series}} GpuRow
 * @typedef {Frame & {node: string, mem_total_mib: number|null, gpus: GpuRow[]}} GpusHistory
 */

const SERIES_EVERY_MS = 10_000; // a bin is at least a sampling period (30 s by default)
/** @type {Record<string, number>} */
const WINDOWS = { "1 hour": 3600, "6 hours": 21600, "1 day": 86400, "7 days": 604800 };

/** The last known value of a series (null: none in the window).
 * @param {Series} series @returns {number|null} */
function latest(series) {
  for (let i = series.length - 1; i >= 0; i -= 1) if (series[i] !== null) return series[i];
  return null;
}

/** @param {Series} s @param {(v: number) => number} f @returns {number[]} */
function mapped(s, f) {
  return /** @type {number[]} */ (s.map((v) => v === null ? null : f(v)));
}

/** @param {Series} s @returns {number[]} */
function asLine(s) {
  return /** @type {number[]} */ (s);
}

/** A time on the axis and in the legend: the wall clock's HH:MM, the simulated clock
 * as a duration.
 * @param {number} seconds @returns {string} */
function tick(seconds) {
  if (clock.kind === "simulated") return duration(seconds);
  const t = new Date(seconds * 1000);
  return `${String(t.getHours()).padStart(2, "0")}:${String(t.getMinutes()).padStart(2, "0")}`;
}

export function historyPage() {
  /** @type {{destroy: () => void}[]} */
  let plots = [];
  let fetchedAt = 0;
  let asked = "";

  /** @param {HTMLElement} view */
  function mount(view) {
    const windowChoice = el("select", { id: "history-window" },
      ...Object.entries(WINDOWS).map(([label, s]) => el("option", { value: String(s) }, label)));
    const node = el("input", { id: "history-node", type: "text", size: "16", spellcheck: "false",
      placeholder: "node name", autocomplete: "off" });
    const form = el("form", { class: "filters", id: "history-form" },
      el("label", { for: "history-window" }, "Window "), windowChoice, " ",
      el("label", { for: "history-node" }, "Node "), node, " ",
      el("button", { type: "submit" }, "Show"));
    form.addEventListener("submit", (event) => { event.preventDefault(); fetchedAt = 0; refresh().catch(report); });
    windowChoice.addEventListener("change", () => { fetchedAt = 0; refresh().catch(report); });
    view.append(
      el("h2", {}, "History"),
      el("p", { class: "muted" }, "The live cluster as the service sampled it, each point the mean over its bin. " +
        "Each quota's GPUs against its guarantee: the ", el("a", { href: "#/quotas" }, "Quotas page"), "."),
      form,
      el("p", { id: "history-now", role: "status" }),
      el("div", { id: "history-cluster", class: "charts" }),
      el("h3", {}, "GPUs by tenant"),
      el("div", { id: "history-tenants", class: "charts" }),
      el("h3", { id: "history-node-title" }, "A node's GPUs"),
      el("p", { id: "history-health" }),
      el("div", { id: "history-gpus", class: "charts" }),
    );
  }

  async function refresh() {
    const lastS = /** @type {HTMLSelectElement} */ (byId("history-window")).value;
    const node = /** @type {HTMLInputElement} */ (byId("history-node")).value.trim();
    const key = `${lastS}|${node}`;
    if (key === asked && Date.now() - fetchedAt < SERIES_EVERY_MS) return;
    fetchedAt = Date.now();
    asked = key;
    /** @type {ClusterHistory} */
    const cluster = await api(`/history/cluster?last_s=${lastS}`);
    /** @type {TenantsHistory} */
    const tenants = await api(`/history/tenants?last_s=${lastS}`);
    /** @type {GpusHistory|null} */
    const gpus = node ? await api(`/history/nodes/${encodeURIComponent(node)}/gpus?last_s=${lastS}`) : null;
    for (const p of plots) p.destroy();
    plots = [];
    drawCluster(cluster);
    drawTenants(tenants);
    drawGpus(gpus, node);
  }

  /** A chart of `lines` on the frame's bins, from the first bin any line has a value
   * in (a window reaching before the first sample starts there).
   * @param {string} title @param {string} y @param {Frame} frame
   * @param {{label: string, y: Series}[]} lines @param {(v: number) => string} [yFormat] */
  function chart(title, y, frame, lines, yFormat) {
    const known = lines.map((l) => l.y.findIndex((v) => v !== null)).filter((i) => i >= 0);
    const first = known.length ? Math.min(...known) : 0;
    const { figure, plot } = comparisonChart({
      title, x: `time (${clockName()})`, y, xFormat: tick, yFormat, xSeconds: true,
      lines: lines.map((l) => ({ label: l.label, x: frame.t_s.slice(first), y: asLine(l.y.slice(first)) })),
    });
    plots.push(plot);
    return figure;
  }

  /** @param {ClusterHistory} h */
  function drawCluster(h) {
    const util = latest(h.util), waiting = latest(h.waiting), wait = latest(h.wait_max_s);
    byId("history-now").textContent = `Last bin: GPUs ${fixed(util === null ? null : util * 100, 1)} % utilised, ` +
      `${fixed(latest(h.gpus_allocated), 1)} of ${fixed(latest(h.gpus), 0)} allocated, ` +
      `${fixed(waiting, 1)} jobs waiting, longest wait ${duration(wait)}. ` +
      `A sample every ${duration(h.sample_s)}, bins of ${duration(h.step_s)}.`;
    const share = h.gpus_allocated.map((v, i) => {
      const total = h.gpus[i];
      return v === null || !total ? null : v / total;
    });
    const pct = (/** @type {number} */ v) => `${fixed(v, 0)} %`;
    const gib = (/** @type {number} */ v) => `${fixed(v / 1024, 0)} GiB`;
    byId("history-cluster").replaceChildren(
      chart("GPU utilisation and allocation", "% of GPUs", h, [
        { label: "utilisation", y: mapped(h.util, (v) => v * 100) },
        { label: "allocated", y: mapped(share, (v) => v * 100) }], pct),
      chart("Queue", "jobs", h, [{ label: "waiting", y: h.waiting }, { label: "running", y: h.running }],
        (v) => fixed(v, 1)),
      chart("Waits", "wait so far", h, [{ label: "mean wait", y: h.wait_mean_s },
        { label: "longest wait", y: h.wait_max_s }], duration),
      chart("GPU memory", "memory", h, [{ label: "used", y: h.mem_used_mib }, { label: "total", y: h.mem_total_mib }], gib),
    );
  }

  /** @param {TenantsHistory} h */
  function drawTenants(h) {
    const box = byId("history-tenants");
    if (!h.data.length) { box.replaceChildren(el("p", { class: "muted" }, "No tenant's jobs in this window.")); return; }
    box.replaceChildren(
      chart("GPUs held", "GPUs", h, h.data.map((t) => ({ label: t.tenant, y: t.gpus })), (v) => fixed(v, 1)),
      chart("Jobs waiting", "jobs", h, h.data.map((t) => ({ label: t.tenant, y: t.waiting })), (v) => fixed(v, 1)),
    );
  }

  /** @param {GpusHistory|null} h @param {string} node */
  function drawGpus(h, node) {
    const box = byId("history-gpus");
    const health = byId("history-health");
    byId("history-node-title").textContent = h ? `Node ${h.node}'s GPUs` : "A node's GPUs";
    box.replaceChildren();
    if (!h) { health.textContent = "Name a node above to see its GPUs."; return; }
    if (!h.gpus.length) { health.textContent = `No samples of ${node} in this window.`; return; }
    const unhealthy = h.gpus.filter((g) => g.healthy.some((v) => v === 0)).map((g) => `GPU ${g.index}`);
    const line = (/** @type {(g: GpuRow) => Series} */ pick) => h.gpus.map((g) => ({ label: `GPU ${g.index}`, y: pick(g) }));
    const known = (/** @type {(g: GpuRow) => Series} */ pick) => h.gpus.some((g) => pick(g).some((v) => v !== null));
    const figures = [
      chart("Utilisation", "%", h, line((g) => mapped(g.util, (v) => v * 100)), (v) => `${fixed(v, 0)} %`),
      chart(`Memory used${h.mem_total_mib ? ` (of ${fixed(h.mem_total_mib / 1024, 0)} GiB each)` : ""}`, "MiB", h,
        line((g) => g.mem_used_mib), (v) => fixed(v, 0)),
    ];
    if (known((g) => g.temperature_c)) figures.push(chart("Temperature", "°C", h, line((g) => g.temperature_c), (v) => fixed(v, 0)));
    if (known((g) => g.power_w)) figures.push(chart("Power", "W", h, line((g) => g.power_w), (v) => fixed(v, 0)));
    health.textContent = unhealthy.length ? `Unhealthy in this window: ${unhealthy.join(", ")}.`
      : "Every GPU healthy in this window (no uncorrected ECC error, every reading answered).";
    box.replaceChildren(...figures);
  }

  return { mount, refresh };
}
