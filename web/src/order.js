// @ts-check
/**
 * The wait order's page (titled Queue, at #/queue): waiting jobs in the active
 * policy's order (GET /api/v1/order) with their position, wait so far, the reason
 * they wait and tenant; filters by tenant and status (asked of the API) and by text
 * (on the page). Imported by dashboard.js.
 * Keyed by job id: a row is built once and kept, and a poll rewrites only the cells
 * whose text changed (the wait grows every poll) and reorders rows only when the order
 * changed, so a live update with thousands waiting costs what changed
 * (bench/dashboard.py, docs/benchmarks.md). Other tenants' jobs are counted in the
 * positions and the caption, never listed (the API leaves them out).
 */
import { api, byId, duration, el, report, session } from "./common.js";

/**
 * @typedef {import("./common.js").Page} Page
 * @typedef {{position: number|null, id: string, name: string, tenant: string, status: string,
 *   num_gpus: number, priority: number, submit_s: number|null, wait_s: number|null,
 *   reason_code: string|null, reason_message: string|null}} Entry
 * @typedef {{data: Entry[], count: number, waiting: number, others_waiting: number,
 *   now_s: number|null}} Order
 * @typedef {{row: HTMLElement, cells: HTMLElement[]}} RowView
 */

const HEADINGS = ["Position", "Job", "Tenant", "GPUs", "Status", "Waiting for", "Why it waits"];
// The statuses GET /order filters on; the last three only in cluster mode.
const STATUSES = ["Queued", "Preempted", "Suspended", "BackOff", "Unschedulable", "Invalid"];
const LIMIT = 1000; // the API's page size

/** @type {Map<string, RowView>} */
let rows = new Map();
/** Tenants seen since the page was opened: the tenant filter's choices. */
let tenants = new Set();

/** @param {Entry} job @returns {RowView} */
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

/** @param {Entry} job */
function reason(job) {
  if (!job.reason_code) return "not yet considered by a scheduling round";
  return job.reason_message ? `${job.reason_code}: ${job.reason_message}` : job.reason_code;
}

/** @param {string} id @param {string} label @param {string[]} choices @returns {HTMLElement} */
function select(id, label, choices) {
  const box = el("select", { id }, el("option", { value: "" }, "All"),
    ...choices.map((c) => el("option", { value: c }, c)));
  box.addEventListener("change", () => void orderPage.refresh().catch(report));
  return el("span", {}, el("label", { for: id }, `${label} `), box, " ");
}

/** @param {Entry[]} shown */
function addTenants(shown) {
  const box = /** @type {HTMLSelectElement} */ (byId("queue-tenant"));
  for (const { tenant } of shown) {
    if (tenants.has(tenant)) continue;
    tenants.add(tenant);
    const options = [...box.options].slice(1);
    const before = options.find((o) => o.value > tenant) ?? null;
    box.insertBefore(el("option", { value: tenant }, tenant), before);
  }
}

/** @type {Page} */
export const orderPage = {
  mount(view) {
    rows = new Map();
    tenants = new Set();
    const me = /** @type {any} */ (session.me);
    const input = el("input", { id: "queue-filter", type: "search", placeholder: "name, id or reason" });
    input.addEventListener("input", () => void orderPage.refresh().catch(report));
    view.append(
      el("h2", {}, "Queue"),
      el("div", { class: "filter" },
        select("queue-tenant", "Tenant", me && me.role !== "admin" ? [me.tenant] : []),
        select("queue-status", "Status", STATUSES),
        el("label", { for: "queue-filter" }, "Filter "), input),
      el("table", { "aria-describedby": "queue-caption" },
        el("caption", { id: "queue-caption", class: "muted" }),
        el("thead", {}, el("tr", {}, ...HEADINGS.map((h, i) =>
          el("th", { scope: "col", class: i === 0 || i === 3 ? "num" : "" }, h)))),
        el("tbody", { id: "queue-rows" })),
    );
    if (me && me.role !== "admin") tenants.add(me.tenant);
  },
  async refresh() {
    const tenant = /** @type {HTMLSelectElement} */ (byId("queue-tenant")).value;
    const status = /** @type {HTMLSelectElement} */ (byId("queue-status")).value;
    const query = new URLSearchParams({ limit: String(LIMIT) });
    if (tenant) query.set("tenant", tenant);
    if (status) query.set("status", status);
    /** @type {[{policy: string}, Order]} */
    const [cluster, queue] = await Promise.all([api("/cluster"), api(`/order?${query}`)]);
    addTenants(queue.data);
    const filter = /** @type {HTMLInputElement} */ (byId("queue-filter")).value.trim().toLowerCase();
    const shown = queue.data.filter((job) => !filter ||
      [job.name, job.id, job.tenant, job.status, reason(job)].some((t) => t.toLowerCase().includes(filter)));
    const others = queue.others_waiting
      ? ` ${queue.others_waiting} of them other tenants' jobs, counted in the positions but not shown.` : "";
    setText(byId("queue-caption"), `${queue.waiting} waiting, in the order of the active policy, ` +
      `${cluster.policy}: position 1 is served first.${others} Wait times on the scheduler's clock.`);
    /** @type {Map<string, RowView>} */
    const next = new Map();
    for (const job of shown) {
      const view = rows.get(job.id) ?? rowView(job);
      next.set(job.id, view);
      const c = view.cells;
      setText(c[0], job.position === null ? "—" : String(job.position));
      setText(c[3], String(job.num_gpus));
      setText(c[4], job.status);
      setText(c[5], duration(job.wait_s));
      setText(c[6], reason(job));
    }
    const body = byId("queue-rows");
    const order = [...next.values()].map((v) => v.row);
    const same = order.length === body.children.length && order.every((row, i) => body.children[i] === row);
    if (!same) body.replaceChildren(...order);
    rows = next;
  },
};
