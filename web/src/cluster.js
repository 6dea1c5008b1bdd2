// @ts-check
/**
 * The Cluster page, imported by dashboard.js: a summary first (the service's counts,
 * then GPUs by state, type and tenant and the hottest nodes: cluster_summary.js), a
 * search by node, job or tenant, a heat map of every GPU (heatmap.js) coloured by
 * utilisation, by its node's GPU type or, for admins, by tenant or job (palette.js,
 * with a legend), then the racks → nodes → GPUs (racks.js), collapsible, and a node's
 * GPU link matrix (/cluster/topology) and the network allocator's link loads.
 *
 * Everything comes from three requests a poll: /cluster (counts, fragmentation, link
 * loads), /nodes (each GPU's shares, with the job's name and tenant where the caller
 * may see them, and its utilisation) and, once per node list, /cluster/topology. One
 * listener on the racks serves hover, focus and click for every cell and node.
 * bench/dashboard.py measures it at 1,000 nodes x 8 GPUs (docs/benchmarks.md).
 */
import { api, byId, clock, clockName, el, head, instant, policyText, replaceKeepingFocus, session } from "./common.js";
import { STATE_TEXT, summarise, summaryTables } from "./cluster_summary.js";
import { HeatMap } from "./heatmap.js";
import { FREE, OTHERS, TenantColours, UNKNOWN, gpuColour, typeColours, viridisGradient } from "./palette.js";
import { NODE_STATE_TEXT, Racks, STATE_LETTER, gpuLabel } from "./racks.js";

/**
 * @typedef {import("./cluster_summary.js").ClusterNode} ClusterNode
 * @typedef {import("./cluster_summary.js").GpuShare} GpuShare
 * @typedef {import("./palette.js").ColourBy} ColourBy
 * @typedef {import("./common.js").Page} Page
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
 * @typedef {{node: ClusterNode, index: number, why: string[]}} Match
 */

const SUMMARY = ["Policy", "Nodes", "GPUs allocated", "GPUs free", "Fragmented GPUs", "Running", "Waiting",
  "Finished", "Clock"];
const LINK_TEXT = { "nic-up": "NIC, sending", "nic-down": "NIC, receiving", "rack-up": "rack uplink",
  "rack-down": "rack downlink", "group-up": "group uplink (to the core)", "group-down": "group downlink" };
// Racks start open up to this many GPUs (64 8-GPU nodes, a few screens of buttons);
// a larger cluster opens with its summary and heat map, every rack closed.
const OPEN_UP_TO_GPUS = 512;
const RESULTS_SHOWN = 20; // search results listed; the heat map outlines every match
// The colourings and their words; a GPU's type is no secret, a tenant's or job's GPUs
// are shown to admins only (others see other tenants' jobs without names).
const COLOUR_BY = { util: "utilisation", type: "GPU type", tenant: "tenant", job: "job" };
/** @type {import("./palette.js").ColourBy[]} */
const FOR_EVERYONE = ["util", "type"];

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

/** What the page keeps between polls; reset on mount. */
const state = {
  /** @type {Racks|null} */
  racks: null,
  /** @type {HeatMap|null} */
  heat: null,
  /** Node name -> its type's link matrix, for the node list the racks were built for.
   * @type {Map<string, NodeType>} */
  nodeTypes: new Map(),
  /** @type {ClusterNode[]} this poll's nodes, in rack order */
  nodes: [],
  /** @type {ColourBy} */
  by: "util",
  tenants: new TenantColours(),
  /** GPU type -> its hue, for the node list the racks were built for. @type {Map<string, string>} */
  types: new Map(),
  query: "",
  /** @type {Match[]} */
  matches: [],
  loadsText: "",
  glanceText: "",
  legendText: "",
  resultsText: "",
  /** @type {HTMLElement|null} */
  found: null,
  /** Lays the heat map out again when its box changes width. @type {ResizeObserver|null} */
  resize: null,
  heatWidth: 0,
};

