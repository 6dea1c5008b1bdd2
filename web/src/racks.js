// @ts-check
/**
 * The Cluster page's racks, imported by cluster.js: one collapsible `<details>` per
 * rack (its line says the rack's nodes, GPUs in use, mean utilisation and fenced
 * nodes), holding a group per node (its name opens its GPU links) with a button per
 * GPU. A rack's nodes are built the first time it opens, so that a 1,000-node cluster,
 * whose racks start closed, costs the summary and the heat map rather than 8,000
 * buttons; small clusters start with every rack open.
 *
 * Keyed, so that a live update costs what changed: a node's elements are built once
 * for a node list and kept; each poll recomputes the open racks' cells and touches only
 * the elements whose text changed; keyboard focus stays where it is.
 */
import { el } from "./common.js";
import { gpuState, STATE_TEXT } from "./cluster_summary.js";
import { gpuColour, inkOn } from "./palette.js";

/**
 * @typedef {import("./cluster_summary.js").ClusterNode} ClusterNode
 * @typedef {import("./cluster_summary.js").GpuShare} GpuShare
 * @typedef {import("./cluster_summary.js").GpuState} GpuState
 * @typedef {import("./palette.js").ColourBy} ColourBy
 * @typedef {import("./palette.js").TenantColours} TenantColours
 * @typedef {{by: ColourBy, tenants: TenantColours, types: Map<string, string>}} Paint
 * @typedef {{button: HTMLElement, node: string, label: string, shares: GpuShare[]}} CellView
 * @typedef {{root: HTMLElement, name: HTMLElement, text: string, gpus: string, cells: CellView[]}} NodeView
 * @typedef {{rack: number, details: HTMLDetailsElement, line: HTMLElement, body: HTMLElement,
 *   members: ClusterNode[], built: boolean, text: string}} RackView
 */

// A GPU's state as a letter on its button, in every colouring but by tenant.
export const STATE_LETTER = { free: "·", mine: "A", shared: "S", other: "O" };
// A node that takes no new jobs: a frame (dashed, dotted, crossed) and a word, not only a colour.
export const NODE_STATE_TEXT = { ready: "ready", cordoned: "cordoned", draining: "draining", down: "down" };

/** @param {GpuShare} h @param {boolean} shared @returns {string} */
function holderText(h, shared) {
  const part = shared ? ` ${Math.round(h.fraction * 100)}%` : "";
  if (h.job === null) return `another tenant's job${part}`;
  return h.name ? `job ${h.name} (${h.job.slice(0, 8)}, tenant ${h.tenant})${part}` : `job ${h.job.slice(0, 8)}${part}`;
}

/** What one GPU is, in words (its button's label, the heat map's detail).
 * @param {string} node @param {number} index @param {GpuShare[]} shares @param {number|null} util
 * @returns {string} */
export function gpuLabel(node, index, shares, util) {
  const state = gpuState(shares);
  // "another tenant's job" is the state and the holder both: said once.
  const who = state === "other" ? [] : shares.map((h) => holderText(h, state === "shared"));
  const busy = util === null ? "" : `, utilisation ${Math.round(util * 100)}%`;
  return `${node} GPU ${index}: ${STATE_TEXT[state]}${who.length ? ", " + who.join(" and ") : ""}${busy}`;
}

/** @param {ClusterNode[]} members @returns {string} */
function rackLine(members) {
  let gpus = 0, used = 0, utilSum = 0, utilCount = 0;
  /** @type {Record<string, number>} */
  const fenced = {};
  for (const node of members) {
    gpus += node.gpus;
    used += node.gpus_allocated;
    for (const g of node.gpu_list ?? []) {
      if (g.util !== null) {
        utilSum += g.util;
        utilCount += 1;
      }
    }
    const state = node.state ?? "ready";
    if (state !== "ready") fenced[state] = (fenced[state] ?? 0) + 1;
  }
  const util = utilCount ? ` · utilisation ${Math.round((100 * utilSum) / utilCount)}%` : "";
  const marks = Object.entries(fenced).map(([state, n]) => ` · ${n} ${state}`).join("");
  return `${members.length} nodes · ${used.toFixed(1)}/${gpus} GPUs in use${util}${marks}`;
}

export class Racks {
  /** @param {ClusterNode[]} nodes @param {boolean} open whether every rack starts open */
  constructor(nodes, open) {
    this.key = Racks.keyOf(nodes);
    /** @type {Map<string, NodeView>} */
    this.nodes = new Map();
    /** @type {Map<string, CellView>} keyed "node/index", as each button's data-key */
    this.cells = new Map();
    /** @type {Map<string, RackView>} node name -> its rack */
    this.rackOf = new Map();
    /** @type {Map<string, ClusterNode>} each node as the last update read it */
    this.latest = new Map(nodes.map((n) => [n.name, n]));
    /** @type {Paint|null} */
    this.paint = null;
    /** @type {Map<number, ClusterNode[]>} */
    const racks = new Map();
    for (const node of nodes) {
      if (!racks.has(node.rack)) racks.set(node.rack, []);
      racks.get(node.rack)?.push(node);
    }
    /** @type {RackView[]} */
    this.racks = [...racks.entries()].sort((a, b) => a[0] - b[0]).map(([rack, members]) => {
      const line = el("span", { class: "rack-line" });
      const body = el("div", { class: "nodes" });
      const details = /** @type {HTMLDetailsElement} */ (el("details", { class: "rack", "data-rack": String(rack) },
        el("summary", {}, el("h3", {}, `Rack ${rack}`), " ", line), body));
      const view = { rack, details, line, body, members, built: false, text: "" };
      for (const node of members) this.rackOf.set(node.name, view);
      details.addEventListener("toggle", () => {
        if (details.open) this.build(view);
      });
      return view;
    });
    // In rack order, as the heat map draws them.
    this.order = this.racks.flatMap((r) => r.members);
    this.sections = this.racks.map((r) => r.details);
    if (open) for (const r of this.racks) r.details.open = true;
  }

