// @ts-check
/**
 * The Cluster page (racks → nodes → GPUs), imported by dashboard.js.
 *
 * Each GPU cell shows what /nodes says of that GPU (`gpu_list`): the jobs' shares on it
 * (another tenant's without an id) and its utilisation, as a bar and in its label.
 * A node's name opens its GPU link matrix (/cluster/topology, fetched once per node
 * list) as a table; the summary counts fragmented GPUs and a table lists the network
 * allocator's link loads.
 *
 * Keyed, so that a live update costs what changed: the racks, nodes and GPU cells are
 * built once for a node list and kept; each poll recomputes every cell's state and
 * label and touches only the elements whose text changed. One listener on the racks
 * serves hover, focus and click for every cell and node, and keyboard focus stays where
 * it is. bench/dashboard.py measures it at 1,000 nodes x 8 GPUs (docs/benchmarks.md).
 */
import { api, byId, clock, clockName, el, head, instant, policyText } from "./common.js";

/**
 * @typedef {import("./common.js").Job} Job
 * @typedef {import("./common.js").Page} Page
 * @typedef {"ready"|"cordoned"|"draining"|"down"} NodeState
 * @typedef {{job: string|null, fraction: number}} GpuShare
 * @typedef {{index: number, shares: GpuShare[], util: number|null}} Gpu
 * @typedef {{name: string, rack: number, gpu_type: string, gpus: number,
 *   gpus_allocated: number, jobs: string[], state?: NodeState, gpu_list: Gpu[]}} ClusterNode
 * @typedef {{kind: string, where: string, load_gbps: number, capacity_gbps: number,
 *   jobs: number}} LinkLoad
 * @typedef {{name: string, nodes: number, gpus: number, gpus_allocated: number,
 *   running: number, waiting: number, finished: number, policy: string,
 *   policy_options?: Record<string, unknown>, clock: "wall"|"simulated", now_s: number,
 *   time_scale: number, gpus_free: number|null, fragmentation: number|null,
 *   link_loads: LinkLoad[]|null}} Cluster
 * @typedef {{id: string, gpu_type: string, gpus: number, nic_gbps: number, numa: number[],
 *   links: string[][], gbps: (number|null)[][], nodes: string[]}} NodeType
 * @typedef {{node_types: NodeType[], racks: {name: string, uplink_gbps: number,
 *   nodes: string[]}[]}} Topology
 * @typedef {{job: Job|null, id: string|null, fraction: number}} Holder
 * @typedef {{state: "free"|"mine"|"shared"|"other", holders: Holder[], util: number|null}} GpuCell
 * @typedef {{button: HTMLElement, label: string, cell: GpuCell}} CellView
 * @typedef {{root: HTMLElement, name: HTMLElement, text: string, gpus: string, cells: CellView[]}} NodeView
 */

const STATE_TEXT = { free: "free", mine: "allocated", shared: "shared", other: "another tenant's job" };
const STATE_LETTER = { free: "·", mine: "A", shared: "S", other: "O" };
// A node that takes no new jobs: a frame (dashed, dotted, crossed) and a word, not only a colour.
const NODE_STATE_TEXT = { ready: "ready", cordoned: "cordoned", draining: "draining", down: "down" };
const SUMMARY = ["Policy", "Nodes", "GPUs allocated", "GPUs free", "Fragmented GPUs", "Running", "Waiting",
  "Finished", "Clock"];
const LINK_TEXT = { "nic-up": "NIC, sending", "nic-down": "NIC, receiving", "rack-up": "rack uplink",
  "rack-down": "rack downlink", "group-up": "group uplink (to the core)", "group-down": "group downlink" };

/**
 * The GPUs of one node, from its `gpu_list`: a GPU with no share is free; one whole
 * share is the job's (mine when this user can see the job, other when its id is
 * hidden); several shares, or a fraction, make it shared.
 * @param {ClusterNode} node @param {Map<string, Job>} visible @returns {GpuCell[]}
 */
function gpuCells(node, visible) {
  return Array.from({ length: node.gpus }, (_, i) => {
    const gpu = node.gpu_list?.[i];
    const holders = (gpu?.shares ?? []).map((s) => ({
      job: s.job === null ? null : visible.get(s.job) ?? null, id: s.job, fraction: s.fraction,
    }));
    /** @type {GpuCell["state"]} */
    let state = "free";
    if (holders.length > 1 || (holders.length === 1 && holders[0].fraction < 1)) state = "shared";
    else if (holders.length === 1) state = holders[0].id === null ? "other" : "mine";
    return { state, holders, util: gpu?.util ?? null };
  });
}

/** @param {Holder} h @param {boolean} shared @returns {string} */
function holderText(h, shared) {
  const share = shared ? ` ${Math.round(h.fraction * 100)}%` : "";
  if (h.id === null) return `another tenant's job${share}`;
  const j = h.job;
  return j ? `job ${j.name} (${j.id.slice(0, 8)}, tenant ${j.tenant})${share}` : `job ${h.id.slice(0, 8)}${share}`;
}

