// @ts-check
/**
 * The What-if page (#/whatif), registered by dashboard.js: each of your jobs' predicted
 * completion under each policy, side by side with the active policy's, and the
 * policies' predicted figures. Reads POST /api/v1/whatif (it simulates the queue and the
 * running jobs from now under each policy, so it is asked every REFRESH_MS, not on every
 * poll). `whatifTables` is also the preview of admin.js's policy switch.
 */
import { announce, api, button, byId, clock, clockName, duration, el, head, instant, send } from "./common.js";

/**
 * @typedef {{avg_jct_s: number|null, p95_jct_s: number|null, makespan_s: number|null,
 *   wall_s: number|null, unfinished: number, stopped: string|null}} PolicyForecast
 * @typedef {{id: string, name: string, tenant: string, status: string,
 *   predicted_finish_s: Record<string, number|null>, not_started?: Record<string, string>}} JobForecast
 * @typedef {{now_s: number, clock: "wall"|"simulated", active_policy: string, cluster: string,
 *   policies: Record<string, PolicyForecast>, jobs: JobForecast[], other_tenants_jobs: number,
 *   approximations: string[]}} WhatIf
 */

const REFRESH_MS = 15_000; // each answer runs one simulation per policy on the server
const POLICIES_LEGEND = "Policies to compare";

/** The active policy first, then the others in the order asked.
 * @param {WhatIf} result @returns {string[]} */
export function policyOrder(result) {
  const names = Object.keys(result.policies);
  return [...names.filter((n) => n === result.active_policy), ...names.filter((n) => n !== result.active_policy)];
}

/** @param {string} name @param {WhatIf} result */
function heading(name, result) {
  return name === result.active_policy ? `${name} (active)` : name;
}

/**
 * Two tables: each policy's predicted figures, and each job's predicted finish (from
 * now) under each policy, the active policy's column first.
 * @param {WhatIf} result @param {string} idPrefix @returns {HTMLElement[]}
 */
export function whatifTables(result, idPrefix) {
  const names = policyOrder(result);
  const policyRows = names.map((n) => {
    const p = result.policies[n];
    return el("tr", { "data-policy": n, class: n === result.active_policy ? "active" : "" },
      el("th", { scope: "row" }, heading(n, result)),
      ...[p.avg_jct_s, p.p95_jct_s, p.makespan_s].map((v) => el("td", { class: "num" }, duration(v))),
      el("td", { class: "num" }, String(p.unfinished)),
      el("td", {}, p.stopped === null ? "ran to the end" : `stopped at the ${p.stopped} cap`),
      el("td", { class: "num" }, p.wall_s === null ? "—"
        : p.wall_s < 1 ? `${Math.round(p.wall_s * 1000)} ms` : `${p.wall_s.toFixed(1)} s`));
  });
  const jobRows = result.jobs.map((job) => el("tr", { "data-job": job.id },
    el("th", { scope: "row" }, el("a", { href: `#/job/${job.id}` }, `${job.name} (${job.id.slice(0, 8)})`)),
    el("td", {}, job.tenant), el("td", {}, job.status),
    ...names.map((n) => finishCell(job, n))));
  const n = result.other_tenants_jobs;
  const others = n === 0 ? "" : n === 1 ? "; 1 other tenant's job is simulated too, not listed"
    : `; ${n} other tenants' jobs are simulated too, not listed`;
  return [
    el("table", { id: `${idPrefix}-policies` },
      el("caption", {}, `Predicted figures by policy (from now, cluster ${result.cluster})`),
      head(["Policy", "Avg JCT", "p95 JCT", "Makespan", "Unfinished", "Simulation", "Simulated in"],
        [1, 2, 3, 4, 6]),
      el("tbody", {}, ...policyRows)),
    el("table", { id: `${idPrefix}-jobs` },
      el("caption", {}, `Predicted finish of each job, from now${others}`),
      head(["Job", "Tenant", "Status", ...names.map((n) => `Finishes in: ${heading(n, result)}`)],
        names.map((_, i) => i + 3)),
      el("tbody", {}, ...(jobRows.length ? jobRows
        : [el("tr", {}, el("td", { colspan: String(3 + names.length), class: "muted" }, "No active jobs."))]))),
    el("p", { class: "muted", id: `${idPrefix}-assumes` }, "The predictions assume:"),
    el("ul", { class: "muted", "aria-labelledby": `${idPrefix}-assumes` },
      ...result.approximations.map((a) => el("li", {}, a))),
  ];
}

/** A job's predicted finish under policy `n`: a duration from now, "cannot start" and
 * why when the simulation never starts it,
 * "not within the simulation" when it started and had not finished.
 * @param {JobForecast} job @param {string} n @returns {HTMLElement} */
function finishCell(job, n) {
  const why = job.not_started?.[n];
  if (why) {
    return el("td", { class: "never", "data-policy": n },
      el("strong", {}, "cannot start"), el("br"), el("small", { class: "muted" }, why));
  }
  const s = job.predicted_finish_s[n] ?? null;
  return el("td", { class: "num", "data-policy": n }, s === null ? "not within the simulation" : duration(s));
}

/** @returns {import("./common.js").Page} */
export function whatifPage() {
  let asked = 0;
  /** @type {Promise<void>} */
  let ready = Promise.resolve();

  async function compute() {
    const again = /** @type {HTMLButtonElement} */ (byId("whatif-recompute"));
    if (again.disabled) return; // one at a time: the server runs one what-if at once (429)
    again.disabled = true;
    try {
      await ask();
    } finally {
      again.disabled = false;
    }
  }

  async function ask() {
    asked = Date.now();
    const policies = [...document.querySelectorAll("#whatif-policies input:checked")]
      .map((i) => /** @type {HTMLInputElement} */ (i).value);
    byId("whatif-state").textContent = "Simulating…";
    /** @type {WhatIf} */
    const result = await send("/whatif", "POST", policies.length ? { policies } : {});
    clock.kind = result.clock;
    byId("whatif-state").textContent = `Computed at ${new Date().toLocaleTimeString()} ` +
      `(from the state at ${instant(result.now_s)}, ${clockName()}; active policy ${result.active_policy}).`;
    byId("whatif-result").replaceChildren(...whatifTables(result, "whatif"));
    announce(`Predictions for ${Object.keys(result.policies).length} policies.`);
  }

  return {
    mount(view) {
      const policyBox = el("fieldset", { id: "whatif-policies" }, el("legend", {}, POLICIES_LEGEND));
      view.append(
        el("h2", {}, "What if"),
        el("p", {}, "When each of your jobs would finish under each policy, side by side with the active one: " +
          "the queue and the running jobs are simulated from now (new submissions are not foreseen)."),
        policyBox,
        el("p", {}, button("Recompute", { id: "whatif-recompute" }, compute), " ",
          el("span", { id: "whatif-state", "aria-live": "polite" })),
        el("div", { id: "whatif-result" }),
      );
      // This mount's box, not the newest one: a page mounted twice fills each once.
      ready = api("/policies").then((/** @type {{data: import("./common.js").Policy[]}} */ list) => {
        policyBox.replaceChildren(el("legend", {}, POLICIES_LEGEND),
          ...list.data.map((p) => el("label", { class: "check" },
            el("input", { type: "checkbox", value: p.name, checked: "" }), ` ${p.name}`)));
      });
    },
    async refresh() {
      await ready;
      if (Date.now() - asked >= REFRESH_MS) await compute();
    },
  };
}
