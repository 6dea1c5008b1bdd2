// @ts-check
/**
 * The Cluster page's heat map, imported by cluster.js: every GPU of the cluster as a
 * cell on one canvas (a line per rack, wrapped when a rack is wider than the page; a
 * node's GPUs in a block of two rows), so that 10,000 GPUs fit on a screen where
 * buttons would not. The page says what colour each cell takes (utilisation, tenant or
 * job) and what a cell is; the map draws them, outlines the nodes a search matched,
 * and answers the pointer and the keyboard: the arrow keys move a cursor over the
 * GPUs (left and right within and across nodes, up and down across lines), Home and
 * End go to the first and last node, and Enter or a click opens the node in its rack.
 */

/**
 * @typedef {{name: string, rack: number, gpus: number}} HeatNode
 * @typedef {{describe: (node: number, gpu: number) => void, open: (node: number) => void}} HeatHooks
 * @typedef {{x: number, y: number, line: number}} Place
 */

const GUTTER = 40; // px for the rack labels at the left
const GAP = 3; // px between nodes and between lines
const MIN_CELL = 4, MAX_CELL = 16; // px: below 4 a cell cannot be pointed at; above 16 it wastes the screen
// px the map aims to fit in (about a screen's height): cells shrink towards MIN_CELL,
// and a node's GPUs go in one row rather than two when that keeps them larger, so that
// a cluster stays at a glance; at 1,000 nodes in 63 racks, 8 px cells in ~880 px where
// 16 px cells in two rows took ~2,200.
const HEIGHT_BUDGET = 900;
const SLOT = "#dddddd"; // a node's block behind its cells: the seams between them

export class HeatMap {
  /** @param {HTMLCanvasElement} canvas @param {HeatHooks} hooks */
  constructor(canvas, hooks) {
    this.canvas = canvas;
    this.hooks = hooks;
    /** @type {HeatNode[]} */
    this.nodes = [];
    /** @type {Place[]} */
    this.places = [];
    /** @type {{y: number, label: string}[]} */
    this.labels = [];
    /** @type {number[][]} the node indices on each line */
    this.lines = [];
    this.cell = MIN_CELL;
    this.cols = 1;
    this.rows = 1;
    this.cursor = { node: 0, gpu: 0 };
    this.focused = false;
    /** @type {(node: number, gpu: number) => string} */
    this.fill = () => "#ffffff";
    /** @type {Set<number>|null} */
    this.marked = null;
    canvas.addEventListener("mousemove", (e) => {
      const hit = this.hit(e);
      if (hit) hooks.describe(hit.node, hit.gpu);
    });
    canvas.addEventListener("click", (e) => {
      const hit = this.hit(e);
      if (!hit) return;
      this.cursor = hit;
      hooks.open(hit.node);
    });
    canvas.addEventListener("keydown", (e) => this.key(e));
    canvas.addEventListener("focus", () => {
      this.focused = true;
      this.redraw();
      if (this.nodes.length) hooks.describe(this.cursor.node, this.cursor.gpu);
    });
    canvas.addEventListener("blur", () => {
      this.focused = false;
      this.redraw();
    });
  }

