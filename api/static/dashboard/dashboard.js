// @ts-check
/**
 * The dashboard's shell and its Cluster, Queue and Job pages, loaded by index.html as an
 * ES module, served at / by api/dashboard.py; the Replays, What-if and Admin pages are
 * in replays.js, whatif.js and admin.js, shared helpers in common.js and charts.js.
 * Plain browser JavaScript with JSDoc types, no build step; check the types with
 * TypeScript 5 (`npm install typescript@5` anywhere, then
 * `tsc --noEmit --allowJs --checkJs --strict --target es2022 --module es2022
 *  --lib es2022,dom,dom.iterable api/static/dashboard/*.js`).
 * It reads the REST API at /api/v1 with the token the user signs in with (kept in
 * sessionStorage), and polls it every POLL_MS.
 */
import { adminPage } from "./admin.js";
import { announce, api, byId, duration, el, FINISHED, report, session, showError, signOut, TOKEN_KEY,
  WAITING } from "./common.js";
import { replaysPage } from "./replays.js";
import { whatifPage } from "./whatif.js";

/**
 * @typedef {import("./common.js").User} User
 * @typedef {import("./common.js").Job} Job
 * @typedef {import("./common.js").Page} Page
 * @typedef {"ready"|"cordoned"|"draining"|"down"} NodeState
 * @typedef {{name: string, rack: number, gpu_type: string, gpus: number,
 *   gpus_allocated: number, jobs: string[], state?: NodeState}} ClusterNode
 * @typedef {{name: string, nodes: number, gpus: number, gpus_allocated: number,
 *   running: number, waiting: number, finished: number, policy: string, now_s: number,
 *   time_scale: number}} Cluster
 * @typedef {{kind: string, sim_s: number|null, detail: string, at: string}} JobEvent
 * @typedef {{name: string, value: number, step: number}} Metric
 * @typedef {{state: "free"|"mine"|"shared"|"other", jobs: (Job|null)[]}} GpuCell
 */

const POLL_MS = 1000; // the issue asks for updates at least every 2 s; this leaves time to fetch
// Metric names gpuflow.train reports (docs/api.md, "Metrics from running jobs").
const CHARTS = [
  { name: "samples_per_s", title: "Throughput (samples/s)", colour: "#0072b2" },
  { name: "loss", title: "Loss", colour: "#d55e00" },
  { name: "batch_size", title: "Global batch size", colour: "#009e73" },
];
const STATE_TEXT = { free: "free", mine: "allocated", shared: "shared", other: "another tenant's job" };
const STATE_LETTER = { free: "·", mine: "A", shared: "S", other: "O" };
// A node that takes no new jobs: a frame (dashed, dotted, crossed) and a word, not only a colour.
const NODE_STATE_TEXT = { ready: "ready", cordoned: "cordoned", draining: "draining", down: "down" };

/** @param {Job} job @returns {string} */
function reasonText(job) {
  if (!job.reason_code) return "not yet considered by a scheduling round";
  return job.reason_message ? `${job.reason_code}: ${job.reason_message}` : job.reason_code;
}

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

// ---- Cluster: racks → nodes → GPUs --------------------------------------------------

/**
 * The GPUs of one node. /nodes gives per node the GPUs allocated (fractions summed)
 * and the ids of the jobs on it, not which GPU each holds: the cells are filled in
 * job order, a job holding num_gpus / (its nodes) of them. A job this user cannot
 * see (another tenant's) fills what is left, drawn as occupied without its id.
 * @param {ClusterNode} node @param {Map<string, Job>} visible @returns {GpuCell[]}
 */
