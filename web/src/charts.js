// @ts-check
/**
 * Comparison line charts drawn by uPlot (the vendored global, api/static/vendor/uplot),
 * one line per run: used by replays.js to put policies side by side. Colours are the
 * Okabe-Ito palette, and each line also has its own dash pattern, so that colour is
 * never the only cue; uPlot's legend names every line.
 */
import { el } from "./common.js";

/** @type {any} */
const uPlot = /** @type {any} */ (window).uPlot;

// Okabe & Ito (2008), "Color Universal Design": distinguishable with any colour vision.
export const PALETTE = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442"];
// Tick spacings for an axis in seconds: whole minutes, hours, days, weeks.
const SECONDS_TICKS = [1, 5, 10, 30, 60, 300, 600, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800,
  604800, 2592000];
const DASHES = [[], [8, 4], [2, 3], [10, 3, 2, 3], [4, 4], [1, 5], [12, 6], [6, 2, 2, 2]];

/**
 * @typedef {{label: string, x: number[], y: number[]}} Line
 * @typedef {{title: string, x: string, y: string, lines: Line[], stepped?: boolean,
 *   xSeconds?: boolean, xFormat?: (v: number) => string, yFormat?: (v: number) => string}} ChartSpec
 */

/**
 * A figure holding one uPlot chart of `spec.lines` on a shared x axis (uPlot.join
 * merges the lines' x values; a line is drawn across the others' points).
 * @param {ChartSpec} spec @returns {{figure: HTMLElement, plot: any}}
 */
export function comparisonChart(spec) {
  const points = spec.lines.reduce((n, line) => n + line.x.length, 0);
  const figure = el("figure", { class: "chart", role: "img",
    "aria-label": `${spec.title}: ${spec.y} by ${spec.x} for ${spec.lines.map((l) => l.label).join(", ")}; ${points} points` },
  el("h3", {}, spec.title));
  const data = spec.lines.length
    ? uPlot.join(spec.lines.map((line) => [line.x, line.y]))
    : [[]];
  const path = spec.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined;
  const series = [
    { label: spec.x, value: (/** @type {any} */ _u, /** @type {number|null} */ v) => v === null ? "—" : (spec.xFormat ?? String)(v) },
    ...spec.lines.map((line, i) => ({
      label: line.label, stroke: PALETTE[i % PALETTE.length], dash: DASHES[i % DASHES.length],
      width: 2, spanGaps: true, paths: path,
      value: (/** @type {any} */ _u, /** @type {number|null} */ v) => v === null ? "—" : (spec.yFormat ?? String)(v),
    })),
  ];
  const axis = (/** @type {string} */ label, /** @type {((v: number) => string)|undefined} */ format,
    /** @type {number[]|undefined} */ incrs) => ({
    label, incrs, values: format ? (/** @type {any} */ _u, /** @type {number[]} */ ticks) => ticks.map(format) : undefined,
  });
  const plot = new uPlot({
    width: 560, height: 260, scales: { x: { time: false } }, series,
    axes: [axis(spec.x, spec.xFormat, spec.xSeconds ? SECONDS_TICKS : undefined), axis(spec.y, spec.yFormat, undefined)],
  }, data, figure);
  return { figure, plot };
}