  /** Place `nodes` (in rack order) across `width` CSS pixels.
   * @param {HeatNode[]} nodes @param {number} width */
  layout(nodes, width) {
    this.nodes = nodes;
    const most = Math.max(1, ...nodes.map((n) => n.gpus));
    /** @type {Map<number, number>} */
    const perRack = new Map();
    for (const n of nodes) perRack.set(n.rack, (perRack.get(n.rack) ?? 0) + 1);
    const widest = Math.max(1, ...perRack.values());
    const room = Math.max(1, width - GUTTER);
    /** @param {number} rows @returns {number} the cell size a node in `rows` rows allows */
    const size = (rows) => {
      const byWidth = Math.floor((room - widest * GAP) / (widest * Math.ceil(most / rows)));
      const byHeight = Math.floor((HEIGHT_BUDGET / Math.max(1, perRack.size) - 2 * GAP) / rows);
      return Math.max(MIN_CELL, Math.min(MAX_CELL, byWidth, byHeight));
    };
    this.rows = most >= 4 && size(2) >= size(1) ? 2 : 1;
    this.cols = Math.ceil(most / this.rows);
    this.cell = size(this.rows);
    const step = this.cols * this.cell + GAP;
    const perLine = Math.max(1, Math.floor(room / step));
    const height = this.rows * this.cell + GAP;
    this.places = [];
    this.labels = [];
    this.lines = [];
    let y = 0, column = 0, rack = NaN;
    nodes.forEach((node, i) => {
      if (node.rack !== rack || column === perLine) {
        if (this.lines.length) y += height + (node.rack !== rack ? GAP : 0);
        if (node.rack !== rack) this.labels.push({ y, label: `R${node.rack}` });
        this.lines.push([]);
        rack = node.rack;
        column = 0;
      }
      this.places.push({ x: GUTTER + column * step, y, line: this.lines.length - 1 });
      this.lines[this.lines.length - 1].push(i);
      column += 1;
    });
    const cssHeight = nodes.length ? y + height : 0;
    const ratio = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(width * ratio);
    this.canvas.height = Math.round(cssHeight * ratio);
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${cssHeight}px`;
    this.cursor = { node: Math.min(this.cursor.node, Math.max(0, nodes.length - 1)), gpu: 0 };
  }

  /** Draw every GPU with `fill`'s colour; nodes outside `marked` (when given) faded.
   * @param {(node: number, gpu: number) => string} fill @param {Set<number>|null} marked */
  draw(fill, marked) {
    this.fill = fill;
    this.marked = marked;
    this.redraw();
  }

  redraw() {
    const ctx = this.canvas.getContext("2d");
    if (!ctx) return;
    const ratio = window.devicePixelRatio || 1;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#555555";
    ctx.textBaseline = "top";
    for (const { y, label } of this.labels) ctx.fillText(label, 0, y);
    const s = this.cell;
    const inner = s > 5 ? s - 1 : s; // a pixel's seam between cells when they are large enough
    this.nodes.forEach((node, i) => {
      const { x, y } = this.places[i];
      ctx.globalAlpha = this.marked && !this.marked.has(i) ? 0.2 : 1;
      ctx.fillStyle = SLOT;
      ctx.fillRect(x, y, this.cols * s, Math.ceil(node.gpus / this.cols) * s);
      for (let g = 0; g < node.gpus; g++) {
        ctx.fillStyle = this.fill(i, g);
        ctx.fillRect(x + (g % this.cols) * s, y + Math.floor(g / this.cols) * s, inner, inner);
      }
      ctx.globalAlpha = 1;
      if (this.marked?.has(i)) {
        ctx.strokeStyle = "#1a1a1a";
        ctx.lineWidth = 2;
        ctx.strokeRect(x - 1.5, y - 1.5, this.cols * s + 2, Math.ceil(node.gpus / this.cols) * s + 2);
      }
    });
    if (this.focused && this.nodes.length) {
      const { node, gpu } = this.cursor;
      const { x, y } = this.places[node];
      const cx = x + (gpu % this.cols) * s, cy = y + Math.floor(gpu / this.cols) * s;
      ctx.lineWidth = 2;
      ctx.strokeStyle = "#ffffff";
      ctx.strokeRect(cx - 1, cy - 1, s + 1, s + 1);
      ctx.strokeStyle = "#1a1a1a";
      ctx.strokeRect(cx - 3, cy - 3, s + 5, s + 5);
    }
  }

  /** The GPU under the pointer, if any.
   * @param {MouseEvent} e @returns {{node: number, gpu: number}|null} */
  hit(e) {
    const box = this.canvas.getBoundingClientRect();
    const px = e.clientX - box.left, py = e.clientY - box.top;
    const s = this.cell;
    for (let i = 0; i < this.nodes.length; i++) {
      const { x, y } = this.places[i];
      if (px < x || py < y || px >= x + this.cols * s || py >= y + this.rows * s) continue;
      const gpu = Math.floor((py - y) / s) * this.cols + Math.floor((px - x) / s);
      return gpu < this.nodes[i].gpus ? { node: i, gpu } : null;
    }
    return null;
  }

  /** @param {KeyboardEvent} e */
  key(e) {
    if (!this.nodes.length) return;
    let { node, gpu } = this.cursor;
    const last = this.nodes.length - 1;
    if (e.key === "ArrowRight") {
      if (gpu + 1 < this.nodes[node].gpus) gpu += 1;
      else if (node < last) [node, gpu] = [node + 1, 0];
    } else if (e.key === "ArrowLeft") {
      if (gpu > 0) gpu -= 1;
      else if (node > 0) [node, gpu] = [node - 1, this.nodes[node - 1].gpus - 1];
    } else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      const line = this.places[node].line + (e.key === "ArrowDown" ? 1 : -1);
      if (line < 0 || line >= this.lines.length) return;
      const column = this.lines[this.places[node].line].indexOf(node);
      const members = this.lines[line];
      node = members[Math.min(column, members.length - 1)];
      gpu = Math.min(gpu, this.nodes[node].gpus - 1);
    } else if (e.key === "Home" || e.key === "End") {
      [node, gpu] = [e.key === "Home" ? 0 : last, 0];
    } else if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      this.hooks.open(node);
      return;
    } else {
      return;
    }
    e.preventDefault();
    this.cursor = { node, gpu };
    this.redraw();
    this.hooks.describe(node, gpu);
  }
}
