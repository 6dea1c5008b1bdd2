// @ts-check
/**
 * The Cluster page's summary, imported by cluster.js: GPUs by state, by GPU type and by
 * tenant, and the hottest nodes, counted from one `/nodes` answer (each GPU's shares,
 * with the job's tenant where the caller may see it, and its utilisation), and drawn
 * as four small tables that come first on the page, before any rack.
 */
import { el, head } from "./common.js";
import { TenantColours } from "./palette.js";

/**
 * @typedef {"ready"|"cordoned"|"draining"|"down"} NodeState
 * @typedef {{job: string|null, fraction: number, name?: string|null, tenant?: string|null}} GpuShare
 * @typedef {{index: number, shares: GpuShare[], util: number|null}} Gpu
 * @typedef {{name: string, rack: number, gpu_type: string, gpus: number,
 *   gpus_allocated: number, jobs: string[], state?: NodeState, gpu_list: Gpu[]}} ClusterNode
 * @typedef {"free"|"mine"|"shared"|"other"} GpuState
 * @typedef {{type: string, nodes: number, gpus: number, used: number, util: number|null}} TypeRow
 * @typedef {{tenant: string|null, gpus: number, jobs: number}} TenantRow
 * @typedef {{name: string, rack: number, util: number, gpus: number}} HotNode
 * @typedef {{gpus: number, states: Record<GpuState, number>, fenced: Record<NodeState, number>,
 *   types: TypeRow[], tenants: TenantRow[], hottest: HotNode[]}} Summary
 */

const HOTTEST = 5; // nodes listed; the heat map shows the rest
const TENANT_ROWS = 8; // tenants listed by name; the rest in one row
export const STATE_TEXT = { free: "free", mine: "allocated", shared: "shared", other: "another tenant's job" };

/** A GPU's state from its shares: none free; one whole share the job's (mine when the
 * caller may see the job, other when its id is hidden); several, or a fraction, shared.
 * @param {GpuShare[]} shares @returns {GpuState} */
export function gpuState(shares) {
  if (shares.length > 1 || (shares.length === 1 && shares[0].fraction < 1)) return "shared";
  if (shares.length === 1) return shares[0].job === null ? "other" : "mine";
  return "free";
}

/** @param {number|null} sum @param {number} count @returns {number|null} */
const mean = (sum, count) => (sum === null || count === 0 ? null : sum / count);

/** Count the summary from the nodes. @param {ClusterNode[]} nodes @returns {Summary} */
export function summarise(nodes) {
  /** @type {Record<GpuState, number>} */
  const states = { free: 0, mine: 0, shared: 0, other: 0 };
  /** @type {Record<NodeState, number>} */
  const fenced = { ready: 0, cordoned: 0, draining: 0, down: 0 };
  /** @type {Map<string, TypeRow & {utilSum: number, utilCount: number}>} */
  const types = new Map();
  /** @type {Map<string|null, TenantRow & {ids: Set<string>}>} */
  const tenants = new Map();
  /** @type {HotNode[]} */
  const hot = [];
  let gpus = 0;
  for (const node of nodes) {
    gpus += node.gpus;
    fenced[node.state ?? "ready"] += node.gpus;
    const type = types.get(node.gpu_type) ??
      { type: node.gpu_type, nodes: 0, gpus: 0, used: 0, util: null, utilSum: 0, utilCount: 0 };
    types.set(node.gpu_type, type);
    type.nodes += 1;
    type.gpus += node.gpus;
    type.used += node.gpus_allocated;
    let nodeSum = 0, nodeCount = 0;
    for (let i = 0; i < node.gpus; i++) {
      const gpu = node.gpu_list?.[i];
      const shares = gpu?.shares ?? [];
      states[gpuState(shares)] += 1;
      if (gpu && gpu.util !== null) {
        nodeSum += gpu.util;
        nodeCount += 1;
      }
      for (const share of shares) {
        const key = share.job === null ? null : share.tenant ?? null;
        const row = tenants.get(key) ?? { tenant: key, gpus: 0, jobs: 0, ids: new Set() };
        tenants.set(key, row);
        row.gpus += share.fraction;
        row.ids.add(share.job ?? `hidden:${node.name}/${i}`);
      }
    }
    type.utilSum += nodeSum;
    type.utilCount += nodeCount;
    if (nodeSum > 0) hot.push({ name: node.name, rack: node.rack, util: nodeSum / nodeCount, gpus: node.gpus });
  }
  return {
    gpus, states, fenced,
    types: [...types.values()].sort((a, b) => b.gpus - a.gpus || a.type.localeCompare(b.type))
      .map(({ utilSum, utilCount, ...row }) => ({ ...row, util: mean(utilCount ? utilSum : null, utilCount) })),
    tenants: [...tenants.values()].map(({ ids, ...row }) => ({ ...row, jobs: row.tenant === null ? 0 : ids.size }))
      .sort((a, b) => b.gpus - a.gpus || String(a.tenant).localeCompare(String(b.tenant))),
    hottest: hot.sort((a, b) => b.util - a.util || a.name.localeCompare(b.name)).slice(0, HOTTEST),
  };
}

