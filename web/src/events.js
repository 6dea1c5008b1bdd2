// @ts-check
/**
 * The Events page (#/events, or #/events?job=<id> / ?node=<name> from the Job and
 * Cluster pages), registered by dashboard.js: the cluster-wide event stream
 * (GET /api/v1/events), newest first, filtered by kind, tenant, job and node (asked of
 * the API). Each row names the job (linked), its tenant, where a start placed it and
 * who a stop gave its GPUs to (linked; another tenant's job unnamed), and the recorded
 * detail: who acted and why. Times are on the service's clock (wall clock in cluster
 * mode), with the recording time beside them.
 */
import { api, byId, clockName, el, head, instant, replaceKeepingFocus, report } from "./common.js";

/**
 * @typedef {{id: string|null, name: string|null}} JobRef
 * @typedef {{id: number, at: string, time_s: number|null, kind: string, job: JobRef,
 *   tenant: string, nodes: {node: string, gpus: number[]}[], by: JobRef[], detail: string}} Event
 */

// The kinds the job database records (api/store/models.py JobEvent.kind), for the filter.
const KINDS = ["submitted", "admitted", "started", "preempted", "suspended", "resized", "migrated",
  "finished", "failed", "cancelled"];
const LIMIT = 200; // newest events shown

/** @param {JobRef} ref @returns {Node|string} */
function jobLink(ref) {
  return ref.id === null ? "another tenant's job"
    : el("a", { href: `#/job/${ref.id}` }, `${ref.name ?? "job"} (${ref.id.slice(0, 8)})`);
}

/** @param {Event} e @returns {HTMLElement} */
function row(e) {
  const by = e.by.length ? e.by.flatMap((r, i) => [i ? ", " : "", jobLink(r)]) : ["—"];
  const nodes = e.nodes.length
    ? e.nodes.flatMap((p, i) => [i ? "; " : "", el("a", { href: `#/events?node=${encodeURIComponent(p.node)}` },
      p.node), `: GPU ${p.gpus.join(", ")}`])
    : ["—"];
  return el("tr", { "data-event": String(e.id), "data-kind": e.kind },
    el("td", {}, instant(e.time_s)), el("td", {}, e.kind), el("td", {}, jobLink(e.job)), el("td", {}, e.tenant),
    el("td", {}, ...nodes), el("td", { class: "preempted-by" }, ...by), el("td", { class: "reason" }, e.detail || "—"),
    el("td", {}, new Date(e.at).toLocaleString()));
}

/** @param {URLSearchParams} params @returns {import("./common.js").Page} */
export function eventsPage(params) {
  /** @param {string} id @returns {string} */
  const value = (id) => /** @type {HTMLInputElement} */ (byId(id)).value.trim();

  /** @param {string} id @param {string} label @param {string} name @param {HTMLElement} input */
  function field(id, label, name, input) {
    input.id = id;
    input.setAttribute("name", name);
    input.addEventListener("change", () => void page.refresh().catch(report));
    return el("label", { for: id }, `${label} `, input);
  }

  const page = {
    /** @param {HTMLElement} view */
    mount(view) {
      const kind = el("select", {}, el("option", { value: "" }, "All"), ...KINDS.map((k) => el("option", { value: k }, k)));
      const text = (/** @type {string} */ key, /** @type {number} */ size) => el("input", { type: "text",
        size: String(size), spellcheck: "false", value: params.get(key) ?? "" });
      view.append(
        el("h2", {}, "Events"),
        el("p", {}, "Every job's events across the cluster, newest first: starts with where they run, " +
          "preemptions with the jobs that took the GPUs, drains, failures, cancels."),
        el("form", { id: "event-filters", class: "filters", role: "search" },
          field("event-kind", "Kind", "kind", kind), " ", field("event-tenant", "Tenant", "tenant", text("tenant", 12)), " ",
          field("event-job", "Job id", "job", text("job", 32)), " ", field("event-node", "Node", "node", text("node", 12))),
        el("table", { id: "events" },
          el("caption", { id: "events-caption" }, "Events"),
          head([`Time (${clockName()})`, "Event", "Job", "Tenant", "Where", "GPUs taken by", "Detail", "Recorded at"]),
          el("tbody", { id: "event-rows" })),
      );
      /** @type {HTMLSelectElement} */ (byId("event-kind")).value = params.get("kind") ?? "";
      byId("event-filters").addEventListener("submit", (ev) => { ev.preventDefault(); void page.refresh().catch(report); });
    },
    async refresh() {
      const query = new URLSearchParams({ limit: String(LIMIT) });
      for (const [name, id] of [["kind", "event-kind"], ["tenant", "event-tenant"], ["job", "event-job"],
        ["node", "event-node"]]) {
        const v = value(id);
        if (v) query.set(name, v);
      }
      /** @type {{data: Event[], count: number}} */
      const events = await api(`/events?${query}`);
      const caption = `${events.count} event${events.count === 1 ? "" : "s"}` +
        `${events.count === LIMIT ? ` (the newest ${LIMIT})` : ""}, newest first`;
      if (byId("events-caption").textContent !== caption) byId("events-caption").textContent = caption;
      replaceKeepingFocus(byId("event-rows"), events.data.length ? events.data.map(row)
        : [el("tr", {}, el("td", { colspan: "8", class: "muted" }, "No events match."))]);
    },
  };
  return page;
}