/** @param {ClusterNode} node @param {number} index @param {GpuCell} cell @returns {string} */
function gpuLabel(node, index, cell) {
  const who = cell.holders.map((h) => holderText(h, cell.state === "shared"));
  const util = cell.util === null ? "" : `, utilisation ${Math.round(cell.util * 100)}%`;
  return `${node.name} GPU ${index}: ${STATE_TEXT[cell.state]}${who.length ? ", " + who.join(" and ") : ""}${util}`;
}

/** @param {CellView} view */
function showGpu(view) {
  const links = view.cell.holders.flatMap((h) =>
    (h.job ? [" ", el("a", { href: `#/job/${h.job.id}` }, `Open job ${h.job.name}`)] : []));
  const node = (view.button.dataset.key ?? "").split("/")[0];
  const events = el("a", { href: `#/events?node=${encodeURIComponent(node)}` }, `Events on ${node}`);
  byId("gpu-detail").replaceChildren(view.label, ...links, " ", events);
}

/**
 * A node's GPU link matrix as a table: a row and a column per GPU, each pair's link as
 * `nvidia-smi topo -m` names it and its peer-to-peer Gbit/s; each GPU's NUMA node.
 * @param {string} name @param {NodeType} type @returns {HTMLElement}
 */
function topologyTable(name, type) {
  const gpus = Array.from({ length: type.gpus }, (_, i) => `GPU ${i}`);
  const rows = type.links.map((row, i) => el("tr", {},
    el("th", { scope: "row" }, gpus[i]),
    el("td", { class: "num" }, String(type.numa[i])),
    ...row.map((link, j) => {
      const gbps = type.gbps[i][j];
      return el("td", { class: `link ${link === "X" ? "self" : link.startsWith("NV") ? "nvlink" : "pcie"}` },
        link === "X" ? "—" : `${link} · ${gbps === null ? "" : Math.round(gbps)} Gbit/s`);
    })));
  return el("table", { class: "topology" },
    el("caption", {}, `GPU links of ${name}: ${type.gpu_type}, NIC ${type.nic_gbps} Gbit/s. ` +
      "NV<k>: k NVLink lanes; PIX, PXB: PCIe switches; PHB: host bridge; NODE: one NUMA node; SYS: across sockets."),
    head(["", "NUMA", ...gpus], [1]),
    el("tbody", {}, ...rows));
}

/** @param {LinkLoad[]|null} loads @returns {Node[]} */
function linkLoadView(loads) {
  if (loads === null) return [el("p", { class: "muted" }, "No network allocator runs: each job has its links to itself.")];
  if (!loads.length) return [el("p", { class: "muted" }, "No multi-node job crosses a NIC or an uplink.")];
  const rows = loads.map((x) => el("tr", {},
    el("th", { scope: "row" }, x.where), el("td", {}, LINK_TEXT[/** @type {keyof typeof LINK_TEXT} */ (x.kind)] ?? x.kind),
    el("td", { class: "num" }, x.load_gbps.toFixed(1)), el("td", { class: "num" }, x.capacity_gbps.toFixed(0)),
    el("td", { class: "num" }, `${Math.round((100 * x.load_gbps) / x.capacity_gbps)}%`),
    el("td", { class: "num" }, String(x.jobs))));
  return [el("table", {},
    el("caption", {}, "Load the network allocator assigns on each link multi-node jobs cross"),
    head(["Node, rack or group", "Link", "Load (Gbit/s)", "Capacity (Gbit/s)", "Used", "Jobs"], [2, 3, 4, 5]),
    el("tbody", {}, ...rows))];
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
      const view = { button, label: "", cell: /** @type {GpuCell} */ ({ state: "free", holders: [], util: null }) };
      cells.push(view);
      this.cells.set(`${node.name}/${i}`, view);
    }
    const name = el("button", { type: "button", class: "node-name", "data-node": node.name,
      "aria-haspopup": "true", "aria-controls": "topology" });
    const root = el("div", { class: "node", role: "group", "data-node": node.name },
      name, el("div", { class: "gpus" }, ...cells.map((c) => c.button)));
    const view = { root, name, text: "", gpus: "", cells };
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
        view.name.title = `Show the GPU links of ${node.name}`;
        view.root.className = `node ${state}`;
        view.root.dataset.state = state;
        view.root.setAttribute("aria-label", state === "ready" ? heading : `${heading} · ${NODE_STATE_TEXT[state]}`);
      }
      // A node whose GPUs read as at the last poll keeps its cells as they are: at
      // 1,000 nodes most polls change a few.
      // (A job's label also needs its name, from the running jobs' list: read with it.)
      const seen = (node.gpu_list ?? []).flatMap((g) => g.shares.map((h) => (h.job && visible.has(h.job) ? 1 : 0)));
      const gpus = `${JSON.stringify(node.gpu_list ?? null)}|${seen.join("")}`;
      if (view.gpus === gpus) continue;
      view.gpus = gpus;
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
        c.button.style.setProperty("--util", String(cell.util ?? 0));
        c.button.classList.toggle("has-util", cell.util !== null);
      });
    }
  }
}