function gpuCells(node, visible) {
  const occupied = Math.min(node.gpus, Math.ceil(node.gpus_allocated - 1e-9));
  /** @type {(Job|null)[]} */
  const holders = [];
  const hidden = node.jobs.filter((id) => !visible.has(id));
  for (const id of node.jobs) {
    const job = visible.get(id);
    if (!job) continue;
    const spread = Math.max(1, job.nodes.split(",").filter(Boolean).length);
    for (let i = 0; i < Math.max(1, Math.round(job.num_gpus / spread)); i++) holders.push(job);
  }
  const left = Math.max(hidden.length ? 1 : 0, occupied - holders.length);
  for (let i = 0; i < left; i++) holders.push(null);
  /** @type {GpuCell[]} */
  const cells = Array.from({ length: node.gpus }, () => ({ state: "free", jobs: [] }));
  holders.forEach((job, i) => cells[occupied ? i % occupied : 0].jobs.push(job));
  const fractional = node.gpus_allocated % 1 > 1e-9;
  cells.forEach((cell, i) => {
    if (!cell.jobs.length) return;
    const sharedCell = cell.jobs.length > 1 || (fractional && i === occupied - 1);
    cell.state = sharedCell ? "shared" : cell.jobs[0] ? "mine" : "other";
  });
  return cells;
}

/** @param {ClusterNode} node @param {number} index @param {GpuCell} cell @returns {string} */
function gpuLabel(node, index, cell) {
  const who = cell.jobs.map((j) => (j ? `job ${j.name} (${j.id.slice(0, 8)}, tenant ${j.tenant})` : "another tenant's job"));
  return `${node.name} GPU ${index}: ${STATE_TEXT[cell.state]}${who.length ? ", " + who.join(" and ") : ""}`;
}

/** @type {Page} */
const clusterPage = {
  mount(view) {
    const swatches = Object.entries(STATE_TEXT).map(([state, text]) =>
      el("li", {}, el("span", { class: `swatch gpu ${state}`, "aria-hidden": "true" }), text));
    const frames = Object.entries(NODE_STATE_TEXT).filter(([state]) => state !== "ready").map(([state, text]) =>
      el("li", {}, el("span", { class: `swatch frame ${state}`, "aria-hidden": "true" }), `node ${text}`));
    view.append(
      el("h2", {}, "Cluster"),
      el("dl", { class: "summary", id: "summary", "aria-label": "Cluster summary" }),
      el("ul", { class: "legend", "aria-label": "Legend" }, ...swatches, ...frames),
      el("div", { class: "racks", id: "racks" }),
      el("div", { class: "detail", id: "gpu-detail", "aria-live": "polite" },
        "Hover over or select a GPU to see its job."),
    );
  },
  async refresh() {
    /** @type {[Cluster, {data: ClusterNode[]}, {data: Job[]}]} */
    const [cluster, nodes, running] = await Promise.all([
      api("/cluster"), api("/nodes"), api("/jobs?status=Running&limit=1000"),
    ]);
    const visible = new Map(running.data.map((j) => [j.id, j]));
    const figures = [
      ["Policy", cluster.policy], ["Nodes", String(cluster.nodes)],
      ["GPUs allocated", `${cluster.gpus_allocated.toFixed(1)} / ${cluster.gpus}`],
      ["Running", String(cluster.running)], ["Waiting", String(cluster.waiting)],
      ["Finished", String(cluster.finished)], ["Simulated clock", duration(cluster.now_s)],
    ];
    byId("summary").replaceChildren(...figures.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v))));
    const racks = new Map();
    for (const node of nodes.data) {
      if (!racks.has(node.rack)) racks.set(node.rack, []);
      racks.get(node.rack).push(node);
    }
    const focused = document.activeElement instanceof HTMLElement ? document.activeElement.dataset.key : undefined;
    const sections = [...racks.entries()].sort((a, b) => a[0] - b[0]).map(([rack, members]) =>
      el("section", { class: "rack", "aria-label": `Rack ${rack}` }, el("h3", {}, `Rack ${rack}`),
        el("div", { class: "nodes" }, ...members.map((/** @type {ClusterNode} */ node) => nodeGrid(node, visible)))));
    byId("racks").replaceChildren(...sections);
    if (focused) /** @type {HTMLElement|null} */ (document.querySelector(`[data-key="${CSS.escape(focused)}"]`))?.focus();
  },
};

