// @ts-check
/**
 * The Queue page: waiting jobs with their position, wait so far and the reason they
 * wait; imported by dashboard.js. Keyed by job id: a row is built once and kept, and
 * a poll rewrites only the cells whose text changed (the wait grows every poll) and
 * reorders rows only when the order changed, so a live update with thousands waiting
 * costs what changed (bench/dashboard.py, docs/benchmarks.md).
 */
import { api, byId, duration, el, reasonText, report, WAITING } from "./common.js";

/**
 * @typedef {import("./common.js").Job} Job
 * @typedef {import("./common.js").Page} Page
 * @typedef {{name: string, nodes: number, gpus: number, gpus_allocated: number,
 *   running: number, waiting: number, finished: number, policy: string, now_s: number,
 *   time_scale: number}} Cluster
 * @typedef {{row: HTMLElement, cells: HTMLElement[]}} RowView
 */

const HEADINGS = ["Position", "Job", "Tenant", "GPUs", "Status", "Waiting for", "Why it waits"];
const LIMIT = 1000; // per status: the API's page size

/** @type {Map<string, RowView>} */
let rows = new Map();

/** @param {Job} job @returns {RowView} */
function rowView(job) {
  const cells = [
    el("td", { class: "num" }),
    el("td", {}, el("a", { href: `#/job/${job.id}` }, `${job.name} (${job.id.slice(0, 8)})`)),
    el("td", {}, job.tenant), el("td", { class: "num" }), el("td", {}), el("td", {}),
    el("td", { class: "reason" }),
  ];
  return { row: el("tr", { "data-job": job.id }, ...cells), cells };
}

/** @param {HTMLElement} cell @param {string} text */
function setText(cell, text) {
  if (cell.textContent !== text) cell.textContent = text;
}

/** @type {Page} */
export const queuePage = {
  mount(view) {
    rows = new Map();
    const input = el("input", { id: "queue-filter", type: "search", placeholder: "name, id, tenant or reason" });
    input.addEventListener("input", () => void queuePage.refresh().catch(report));
    view.append(
      el("h2", {}, "Queue"),
      el("div", { class: "filter" }, el("label", { for: "queue-filter" }, "Filter "), input),
      el("table", { "aria-describedby": "queue-caption" },
        el("caption", { id: "queue-caption", class: "muted" }),
        el("thead", {}, el("tr", {}, ...HEADINGS.map((h, i) =>
          el("th", { scope: "col", class: i === 0 || i === 3 ? "num" : "" }, h)))),
        el("tbody", { id: "queue-rows" })),
    );
  },
  async refresh() {
    /** @type {[Cluster, ...{data: Job[]}[]]} */
    const [cluster, ...lists] = await Promise.all([
      api("/cluster"), ...WAITING.map((s) => api(`/jobs?status=${s}&limit=${LIMIT}`)),
    ]);
    const waiting = lists.flatMap((l) => l.data).sort((a, b) =>
      (a.submit_s ?? 0) - (b.submit_s ?? 0) || a.id.localeCompare(b.id));
    const filter = /** @type {HTMLInputElement} */ (byId("queue-filter")).value.trim().toLowerCase();
    const shown = waiting.map((job, i) => ({ job, position: i + 1 })).filter(({ job }) => !filter ||
      [job.name, job.id, job.tenant, job.status, reasonText(job)].some((t) => t.toLowerCase().includes(filter)));
    setText(byId("queue-caption"), `${waiting.length} waiting, in submission order ` +
      `(the active policy, ${cluster.policy}, picks among them); wait times on the simulated clock.`);
    /** @type {Map<string, RowView>} */
    const next = new Map();
    for (const { job, position } of shown) {
      const view = rows.get(job.id) ?? rowView(job);
      next.set(job.id, view);
      const c = view.cells;
      setText(c[0], String(position));
      setText(c[3], String(job.num_gpus));
      setText(c[4], job.status);
      setText(c[5], duration(job.submit_s === null ? null : cluster.now_s - job.submit_s));
      setText(c[6], reasonText(job));
    }
    const body = byId("queue-rows");
    const order = [...next.values()].map((v) => v.row);
    const same = order.length === body.children.length && order.every((row, i) => body.children[i] === row);
    if (!same) body.replaceChildren(...order);
    rows = next;
  },
};