/** @type {Layout|null} */
let layout = null;
/** Node name -> its type's link matrix, for the node list the layout was built for.
 * @type {Map<string, NodeType>} */
let nodeTypes = new Map();
let loadsText = "";

/** @param {string} name */
function showTopology(name) {
  const type = nodeTypes.get(name);
  const box = byId("topology");
  if (!type) {
    box.replaceChildren(el("p", {}, `No GPU link matrix known for ${name}.`));
  } else {
    const close = el("button", { type: "button", class: "link" }, "Close");
    close.addEventListener("click", () => {
      box.hidden = true;
      /** @type {HTMLElement|null} */ (document.querySelector(`button.node-name[data-node="${CSS.escape(name)}"]`))?.focus();
    });
    box.replaceChildren(el("h3", { id: "topology-title" }, `Topology of ${name}`), topologyTable(name, type), close);
  }
  box.hidden = false;
  box.focus();
}

/** @type {Page} */
export const clusterPage = {
  mount(view) {
    layout = null;
    nodeTypes = new Map();
    loadsText = "";
    const swatches = Object.entries(STATE_TEXT).map(([state, text]) =>
      el("li", {}, el("span", { class: `swatch gpu ${state}`, "aria-hidden": "true" }), text));
    const frames = Object.entries(NODE_STATE_TEXT).filter(([state]) => state !== "ready").map(([state, text]) =>
      el("li", {}, el("span", { class: `swatch frame ${state}`, "aria-hidden": "true" }), `node ${text}`));
    const util = el("li", {}, el("span", { class: "swatch util-sample", "aria-hidden": "true" }),
      "bar: GPU utilisation (empty 0%, full 100%)");
    const racks = el("div", { class: "racks", id: "racks" });
    /** @param {Event} event */
    const show = (event) => {
      const target = event.target instanceof Element ? event.target.closest("button.gpu, button.node-name") : null;
      if (!(target instanceof HTMLElement)) return;
      if (target.classList.contains("node-name")) {
        if (event.type === "click") showTopology(target.dataset.node ?? "");
        return;
      }
      const cell = layout?.cells.get(target.dataset.key ?? "");
      if (cell) showGpu(cell);
    };
    for (const kind of ["mouseover", "focusin", "click"]) racks.addEventListener(kind, show);
    view.append(
      el("h2", {}, "Cluster"),
      el("dl", { class: "summary", id: "summary", "aria-label": "Cluster summary" },
        ...SUMMARY.map((k) => el("div", {}, el("dt", {}, k), el("dd", {})))),
      el("p", { class: "muted" }, "Fragmented GPUs: free GPUs on nodes where no waiting job's request fits. " +
        "Select a node's name to see its GPU links."),
      el("ul", { class: "legend", "aria-label": "Legend" }, ...swatches, util, ...frames),
      racks,
      el("div", { class: "detail", id: "gpu-detail", "aria-live": "polite" },
        "Hover over or select a GPU to see its job."),
      el("section", { class: "topology-box", id: "topology", tabindex: "-1", "aria-labelledby": "topology-title",
        hidden: "" }),
      el("section", { "aria-labelledby": "links-title" }, el("h3", { id: "links-title" }, "Link loads"),
        el("div", { id: "link-loads" })),
    );
  },
  async refresh() {
    /** @type {[Cluster, {data: ClusterNode[]}, {data: Job[]}]} */
    const [cluster, nodes, running] = await Promise.all([
      api("/cluster"), api("/nodes"), api("/jobs?status=Running&limit=1000"),
    ]);
    clock.kind = cluster.clock;
    const free = cluster.gpus_free ?? null;
    const figures = [
      policyText(cluster.policy, cluster.policy_options), String(cluster.nodes), `${cluster.gpus_allocated.toFixed(1)} / ${cluster.gpus}`,
      free === null ? "—" : String(free),
      cluster.fragmentation === null || cluster.fragmentation === undefined ? "—"
        : `${cluster.fragmentation}${free ? ` (${Math.round((100 * cluster.fragmentation) / free)}% of free)` : ""}`,
      String(cluster.running), String(cluster.waiting), String(cluster.finished),
      `${instant(cluster.now_s)} (${clockName()})`,
    ];
    byId("summary").querySelectorAll("dd").forEach((dd, i) => {
      if (dd.textContent !== figures[i]) dd.textContent = figures[i];
    });
    if (layout === null || layout.key !== Layout.keyOf(nodes.data)) {
      /** @type {Topology} */
      const topology = await api("/cluster/topology");
      nodeTypes = new Map(topology.node_types.flatMap((t) => t.nodes.map((n) => [n, t])));
      layout = new Layout(nodes.data);
      byId("racks").replaceChildren(...layout.sections);
    }
    layout.update(nodes.data, new Map(running.data.map((j) => [j.id, j])));
    const loads = JSON.stringify(cluster.link_loads ?? null);
    if (loads !== loadsText) {
      loadsText = loads;
      byId("link-loads").replaceChildren(...linkLoadView(cluster.link_loads ?? null));
    }
  },
};
