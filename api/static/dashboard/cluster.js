// @ts-check
/**
 * The Cluster page (racks → nodes → GPUs), imported by dashboard.js.
 *
 * Keyed, so that a live update costs what changed: the racks, nodes and GPU cells are
 * built once for a node list and kept; each poll recomputes every cell's state and
 * label and touches only the elements whose text changed. One listener on the racks
 * serves hover, focus and click for every cell, and keyboard focus stays where it is.
 * bench/dashboard.py measures it at 1,000 nodes x 8 GPUs (docs/benchmarks.md).
 */
import { api, byId, duration, el } from "./common.js";

/**
 * @typedef {import("./common.js").Job} Job
 * @typedef {import("./common.js").Page} Page
 * @typedef {"ready"|"cordoned"|"draining"|"down"} NodeState
 * @typedef {{name: string, rack: number, gpu_type: string, gpus: number,
 *   gpus_allocated: number, jobs: string[], state?: NodeState}} ClusterNode
 * @typedef {{name: string, nodes: number, gpus: number, gpus_allocated: number,
 *   running: number, waiting: number, finished: number, policy: string, now_s: number,
 *   time_scale: number}} Cluster
 * @typedef {{state: "free"|"mine"|"shared"|"other", jobs: (Job|null)[]}} GpuCell
 * @typedef {{button: HTMLElement, label: string, cell: GpuCell}} CellView
 * @typedef {{root: HTMLElement, name: HTMLElement, text: string, cells: CellView[]}} NodeView
 */

const STATE_TEXT = { free: "free", mine: "allocated", shared: "shared", other: "another tenant's job" };
const STATE_LETTER = { free: "·", mine: "A", shared: "S", other: "O" };
// A node that takes no new jobs: a frame (dashed, dotted, crossed) and a word, not only a colour.
const NODE_STATE_TEXT = { ready: "ready", cordoned: "cordoned", draining: "draining", down: "down" };
const SUMMARY = ["Policy", "Nodes", "GPUs allocated", "Running", "Waiting", "Finished", "Simulated clock"];

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

/** @param {CellView} view */
function showGpu(view) {
  const links = view.cell.jobs.flatMap((j) => (j ? [" ", el("a", { href: `#/job/${j.id}` }, `Open job ${j.name}`)] : []));
  byId("gpu-detail").replaceChildren(view.label, ...links);
}

/** What the page keeps between polls; rebuilt when the node list changes. */
class Layout {
  /** @param {ClusterNode[]} nodes */
  constructor(nodes) {
    this.key = Layout.keyOf(nodes);
    /** @type {Map<string, NodeView>} */
    this.nodes = new Map();
    /** @type {Map<string, CellView>} keyed "node/index", as each button's data-key */
    this.cells = new Map();
    /** @type {Map<number, ClusterNode[]>} */
    const racks = new Map();
    for (const node of nodes) {
      if (!racks.has(node.rack)) racks.set(node.rack, []);
      racks.get(node.rack)?.push(node);
    }
    this.sections = [...racks.entries()].sort((a, b) => a[0] - b[0]).map(([rack, members]) =>
      el("section", { class: "rack", "aria-label": `Rack ${rack}` }, el("h3", {}, `Rack ${rack}`),
        el("div", { class: "nodes" }, ...members.map((node) => this.nodeView(node).root))));
  }

  /** @param {ClusterNode[]} nodes @returns {string} */
  static keyOf(nodes) {
    return nodes.map((n) => `${n.rack}/${n.name}/${n.gpus}`).join("|");
  }

  /** @param {ClusterNode} node @returns {NodeView} */
  nodeView(node) {
    /** @type {CellView[]} */
    const cells = [];
    for (let i = 0; i < node.gpus; i++) {
      const button = el("button", { type: "button", class: "gpu", "data-key": `${node.name}/${i}` });
      const view = { button, label: "", cell: /** @type {GpuCell} */ ({ state: "free", jobs: [] }) };
      cells.push(view);
      this.cells.set(`${node.name}/${i}`, view);
    }
    const name = el("span", { class: "node-name" });
    const root = el("div", { class: "node", role: "group", "data-node": node.name },
      name, el("div", { class: "gpus" }, ...cells.map((c) => c.button)));
    const view = { root, name, text: "", cells };
    this.nodes.set(node.name, view);
    return view;
  }

