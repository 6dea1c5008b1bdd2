// @ts-check
/**
 * The Quotas page (#/quotas), registered by dashboard.js: the quota tree (issue 18) as
 * GET /api/v1/quotas reports it: each quota's GPUs against its guarantee and limit (a
 * bar: its own part solid, the borrowed part hatched, the guarantee and limit as
 * marks), borrowed GPUs, waiting jobs by the reason that holds them, reclaims, mean
 * JCT, and Jain's index of the leaves' shares; a chart of each leaf's GPUs over time
 * against its guarantee (GET /quotas/series, drawn with the vendored uPlot); and for
 * admins the editor of quota_editor.js. Numbers only: no job is named here.
 * Keyed by quota name, as the Queue page is by job: a row is built once, a poll
 * rewrites only the cells whose text changed and reorders rows only when the tree did.
 */
import { PALETTE } from "./charts.js";
import { api, byId, duration, el, fixed, report, session } from "./common.js";
import { quotaEditor } from "./quota_editor.js";

/**
 * @typedef {number|Record<string, number>|null} Quota
 * @typedef {{name: string, parent: string|null, guarantee: Quota, limit: Quota, weight: number,
 *   tenants: string[], leaf: boolean, guarantee_gpus: number, allocated_gpus: number,
 *   borrowed_gpus: number, share_of_guarantee: number|null, pending_jobs: number,
 *   pending_by_reason: Record<string, number>, finished_jobs: number, avg_jct_s: number|null,
 *   reclaims: number, phase: string, message: string|null}} QuotaState
 * @typedef {{data: QuotaState[], count: number, fairness_jain: number|null}} QuotaStates
 * @typedef {{name: string, leaf: boolean, guarantee_gpus: number, limit_gpus: number|null,
 *   gpus: number[]}} SeriesRow
 * @typedef {{t_s: number[], bin_s: number, now_s: number, data: SeriesRow[]}} QuotaSeries
 * @typedef {{row: HTMLElement, cells: Record<string, HTMLElement>, bar: Bar}} RowView
 * @typedef {{box: HTMLElement, own: HTMLElement, borrowed: HTMLElement, guarantee: HTMLElement,
 *   limit: HTMLElement}} Bar
 */

const COLUMNS = ["Quota", "Guarantee", "Limit", "Weight", "GPUs against guarantee and limit", "Held",
  "Borrowed", "Waiting, by reason", "Reclaims", "Mean JCT", "State"];
const NUMERIC = ["Guarantee", "Limit", "Weight", "Held", "Borrowed", "Reclaims", "Mean JCT"];
const SERIES_EVERY_MS = 5000; // the chart's bins are wider than a poll: refetch less often
const SERIES_POINTS = 120;
/** @type {Record<string, number>} */
const WINDOWS = { "10 minutes": 600, "1 hour": 3600, "6 hours": 21600, "1 day": 86400 };

/** @type {any} */
const uPlot = /** @type {any} */ (window).uPlot;

/** A quota's GPUs, every model together (null: none).
 * @param {Quota} quota @returns {number|null} */
export function quotaGpus(quota) {
  if (quota === null || quota === undefined) return null;
  return typeof quota === "number" ? quota : Object.values(quota).reduce((a, b) => a + b, 0);
}

/** @param {Quota} quota @returns {string} */
function quotaText(quota) {
  if (quota === null || quota === undefined) return "—";
  if (typeof quota === "number") return String(quota);
  return Object.entries(quota).map(([model, n]) => `${model} ${n}`).join(", ");
}

/** @param {Record<string, number>} reasons @returns {string} */
function reasonsText(reasons) {
  const parts = Object.entries(reasons).map(([code, n]) => `${code} ${n}`);
  return parts.length ? parts.join(", ") : "—";
}

/** @param {HTMLElement} node @param {string} text */
function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

/** @param {HTMLElement} node @param {string} name @param {string} value */
function setStyle(node, name, value) {
  if (node.style.getPropertyValue(name) !== value) node.style.setProperty(name, value);
}

/** Each quota's depth in the tree (0 for a root), for the name's indent.
 * @param {QuotaState[]} quotas @returns {Map<string, number>} */
function depths(quotas) {
  const parent = new Map(quotas.map((q) => [q.name, q.parent]));
  const out = new Map();
  for (const q of quotas) {
    let d = 0;
    for (let up = q.parent; up && d < quotas.length; up = parent.get(up) ?? null) d += 1;
    out.set(q.name, d);
  }
  return out;
}

/** The quotas depth first, each parent before its children, siblings by name.
 * @param {QuotaState[]} quotas @returns {QuotaState[]} */