/** Lay the heat map out for its box's width (after a new node list or a resize). */
function layoutHeat() {
  const box = state.heat?.canvas.parentElement;
  if (!state.racks || !state.heat || !box) return;
  state.heatWidth = box.clientWidth;
  state.heat.layout(state.racks.order, state.heatWidth);
}

/** The GPU's words (its type among them: the heat map's colour is never alone) and
 * links in the detail box.
 * @param {string} node @param {string} type @param {GpuShare[]} shares @param {string} label */
function showGpu(node, type, shares, label) {
  const links = shares.flatMap((h) =>
    (h.job !== null ? [" ", el("a", { href: `#/job/${h.job}` }, `Open job ${h.name ?? h.job.slice(0, 8)}`)] : []));
  const events = el("a", { href: `#/events?node=${encodeURIComponent(node)}` }, `Events on ${node}`);
  byId("gpu-detail").replaceChildren(`${label} · ${type}`, ...links, " ", events);
}

/** @param {string} name */
function showTopology(name) {
  const type = state.nodeTypes.get(name);
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

/** Open `name`'s rack, outline the node, scroll to it and put the focus on its name.
 * @param {string} name */
function reveal(name) {
  const view = state.racks?.reveal(name);
  if (!view) return;
  state.found?.classList.remove("found");
  view.root.classList.add("found");
  state.found = view.root;
  view.root.scrollIntoView({ block: "center" });
  view.name.focus({ preventScroll: true });
}

/** The nodes that match the search, each with why: its name, a job's id or name, a tenant.
 * @param {string} query @returns {Match[]} */
function search(query) {
  const q = query.trim().toLowerCase();
  if (!q) return [];
  /** @type {Match[]} */
  const found = [];
  state.nodes.forEach((node, index) => {
    /** @type {Set<string>} */
    const why = new Set();
    if (node.name.toLowerCase().includes(q)) why.add("node");
    for (const gpu of node.gpu_list ?? []) {
      for (const h of gpu.shares) {
        if (h.job === null) continue;
        if (h.job.startsWith(q) || (h.name ?? "").toLowerCase().includes(q)) why.add(`job ${h.name ?? h.job.slice(0, 8)}`);
        if ((h.tenant ?? "").toLowerCase().includes(q)) why.add(`tenant ${h.tenant}`);
      }
    }
    if (why.size) found.push({ node, index, why: [...why] });
  });
  // An exact node name first, then nodes by name, then the rest in rack order.
  const rank = (/** @type {Match} */ m) => (m.node.name.toLowerCase() === q ? 0 : m.why[0] === "node" ? 1 : 2);
  return found.map((m, i) => ({ m, i })).sort((a, b) => rank(a.m) - rank(b.m) || a.i - b.i).map(({ m }) => m);
}

function showMatches() {
  state.matches = search(state.query);
  const count = byId("search-count");
  const text = !state.query.trim() ? "" : !state.matches.length ? `No node matches “${state.query.trim()}”.`
    : `${state.matches.length} ${state.matches.length === 1 ? "node matches" : "nodes match"} “${state.query.trim()}”` +
      (state.matches.length > RESULTS_SHOWN ? ` (the first ${RESULTS_SHOWN} listed; the heat map outlines all)` : "") +
      ". Enter opens the first.";
  if (count.textContent !== text) count.textContent = text;
  const shown = state.matches.slice(0, RESULTS_SHOWN);
  const key = shown.map((m) => `${m.node.name}:${m.why.join(",")}`).join("|");
  if (key !== state.resultsText) {
    state.resultsText = key;
    replaceKeepingFocus(byId("search-results"), shown.map((m) => el("li", {},
      el("button", { type: "button", class: "link", "data-reveal": m.node.name, "data-key": m.node.name },
        m.node.name), ` rack ${m.node.rack} · ${m.why.slice(0, 3).join(", ")}${m.why.length > 3 ? ", …" : ""}`)));
  }
}

function drawHeat() {
  const heat = state.heat;
  if (!heat) return;
  const { by, tenants, types, nodes } = state;
  const marked = state.query.trim() ? new Set(state.matches.map((m) => m.index)) : null;
  heat.draw((i, g) => {
    const gpu = nodes[i].gpu_list?.[g];
    return gpuColour(by, gpu?.shares ?? [], gpu?.util ?? null, tenants, types.get(nodes[i].gpu_type));
  }, marked);
  heat.canvas.dataset.gpus = String(nodes.reduce((n, node) => n + node.gpus, 0));
}

/** The legend for the colouring in use: the cells' states, the GPU types' hues or the
 * tenants' hues, and the heat map's scale. @returns {Node[]} */
function legendItems() {
  /** @param {string} style @param {string} text @param {string} [cls] */
  const item = (style, text, cls = "swatch") => el("li", {}, el("span", { class: cls, style, "aria-hidden": "true" }), text);
  const free = item(`background:${FREE}`, "free");
  if (state.by === "tenant") {
    const named = [...state.tenants.slots.keys()].map((t) => {
      const { colour, mark } = state.tenants.of(t);
      return item(`background:${colour}`, `${mark} ${t}`);
    });
    return [...named, item(`background:${OTHERS}`, "· other tenants"), free];
  }
  if (state.by === "type") {
    const types = [...state.types].map(([type, colour]) => el("li", { "data-gpu-type": type },
      el("span", { class: "swatch", style: `background:${colour}`, "aria-hidden": "true" }), type));
    const letters = Object.entries(STATE_LETTER).map(([cell, letter]) =>
      `${letter} ${STATE_TEXT[/** @type {keyof typeof STATE_TEXT} */ (cell)]}`);
    return [...types, el("li", {}, `A GPU's letter keeps its state (${letters.join(", ")}); ` +
      "a node's heading names its type.")];
  }
  if (state.by === "job") {
    return [item(`background:${OTHERS}`, "another tenant's job"), free,
      el("li", {}, "Each job's GPUs share one of seven hues (hues repeat across jobs); a GPU's label names its job.")];
  }
  const swatches = Object.entries(STATE_TEXT).map(([cell, text]) => item("", text, `swatch gpu ${cell}`));
  const frames = Object.entries(NODE_STATE_TEXT).filter(([s]) => s !== "ready").map(([s, text]) =>
    item("", `node ${text}`, `swatch frame ${s}`));
  return [...swatches, item("", "bar: GPU utilisation (empty 0%, full 100%)", "swatch util-sample"), ...frames,
    el("li", {}, "Heat map: ", el("span", { class: "scale", style: `background:${viridisGradient()}`, "aria-hidden": "true" }),
      " utilisation 0% → 100%"),
    item(`background:${UNKNOWN}`, "in use, utilisation not known")];
}

function showLegend() {
  const text = `${state.by}|${[...state.tenants.slots.keys()].join(",")}|${[...state.types.keys()].join(",")}`;
  if (text === state.legendText) return;
  state.legendText = text;
  byId("legend").replaceChildren(...legendItems());
  byId("legend").setAttribute("aria-label", `Legend: GPUs coloured by ${COLOUR_BY[state.by]}`);
}

/** @param {ClusterNode[]} nodes */
function showGlance(nodes) {
  const summary = summarise(nodes);
  state.tenants.assign(summary.tenants.flatMap((t) => (t.tenant === null ? [] : [t.tenant])));
  const text = JSON.stringify(summary);
  if (text === state.glanceText) return;
  state.glanceText = text;
  replaceKeepingFocus(byId("glance"), summaryTables(summary, state.tenants));
}

/** The page's controls: search, colouring (by tenant and job for admins only) and
 * opening every rack. @returns {HTMLElement} */
function controls() {
  const input = /** @type {HTMLInputElement} */ (el("input", { type: "search", id: "cluster-search",
    placeholder: "node, job or tenant", autocomplete: "off", spellcheck: "false", "aria-describedby": "search-count" }));
  // Keystrokes between two frames search once: the list and the heat map follow the
  // last of them, on the next frame.
  let frame = 0;
  const follow = () => {
    window.cancelAnimationFrame(frame);
    frame = 0;
    showMatches();
    drawHeat();
  };
  input.addEventListener("input", () => {
    state.query = input.value;
    if (!frame) frame = window.requestAnimationFrame(follow);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      if (frame) follow();
      if (state.matches.length) reveal(state.matches[0].node.name);
    } else if (event.key === "Escape") {
      input.value = state.query = "";
      follow();
    }
  });
  const parts = [el("label", { for: "cluster-search" }, "Search nodes, jobs or tenants"), input];
  const admin = session.me?.role === "admin";
  const choices = Object.entries(COLOUR_BY).filter(([by]) => admin || FOR_EVERYONE.includes(/** @type {ColourBy} */ (by)));
  const select = /** @type {HTMLSelectElement} */ (el("select", { id: "colour-by" },
    ...choices.map(([value, text]) => el("option", { value }, text))));
  select.addEventListener("change", () => {
    state.by = /** @type {ColourBy} */ (select.value);
    paint();
  });
  parts.push(el("label", { for: "colour-by" }, "Colour GPUs by"), select);
  const all = (/** @type {boolean} */ open) => () => state.racks?.setOpen(open);
  const openAll = el("button", { type: "button" }, "Expand all racks");
  const closeAll = el("button", { type: "button" }, "Collapse all racks");
  openAll.addEventListener("click", all(true));
  closeAll.addEventListener("click", all(false));
  parts.push(openAll, closeAll);
  return el("div", { class: "cluster-controls" }, ...parts);
}

