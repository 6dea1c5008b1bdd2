// @ts-check
/**
 * The dashboard's shell and its Job page, loaded by index.html as an ES module, served
 * at / by api/dashboard.py; the Cluster, Queue, Replays, What-if and Admin pages are in
 * cluster.js, queue.js, replays.js, whatif.js and admin.js, shared helpers in common.js
 * and charts.js.
 * Plain browser JavaScript with JSDoc types, no build step; check the types with
 * TypeScript 5 (`npm install typescript@5` anywhere, then
 * `tsc --noEmit --allowJs --checkJs --strict --target es2022 --module es2022
 *  --lib es2022,dom,dom.iterable api/static/dashboard/*.js`).
 * It reads the REST API at /api/v1 with the token the user signs in with (kept in
 * sessionStorage), and polls it every POLL_MS.
 */
import { adminPage } from "./admin.js";
import { clusterPage } from "./cluster.js";
import { announce, api, byId, duration, el, FINISHED, reasonText, report, session, showError, signOut,
  TOKEN_KEY, WAITING } from "./common.js";
import { queuePage } from "./queue.js";
import { replaysPage } from "./replays.js";
import { whatifPage } from "./whatif.js";

/**
 * @typedef {import("./common.js").User} User
 * @typedef {import("./common.js").Job} Job
 * @typedef {import("./common.js").Page} Page
 * @typedef {{kind: string, sim_s: number|null, detail: string, at: string}} JobEvent
 * @typedef {{name: string, value: number, step: number}} Metric
 */

const POLL_MS = 1000; // the issue asks for updates at least every 2 s; this leaves time to fetch
// Metric names gpuflow.train reports (docs/api.md, "Metrics from running jobs").
const CHARTS = [
  { name: "samples_per_s", title: "Throughput (samples/s)", colour: "#0072b2" },
  { name: "loss", title: "Loss", colour: "#d55e00" },
  { name: "batch_size", title: "Global batch size", colour: "#009e73" },
];

// ---- signing in -------------------------------------------------------------------

async function signIn() {
  /** @type {User} */
  const me = await api("/users/me");
  session.me = me;
  byId("nav-admin").hidden = me.role !== "admin";
  byId("whoami").textContent = `${me.name} · tenant ${me.tenant} · ${me.role}`;
  byId("sign-in").hidden = true;
  byId("nav").hidden = false;
  byId("sign-out").hidden = false;
  showError("");
  route();
}

// ---- Job: state, events, metrics, cancel ----------------------------------------------

/** @param {string} jobId @returns {Page} */
function jobPage(jobId) {
  /** @type {Map<string, any>} */
  const plots = new Map();
  return {
    mount(view) {
      const cancel = el("button", { type: "button", class: "danger", id: "cancel-job" }, "Cancel job");
      cancel.addEventListener("click", () => void cancelJob(jobId).catch(report));
      view.append(
        el("h2", { id: "job-title" }, "Job"),
        el("dl", { class: "job", id: "job-fields" }), el("p", {}, cancel),
        el("h3", {}, "Metrics"), el("div", { class: "charts", id: "charts" }),
        el("h3", {}, "Events"),
        el("table", {}, el("thead", {}, el("tr", {}, ...["Event", "Simulated time", "Detail", "Recorded at"]
          .map((h) => el("th", { scope: "col" }, h)))), el("tbody", { id: "job-events" })),
      );
    },
    async refresh() {
      /** @type {[Job, {data: JobEvent[]}, {data: Metric[]}]} */
      const [job, events, metrics] = await Promise.all([
        api(`/jobs/${jobId}`), api(`/jobs/${jobId}/events`), api(`/jobs/${jobId}/metrics?limit=1000`),
      ]);
      byId("job-title").textContent = `Job ${job.name}`;
      const fields = [
        ["Id", job.id], ["Status", job.status], ["Tenant", job.tenant], ["Model", job.model],
        ["GPUs", String(job.num_gpus)], ["Progress", `${(job.progress * 100).toFixed(1)} %`],
        ["Nodes", job.nodes || "—"], ["Restarts", String(job.restarts)],
        ["Why it waits", WAITING.includes(job.status) ? reasonText(job) : "—"],
      ];
      byId("job-fields").replaceChildren(...fields.flatMap(([k, v]) =>
        [el("dt", {}, k), el("dd", { "data-field": k.toLowerCase() }, v)]));
      /** @type {HTMLButtonElement} */ (byId("cancel-job")).disabled = FINISHED.includes(job.status);
      byId("job-events").replaceChildren(...events.data.map((e) => el("tr", {}, el("td", {}, e.kind),
        el("td", {}, e.sim_s === null ? "—" : duration(e.sim_s)), el("td", {}, e.detail || "—"),
        el("td", {}, new Date(e.at).toLocaleString()))));
      drawCharts(metrics.data, plots);
    },
  };
}