/** @param {number} n @param {number} total @returns {string} */
function share(n, total) {
  return total ? `${Math.round((100 * n) / total)}%` : "—";
}

/** @param {number|null} util @returns {string} */
function pct(util) {
  return util === null ? "—" : `${Math.round(util * 100)}%`;
}

/** @param {string} caption @param {string[]} headings @param {number[]} numeric @param {Node[]} rows */
function table(caption, headings, numeric, rows) {
  return el("table", { class: "glance-table" }, el("caption", {}, caption), head(headings, numeric), el("tbody", {}, ...rows));
}

/** @param {string[]} cells @param {Node} [first] */
function row(cells, first) {
  return el("tr", {}, first ?? el("th", { scope: "row" }, cells[0]),
    ...cells.slice(1).map((c) => el("td", { class: "num" }, c)));
}

/**
 * The four tables. A tenant's row carries its colour and number from `colours` (the
 * tenant colouring's legend reads the same); hidden tenants are "other tenants".
 * @param {Summary} s @param {TenantColours} colours @returns {HTMLElement[]}
 */
export function summaryTables(s, colours) {
  const byState = table("GPUs by state", ["State", "GPUs", "Share"], [1, 2], [
    ...(/** @type {GpuState[]} */ (["free", "mine", "shared", "other"])).filter((k) => k !== "other" || s.states.other)
      .map((k) => row([STATE_TEXT[k], String(s.states[k]), share(s.states[k], s.gpus)])),
    ...(/** @type {NodeState[]} */ (["cordoned", "draining", "down"])).filter((k) => s.fenced[k])
      .map((k) => row([`on ${k} nodes`, String(s.fenced[k]), share(s.fenced[k], s.gpus)])),
  ]);
  const byType = table("GPUs by type", ["Type", "Nodes", "GPUs", "In use", "Utilisation"], [1, 2, 3, 4],
    s.types.map((t) => row([t.type, String(t.nodes), String(t.gpus), t.used.toFixed(1), pct(t.util)])));
  const named = s.tenants.filter((t) => t.tenant !== null).slice(0, TENANT_ROWS);
  const rest = s.tenants.filter((t) => !named.includes(t));
  const tenantRows = named.map((t) => {
    const { colour, mark } = colours.of(t.tenant);
    const swatch = el("span", { class: "swatch", style: `background:${colour}`, "aria-hidden": "true" });
    return row([String(t.tenant), t.gpus.toFixed(1), String(t.jobs)],
      el("th", { scope: "row" }, swatch, ` ${mark} ${t.tenant}`));
  });
  if (rest.length) {
    const gpus = rest.reduce((sum, t) => sum + t.gpus, 0);
    const jobs = rest.reduce((sum, t) => sum + t.jobs, 0);
    tenantRows.push(row([named.length ? "other tenants" : "other tenants' jobs", gpus.toFixed(1), jobs ? String(jobs) : "—"]));
  }
  const byTenant = table("GPUs by tenant", ["Tenant", "GPUs", "Jobs"], [1, 2],
    tenantRows.length ? tenantRows : [row(["none", "0", "0"])]);
  const hottest = table("Hottest nodes (mean GPU utilisation)", ["Node", "Rack", "Utilisation"], [1, 2],
    s.hottest.map((n) => row([n.name, String(n.rack), pct(n.util)],
      el("th", { scope: "row" }, el("button", { type: "button", class: "link", "data-reveal": n.name }, n.name)))));
  return [byState, byType, byTenant, hottest];
}