  /** @param {ClusterNode[]} nodes @returns {string} */
  static keyOf(nodes) {
    return nodes.map((n) => `${n.rack}/${n.name}/${n.gpus}/${n.gpu_type}`).join("|");
  }

  /** Build a rack's nodes (once) and bring them up to date. @param {RackView} rack */
  build(rack) {
    if (rack.built) return;
    rack.built = true;
    rack.body.append(...rack.members.map((node) => this.nodeView(node).root));
    const paint = this.paint;
    if (!paint) return;
    for (const member of rack.members) {
      const view = this.nodes.get(member.name);
      if (view) this.updateNode(view, this.latest.get(member.name) ?? member, paint);
    }
  }

  /** @param {boolean} open */
  setOpen(open) {
    for (const r of this.racks) {
      r.details.open = open;
      if (open) this.build(r);
    }
  }

  /** Open `name`'s rack and give its node's view. @param {string} name @returns {NodeView|null} */
  reveal(name) {
    const rack = this.rackOf.get(name);
    if (!rack) return null;
    rack.details.open = true;
    this.build(rack);
    return this.nodes.get(name) ?? null;
  }

  /** @param {ClusterNode} node @returns {NodeView} */
  nodeView(node) {
    /** @type {CellView[]} */
    const cells = [];
    for (let i = 0; i < node.gpus; i++) {
      const button = el("button", { type: "button", class: "gpu", "data-key": `${node.name}/${i}` });
      const view = { button, node: node.name, label: "", shares: [] };
      cells.push(view);
      this.cells.set(`${node.name}/${i}`, view);
    }
    const name = el("button", { type: "button", class: "node-name", "data-node": node.name,
      "aria-haspopup": "true", "aria-controls": "topology" });
    const root = el("div", { class: "node", role: "group", "data-node": node.name, "data-gpu-type": node.gpu_type },
      name, el("div", { class: "gpus" }, ...cells.map((c) => c.button)));
    const view = { root, name, text: "", gpus: "", cells };
    this.nodes.set(node.name, view);
    return view;
  }

  /** Bring the racks' lines and the built nodes up to date with this poll's nodes.
   * @param {ClusterNode[]} nodes @param {Paint} paint */
  update(nodes, paint) {
    for (const node of nodes) this.latest.set(node.name, node);
    this.paint = paint;
    /** @type {Map<RackView, ClusterNode[]>} */
    const byRack = new Map();
    for (const node of nodes) {
      const rack = this.rackOf.get(node.name);
      if (!rack) continue;
      if (!byRack.has(rack)) byRack.set(rack, []);
      byRack.get(rack)?.push(node);
    }
    for (const [rack, members] of byRack) {
      const text = rackLine(members);
      if (rack.text !== text) rack.line.textContent = rack.text = text;
    }
    for (const node of nodes) {
      const view = this.nodes.get(node.name);
      if (view) this.updateNode(view, node, paint);
    }
  }

  /** @param {NodeView} view @param {ClusterNode} node @param {Paint} paint */
  updateNode(view, node, paint) {
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
    // A node whose GPUs read as at the last poll, painted the same way, keeps its cells:
    // at 1,000 nodes most polls change a few.
    const gpus = `${paint.by}|${JSON.stringify(node.gpu_list ?? null)}`;
    if (view.gpus === gpus) return;
    view.gpus = gpus;
    view.cells.forEach((c, i) => {
      const gpu = node.gpu_list?.[i];
      const shares = gpu?.shares ?? [];
      const util = gpu?.util ?? null;
      c.shares = shares;
      const label = gpuLabel(node.name, i, shares, util);
      const cell = gpuState(shares);
      c.label = label;
      c.button.className = `gpu ${cell}`;
      c.button.dataset.state = cell;
      c.button.setAttribute("aria-label", label);
      c.button.title = label;
      c.button.style.setProperty("--util", String(util ?? 0));
      c.button.classList.toggle("has-util", util !== null);
      // By type every GPU takes its node's hue, free or not, and keeps its state's letter.
      if (paint.by === "util" || (!shares.length && paint.by !== "type")) {
        c.button.textContent = STATE_LETTER[cell];
        c.button.style.removeProperty("background");
        c.button.style.removeProperty("color");
        return;
      }
      const colour = gpuColour(paint.by, shares, util, paint.tenants, paint.types.get(node.gpu_type));
      c.button.classList.add("painted");
      c.button.style.background = colour;
      c.button.style.color = inkOn(colour);
      c.button.textContent = paint.by === "tenant"
        ? [...new Set(shares.map((h) => (h.job === null ? "·" : paint.tenants.of(h.tenant ?? null).mark)))].join("")
        : STATE_LETTER[cell];
    });
  }
}