function treeOrder(quotas) {
  const names = new Set(quotas.map((q) => q.name));
  /** @type {Map<string|null, QuotaState[]>} */
  const children = new Map();
  for (const q of quotas) {
    const up = q.parent && names.has(q.parent) ? q.parent : null;
    children.set(up, [...(children.get(up) ?? []), q]);
  }
  /** @type {QuotaState[]} */
  const out = [];
  const visit = (/** @type {string|null} */ name) => {
    for (const q of (children.get(name) ?? []).sort((a, b) => a.name.localeCompare(b.name))) {
      out.push(q);
      visit(q.name);
    }
  };
  visit(null);
  return out;
}

/** @param {QuotaState} q @returns {RowView} */
function rowView(q) {
  const bar = {
    box: el("div", { class: "quota-bar", role: "img" }),
    own: el("span", { class: "own" }), borrowed: el("span", { class: "borrowed" }),
    guarantee: el("span", { class: "mark guarantee" }), limit: el("span", { class: "mark limit" }),
  };
  bar.box.append(bar.own, bar.borrowed, bar.guarantee, bar.limit);
  /** @type {Record<string, HTMLElement>} */
  const cells = {};
  for (const name of COLUMNS) {
    cells[name] = name === "Quota" ? el("th", { scope: "row" })
      : el("td", { class: NUMERIC.includes(name) ? "num" : "" });
  }
  cells["GPUs against guarantee and limit"].append(bar.box);
  const row = el("tr", { "data-quota": q.name }, ...COLUMNS.map((c) => cells[c]));
  return { row, cells, bar };
}

/** @param {Bar} bar @param {QuotaState} q @param {number} scale */
function drawBar(bar, q, scale) {
  const limit = quotaGpus(q.limit);
  const own = Math.min(q.allocated_gpus, q.guarantee_gpus);
  const pct = (/** @type {number} */ v) => `${(100 * v / scale).toFixed(2)}%`;
  setStyle(bar.own, "width", pct(own));
  setStyle(bar.borrowed, "left", pct(own));
  setStyle(bar.borrowed, "width", pct(Math.max(0, q.allocated_gpus - own)));
  setStyle(bar.guarantee, "left", pct(q.guarantee_gpus));
  bar.limit.hidden = limit === null;
  if (limit !== null) setStyle(bar.limit, "left", pct(limit));
  const label = `${q.name}: ${q.allocated_gpus} GPUs held, guarantee ${q.guarantee_gpus}` +
    (limit === null ? ", no limit" : `, limit ${limit}`) +
    (q.borrowed_gpus ? `, ${q.borrowed_gpus} borrowed` : "");
  if (bar.box.getAttribute("aria-label") !== label) bar.box.setAttribute("aria-label", label);
}