/** @param {ClusterNode} node @param {Map<string, Job>} visible @returns {HTMLElement} */
function nodeGrid(node, visible) {
  const buttons = gpuCells(node, visible).map((cell, i) => {
    const label = gpuLabel(node, i, cell);
    const button = el("button", { type: "button", class: `gpu ${cell.state}`, "aria-label": label,
      title: label, "data-key": `${node.name}/${i}`, "data-state": cell.state }, STATE_LETTER[cell.state]);
    const show = () => showGpu(label, cell);
    button.addEventListener("mouseenter", show);
    button.addEventListener("focus", show);
    button.addEventListener("click", show);
    return button;
  });
  const state = node.state ?? "ready";
  const heading = `${node.name} · ${node.gpu_type} · ${node.gpus_allocated.toFixed(1)}/${node.gpus} GPUs`;
  const badge = state === "ready" ? [] : [el("span", { class: `node-state ${state}` }, NODE_STATE_TEXT[state])];
  return el("div", { class: `node ${state}`, role: "group", "data-node": node.name, "data-state": state,
    "aria-label": state === "ready" ? heading : `${heading} · ${NODE_STATE_TEXT[state]}` },
  el("span", { class: "node-name" }, heading, ...badge), el("div", { class: "gpus" }, ...buttons));
}

/** @param {string} label @param {GpuCell} cell */
function showGpu(label, cell) {
  const links = cell.jobs.flatMap((j) => (j ? [" ", el("a", { href: `#/job/${j.id}` }, `Open job ${j.name}`)] : []));
  byId("gpu-detail").replaceChildren(label, ...links);
}

// ---- Queue: the waiting jobs -------------------------------------------------------

/** @type {Page} */
const queuePage = {
  mount(view) {
    const input = el("input", { id: "queue-filter", type: "search", placeholder: "name, id, tenant or reason" });
    input.addEventListener("input", () => void queuePage.refresh().catch(report));
    view.append(
      el("h2", {}, "Queue"),
      el("div", { class: "filter" }, el("label", { for: "queue-filter" }, "Filter "), input),
      el("table", { "aria-describedby": "queue-caption" },
        el("caption", { id: "queue-caption", class: "muted" }),
        el("thead", {}, el("tr", {}, ...["Position", "Job", "Tenant", "GPUs", "Status", "Waiting for",
          "Why it waits"].map((h, i) => el("th", { scope: "col", class: i === 0 || i === 3 ? "num" : "" }, h)))),
        el("tbody", { id: "queue-rows" })),
    );
  },
  async refresh() {
    /** @type {[Cluster, ...{data: Job[]}[]]} */
    const [cluster, ...lists] = await Promise.all([
      api("/cluster"), ...WAITING.map((s) => api(`/jobs?status=${s}&limit=1000`)),
    ]);
    const waiting = lists.flatMap((l) => l.data).sort((a, b) =>
      (a.submit_s ?? 0) - (b.submit_s ?? 0) || a.id.localeCompare(b.id));
    const filter = /** @type {HTMLInputElement} */ (byId("queue-filter")).value.trim().toLowerCase();
    const rows = waiting.map((job, i) => ({ job, position: i + 1 })).filter(({ job }) => !filter ||
      [job.name, job.id, job.tenant, job.status, reasonText(job)].some((t) => t.toLowerCase().includes(filter)));
    byId("queue-caption").textContent = `${waiting.length} waiting, in submission order ` +
      `(the active policy, ${cluster.policy}, picks among them); wait times on the simulated clock.`;
    byId("queue-rows").replaceChildren(...rows.map(({ job, position }) => el("tr", { "data-job": job.id },
      el("td", { class: "num" }, String(position)),
      el("td", {}, el("a", { href: `#/job/${job.id}` }, `${job.name} (${job.id.slice(0, 8)})`)),
      el("td", {}, job.tenant), el("td", { class: "num" }, String(job.num_gpus)), el("td", {}, job.status),
      el("td", {}, duration(job.submit_s === null ? null : cluster.now_s - job.submit_s)),
      el("td", { class: "reason" }, reasonText(job)))));
  },
};

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