/** @param {string} jobId */
async function cancelJob(jobId) {
  /** @type {Job} */
  const job = await api(`/jobs/${jobId}/cancel`, { method: "POST" });
  announce(`Job ${job.name} is now ${job.status}.`);
  await current?.refresh();
}

/** One uPlot chart per metric, created once and given new data on each poll.
 * @param {Metric[]} metrics @param {Map<string, any>} plots */
function drawCharts(metrics, plots) {
  const box = byId("charts");
  if (!metrics.length && !box.childElementCount) {
    box.replaceChildren(el("p", { class: "muted" }, "No metrics reported yet."));
    return;
  }
  for (const { name, title, colour } of CHARTS) {
    const rows = metrics.filter((m) => m.name === name).sort((a, b) => a.step - b.step);
    if (!rows.length) continue;
    /** @type {[number[], number[]]} */
    const data = [rows.map((m) => m.step), rows.map((m) => m.value)];
    if (plots.has(name)) { plots.get(name).setData(data); continue; }
    if (!plots.size) box.replaceChildren();
    const holder = el("figure", { class: "chart", role: "img", "aria-label": `${title} by step, ${rows.length} reports` },
      el("h3", {}, title));
    box.append(holder);
    // @ts-ignore: uPlot is the vendored global (api/static/vendor/uplot)
    plots.set(name, new uPlot({ width: 420, height: 220, scales: { x: { time: false } },
      series: [{ label: "step" }, { label: name, stroke: colour, width: 2 }] }, data, holder));
  }
}

// ---- routing and polling ----------------------------------------------------------

/** @type {Page|null} */
let current = null;
let timer = 0;

// The pages by the name in their #/name address; the Job page is #/job/<id>.
/** @type {Record<string, () => Page>} */
const PAGES = {
  cluster: () => clusterPage, queue: () => queuePage, replays: replaysPage, whatif: whatifPage, admin: adminPage,
};

function route() {
  if (!sessionStorage.getItem(TOKEN_KEY)) return;
  const hash = location.hash || "#/cluster";
  const job = /^#\/job\/([0-9a-f]{32})$/.exec(hash);
  const asked = hash.slice(2);
  const name = job ? "job" : Object.hasOwn(PAGES, asked) ? asked : "cluster";
  for (const link of document.querySelectorAll("nav a[data-page]")) {
    if (link.getAttribute("data-page") === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  current = job ? jobPage(job[1]) : PAGES[name]();
  const view = byId("view");
  view.replaceChildren();
  current.mount(view);
  showError("");
  byId("notice").textContent = "";
  poll();
}

async function poll() {
  window.clearTimeout(timer);
  const page = current;
  try {
    await page?.refresh();
    if (page === current) byId("status").textContent = `Updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    if (page === current) report(err);
  }
  if (page === current && sessionStorage.getItem(TOKEN_KEY)) timer = window.setTimeout(poll, POLL_MS);
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  byId("sign-in").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = /** @type {HTMLInputElement} */ (byId("token"));
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    signIn().catch(report);
  });
  byId("sign-out").addEventListener("click", () => {
    window.clearTimeout(timer);
    current = null;
    signOut();
  });
  if (sessionStorage.getItem(TOKEN_KEY)) signIn().catch(report);
  else signOut();
});