  /** Bring the kept elements up to date with this poll's nodes.
   * @param {ClusterNode[]} nodes @param {Map<string, Job>} visible */
  update(nodes, visible) {
    for (const node of nodes) {
      const view = this.nodes.get(node.name);
      if (!view) continue;
      const state = node.state ?? "ready";
      const heading = `${node.name} · ${node.gpu_type} · ${node.gpus_allocated.toFixed(1)}/${node.gpus} GPUs`;
      if (view.text !== `${heading}|${state}`) {
        view.text = `${heading}|${state}`;
        const badge = state === "ready" ? [] : [el("span", { class: `node-state ${state}` }, NODE_STATE_TEXT[state])];
        view.name.replaceChildren(heading, ...badge);
        view.root.className = `node ${state}`;
        view.root.dataset.state = state;
        view.root.setAttribute("aria-label", state === "ready" ? heading : `${heading} · ${NODE_STATE_TEXT[state]}`);
      }
      gpuCells(node, visible).forEach((cell, i) => {
        const c = view.cells[i];
        c.cell = cell;
        const label = gpuLabel(node, i, cell);
        if (c.label === label) return;
        c.label = label;
        c.button.className = `gpu ${cell.state}`;
        c.button.dataset.state = cell.state;
        c.button.setAttribute("aria-label", label);
        c.button.title = label;
        c.button.textContent = STATE_LETTER[cell.state];
      });
    }
  }
}

/** @type {Layout|null} */
let layout = null;

/** @type {Page} */
export const clusterPage = {
  mount(view) {
    layout = null;
    const swatches = Object.entries(STATE_TEXT).map(([state, text]) =>
      el("li", {}, el("span", { class: `swatch gpu ${state}`, "aria-hidden": "true" }), text));
    const frames = Object.entries(NODE_STATE_TEXT).filter(([state]) => state !== "ready").map(([state, text]) =>
      el("li", {}, el("span", { class: `swatch frame ${state}`, "aria-hidden": "true" }), `node ${text}`));
    const racks = el("div", { class: "racks", id: "racks" });
    /** @param {Event} event */
    const show = (event) => {
      const target = event.target instanceof Element ? event.target.closest("button.gpu") : null;
      const cell = target instanceof HTMLElement ? layout?.cells.get(target.dataset.key ?? "") : undefined;
      if (cell) showGpu(cell);
    };
    for (const kind of ["mouseover", "focusin", "click"]) racks.addEventListener(kind, show);
    view.append(
      el("h2", {}, "Cluster"),
      el("dl", { class: "summary", id: "summary", "aria-label": "Cluster summary" },
        ...SUMMARY.map((k) => el("div", {}, el("dt", {}, k), el("dd", {})))),
      el("ul", { class: "legend", "aria-label": "Legend" }, ...swatches, ...frames),
      racks,
      el("div", { class: "detail", id: "gpu-detail", "aria-live": "polite" },
        "Hover over or select a GPU to see its job."),
    );
  },
  async refresh() {
    /** @type {[Cluster, {data: ClusterNode[]}, {data: Job[]}]} */
    const [cluster, nodes, running] = await Promise.all([
      api("/cluster"), api("/nodes"), api("/jobs?status=Running&limit=1000"),
    ]);
    const figures = [
      cluster.policy, String(cluster.nodes), `${cluster.gpus_allocated.toFixed(1)} / ${cluster.gpus}`,
      String(cluster.running), String(cluster.waiting), String(cluster.finished), duration(cluster.now_s),
    ];
    byId("summary").querySelectorAll("dd").forEach((dd, i) => {
      if (dd.textContent !== figures[i]) dd.textContent = figures[i];
    });
    if (layout === null || layout.key !== Layout.keyOf(nodes.data)) {
      layout = new Layout(nodes.data);
      byId("racks").replaceChildren(...layout.sections);
    }
    layout.update(nodes.data, new Map(running.data.map((j) => [j.id, j])));
  },
};