/** Redraw what the colouring touches: the legend, the heat map and the open racks. */
function paint() {
  showLegend();
  drawHeat();
  state.racks?.update(state.nodes, { by: state.by, tenants: state.tenants, types: state.types });
}

/** @param {Event} event */
function onRacks(event) {
  const target = event.target instanceof Element ? event.target.closest("button.gpu, button.node-name") : null;
  if (!(target instanceof HTMLElement)) return;
  if (target.classList.contains("node-name")) {
    if (event.type === "click") showTopology(target.dataset.node ?? "");
    return;
  }
  const cell = state.racks?.cells.get(target.dataset.key ?? "");
  if (cell) showGpu(cell.node, state.racks?.latest.get(cell.node)?.gpu_type ?? "", cell.shares, cell.label);
}

/** @param {Event} event */
function onReveal(event) {
  const target = event.target instanceof Element ? event.target.closest("[data-reveal]") : null;
  if (target instanceof HTMLElement) reveal(target.dataset.reveal ?? "");
}

/** @type {Page} */
export const clusterPage = {
  mount(view) {
    state.resize?.disconnect();
    Object.assign(state, { racks: null, heat: null, nodeTypes: new Map(), nodes: [], by: "util",
      tenants: new TenantColours(), types: new Map(), query: "", matches: [], loadsText: "", glanceText: "", legendText: "",
      resultsText: "", found: null, resize: null, heatWidth: 0 });
    const racks = el("div", { class: "racks", id: "racks" });
    for (const kind of ["mouseover", "focusin", "click"]) racks.addEventListener(kind, onRacks);
    const glance = el("div", { class: "glance", id: "glance" });
    const results = el("ul", { class: "search-results", id: "search-results", "aria-label": "Search results" });
    glance.addEventListener("click", onReveal);
    results.addEventListener("click", onReveal);
    const figure = el("figure", { class: "heatmap" });
    state.resize = new ResizeObserver(() => {
      // Off the page (another page's view replaced it) it has no width to follow.
      if (figure.isConnected && state.racks && figure.clientWidth !== state.heatWidth) {
        layoutHeat();
        drawHeat();
      }
    });
    state.resize.observe(figure);
    const canvas = /** @type {HTMLCanvasElement} */ (el("canvas", { id: "heatmap", tabindex: "0", role: "application",
      "aria-roledescription": "heat map", "aria-describedby": "heatmap-help",
      "aria-label": "Every GPU, a line per rack: arrow keys move between GPUs, Enter opens the node in its rack" }));
    figure.append(canvas, el("figcaption", { id: "heatmap-help", class: "muted" },
      "Heat map: every GPU, a line per rack (R0, R1, …), a node's GPUs in a block. Point at or move to a GPU " +
      "(arrow keys) to see it; click or Enter opens its node below."));
    state.heat = new HeatMap(canvas, {
      describe: (i, g) => {
        const node = state.nodes[i];
        const gpu = node?.gpu_list?.[g];
        if (node) showGpu(node.name, node.gpu_type, gpu?.shares ?? [], gpuLabel(node.name, g, gpu?.shares ?? [], gpu?.util ?? null));
      },
      open: (i) => {
        if (state.nodes[i]) reveal(state.nodes[i].name);
      },
    });
    view.append(
      el("h2", {}, "Cluster"),
      el("dl", { class: "summary", id: "summary", "aria-label": "Cluster summary" },
        ...SUMMARY.map((k) => el("div", {}, el("dt", {}, k), el("dd", {})))),
      el("p", { class: "muted" }, "Fragmented GPUs: free GPUs on nodes where no waiting job's request fits. " +
        "Select a node's name to see its GPU links."),
      el("section", { "aria-labelledby": "glance-title" }, el("h3", { id: "glance-title" }, "GPUs at a glance"), glance),
      controls(),
      el("p", { id: "search-count", role: "status", class: "muted" }),
      results,
      el("ul", { class: "legend", id: "legend", "aria-label": "Legend" }),
      figure,
      el("div", { class: "detail", id: "gpu-detail", "aria-live": "polite" },
        "Hover over or select a GPU to see its job."),
      racks,
      el("section", { class: "topology-box", id: "topology", tabindex: "-1", "aria-labelledby": "topology-title",
        hidden: "" }),
      el("section", { "aria-labelledby": "links-title" }, el("h3", { id: "links-title" }, "Link loads"),
        el("div", { id: "link-loads" })),
    );
    showLegend();
  },
  async refresh() {
    // The first poll asks for the topology at once; a later node list, after /nodes.
    /** @type {[Cluster, {data: ClusterNode[]}, Topology|null]} */
    const [cluster, nodes, early] = await Promise.all([api("/cluster"), api("/nodes"),
      state.racks === null ? api("/cluster/topology") : Promise.resolve(null)]);
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
    showGlance(nodes.data);
    if (state.racks === null || state.racks.key !== Racks.keyOf(nodes.data)) {
      /** @type {Topology} */
      const topology = early ?? await api("/cluster/topology");
      state.nodeTypes = new Map(topology.node_types.flatMap((t) => t.nodes.map((n) => [n, t])));
      const gpus = nodes.data.reduce((n, node) => n + node.gpus, 0);
      state.racks = new Racks(nodes.data, gpus <= OPEN_UP_TO_GPUS);
      state.types = typeColours(nodes.data.map((n) => n.gpu_type));
      byId("racks").replaceChildren(...state.racks.sections);
      layoutHeat();
    }
    // The heat map and the search index read the nodes in rack order, as laid out.
    const byName = new Map(nodes.data.map((n) => [n.name, n]));
    state.nodes = state.racks.order.map((n) => byName.get(n.name) ?? n);
    if (state.query.trim()) showMatches();
    paint();
    const loads = JSON.stringify(cluster.link_loads ?? null);
    if (loads !== state.loadsText) {
      state.loadsText = loads;
      byId("link-loads").replaceChildren(...linkLoadView(cluster.link_loads ?? null));
    }
  },
};