/** @returns {import("./common.js").Page} */
export function quotasPage() {
  /** @type {Map<string, RowView>} */
  let rows = new Map();
  /** @type {QuotaState[]} */
  let states = [];
  let seriesAt = 0;
  let drawnKey = "";
  /** @type {any} */
  let plot = null;
  const editor = quotaEditor(() => states, async () => { seriesAt = 0; await refresh(); });

  /** @param {HTMLElement} view */
  function mount(view) {
    rows = new Map();
    seriesAt = 0;
    drawnKey = "";
    plot = null;
    const admin = session.me?.role === "admin";
    const windowChoice = el("select", { id: "quotas-window" },
      ...Object.entries(WINDOWS).map(([label, s]) => el("option", { value: String(s), ...(s === 3600 ? { selected: "" } : {}) }, label)));
    windowChoice.addEventListener("change", () => { seriesAt = 0; void refresh().catch(report); });
    const headings = [...COLUMNS, ...(admin ? [""] : [])];
    view.append(
      el("h2", {}, "Quotas"),
      el("p", { id: "quotas-fairness", class: "muted" }),
      el("table", { "aria-describedby": "quotas-caption" },
        el("caption", { id: "quotas-caption", class: "muted" },
          "Each quota's GPUs (an inner quota's: its subtree's). In the bar, the solid part is within the " +
          "guarantee, the hatched part borrowed; the tall mark is the guarantee, the dashed mark the limit."),
        el("thead", {}, el("tr", {}, ...headings.map((h) =>
          el("th", { scope: "col", class: NUMERIC.includes(h) ? "num" : "" }, h)))),
        el("tbody", { id: "quotas-rows" })),
      el("section", { "aria-labelledby": "quotas-chart-title" },
        el("h3", { id: "quotas-chart-title" }, "GPUs held over time"),
        el("label", { for: "quotas-window" }, "Window "), windowChoice,
        el("div", { id: "quotas-chart", class: "charts" })),
    );
    if (admin) view.append(editor.form());
  }

  async function refresh() {
    /** @type {QuotaStates} */
    const got = await api("/quotas");
    states = got.data;
    const fairness = got.fairness_jain === null ? "no leaf has both a guarantee and demand"
      : fixed(got.fairness_jain, 3);
    setText(byId("quotas-fairness"), `${got.count} quotas. Jain's index of the leaves' GPUs over their ` +
      `guarantees (leaves with running or waiting jobs; 1 is perfectly fair): ${fairness}.`);
    drawRows(got.data);
    editor.refreshParents();
    if (Date.now() - seriesAt >= SERIES_EVERY_MS) {
      seriesAt = Date.now();
      await drawSeries();
    }
  }

  /** @param {QuotaState[]} quotas */
  function drawRows(quotas) {
    const admin = session.me?.role === "admin";
    const depth = depths(quotas);
    const scale = Math.max(1, ...quotas.map((q) =>
      Math.max(q.guarantee_gpus, q.allocated_gpus, quotaGpus(q.limit) ?? 0)));
    /** @type {Map<string, RowView>} */
    const next = new Map();
    for (const q of treeOrder(quotas)) {
      let view = rows.get(q.name);
      if (!view) {
        view = rowView(q);
        if (admin) {
          const edit = el("button", { type: "button", class: "link", "data-key": `edit-${q.name}`,
            "aria-label": `Edit quota ${q.name}` }, "Edit");
          edit.addEventListener("click", () => editor.load(q.name));
          view.row.append(el("td", {}, edit));
        }
      }
      next.set(q.name, view);
      const c = view.cells;
      setText(c.Quota, `${"\u2003".repeat(depth.get(q.name) ?? 0)}${q.name}${q.leaf ? "" : " (inner)"}`);
      setText(c.Guarantee, quotaText(q.guarantee ?? q.guarantee_gpus));
      setText(c.Limit, quotaText(q.limit));
      setText(c.Weight, String(q.weight));
      setText(c.Held, String(q.allocated_gpus));
      setText(c.Borrowed, String(q.borrowed_gpus));
      setText(c["Waiting, by reason"], reasonsText(q.pending_by_reason));
      setText(c.Reclaims, String(q.reclaims));
      setText(c["Mean JCT"], duration(q.avg_jct_s));
      setText(c.State, q.message ? `${q.phase}: ${q.message}` : q.phase);
      drawBar(view.bar, q, scale);
    }
    const body = byId("quotas-rows");
    const order = [...next.values()].map((v) => v.row);
    const same = order.length === body.children.length && order.every((row, i) => body.children[i] === row);
    if (!same) body.replaceChildren(...order);
    rows = next;
  }

  async function drawSeries() {
    const windowS = /** @type {HTMLSelectElement} */ (byId("quotas-window")).value;
    /** @type {QuotaSeries} */
    const got = await api(`/quotas/series?window_s=${windowS}&points=${SERIES_POINTS}`);
    const box = byId("quotas-chart");
    const leaves = got.data.filter((r) => r.leaf);
    if (!leaves.length) { box.replaceChildren(el("p", { class: "muted" }, "No quotas.")); plot = null; drawnKey = ""; return; }
    const x = got.t_s.map((t) => t - got.now_s);
    const data = [x, ...leaves.flatMap((r) => [r.gpus, x.map(() => r.guarantee_gpus)])];
    const key = leaves.map((r) => `${r.name}:${r.guarantee_gpus}`).join(",") + `@${windowS}`;
    if (plot && key === drawnKey) { plot.setData(data); return; }
    plot?.destroy();
    drawnKey = key;
    const ago = (/** @type {number} */ v) => v >= 0 ? "now" : `-${duration(-v)}`;
    const series = [{ label: "time", value: (/** @type {any} */ _u, /** @type {number|null} */ v) => v === null ? "—" : ago(v) }];
    leaves.forEach((r, i) => {
      const stroke = PALETTE[i % PALETTE.length];
      series.push(/** @type {any} */ ({ label: `${r.name} GPUs`, stroke, width: 2 }),
        /** @type {any} */ ({ label: `${r.name} guarantee`, stroke, width: 1, dash: [6, 4] }));
    });
    const figure = el("figure", { class: "chart", role: "img", "aria-label": `GPUs held by ${leaves.map((r) =>
      r.name).join(", ")} over the last ${duration(Number(windowS))}, each against its guarantee (dashed)` });
    box.replaceChildren(figure);
    plot = new uPlot({
      width: 720, height: 280, series, scales: { x: { time: false } },
      axes: [{ label: "time ago (scheduler's clock)", values: (/** @type {any} */ _u, /** @type {number[]} */ t) => t.map(ago) },
        { label: "GPUs" }],
    }, data, figure);
  }

  return { mount, refresh };
}
