// @ts-check
/**
 * The Cluster page's colours, imported by cluster.js and racks.js: utilisation on
 * viridis (a sequential scale that reads in every common colour vision and in grey),
 * tenants, jobs and GPU types on the Okabe-Ito palette (colour-blind safe, as
 * dashboard.css), each tenant also numbered and each type named beside its node so
 * that colour is never the only cue.
 */

// Viridis (matplotlib's default map, van der Walt and Smith) at nine even stops.
const VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962",
  "#addc30", "#fde725"];
// Okabe & Ito, "Color Universal Design" (2008), without black: the seven hues a tenant or a
// job may take; an eighth group, grey, holds the tenants past seven and the unnamed.
export const CATEGORICAL = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442"];
export const OTHERS = "#999999";
export const FREE = "#ffffff";
export const UNKNOWN = "#d9d9d9";

/** @param {string} hex @returns {number[]} */
function rgb(hex) {
  return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
}

const VIRIDIS_RGB = VIRIDIS.map(rgb);

/** Utilisation 0..1 on viridis, interpolated between its stops.
 * @param {number} ratio @returns {string} */
export function viridis(ratio) {
  const t = Math.min(1, Math.max(0, ratio)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(t));
  const f = t - i;
  const [a, b] = [VIRIDIS_RGB[i], VIRIDIS_RGB[i + 1]];
  const mix = a.map((v, k) => Math.round(v + (b[k] - v) * f));
  return `rgb(${mix[0]}, ${mix[1]}, ${mix[2]})`;
}

/** The CSS gradient of the utilisation legend. @returns {string} */
export function viridisGradient() {
  return `linear-gradient(to right, ${VIRIDIS.join(", ")})`;
}

/** Text that reads on `hex` (black on the light hues, white on the dark).
 * @param {string} hex @returns {string} */
export function inkOn(hex) {
  const [r, g, b] = rgb(hex);
  return 0.299 * r + 0.587 * g + 0.114 * b > 150 ? "#1a1a1a" : "#ffffff";
}

/**
 * Tenants' colours, kept for the page's life so that a tenant keeps its colour while
 * others come and go: the first seven tenants seen (largest first on the first poll)
 * take the seven hues and the numbers 1-7, later ones share grey.
 */
export class TenantColours {
  constructor() {
    /** @type {Map<string, number>} */
    this.slots = new Map();
  }

  /** Give colours to `tenants` (largest first) that have none yet.
   * @param {string[]} tenants */
  assign(tenants) {
    for (const tenant of tenants) {
      if (!this.slots.has(tenant) && this.slots.size < CATEGORICAL.length) this.slots.set(tenant, this.slots.size);
    }
  }

  /** @param {string|null} tenant @returns {{colour: string, mark: string}} */
  of(tenant) {
    const slot = tenant === null ? undefined : this.slots.get(tenant);
    return slot === undefined ? { colour: OTHERS, mark: "·" } : { colour: CATEGORICAL[slot], mark: String(slot + 1) };
  }
}

/** Each GPU type's hue, the types in name order taking the seven in turn (an eighth
 * type and on share them again: the node's heading names its type).
 * @param {Iterable<string>} types @returns {Map<string, string>} */
export function typeColours(types) {
  return new Map([...new Set(types)].sort().map((t, i) => [t, CATEGORICAL[i % CATEGORICAL.length]]));
}

/** A job's hue: its id hashed onto the seven (neighbouring jobs may share one).
 * @param {string} id @returns {string} */
export function jobColour(id) {
  let h = 0;
  for (let i = 0; i < id.length; i++) h = (h * 31 + id.charCodeAt(i)) >>> 0;
  return CATEGORICAL[h % CATEGORICAL.length];
}

/**
 * @typedef {import("./cluster_summary.js").GpuShare} GpuShare
 * @typedef {"util"|"type"|"tenant"|"job"} ColourBy
 */

/**
 * A GPU's colour under `by`: by GPU type, its type's hue (`typeHue`), free or not; by
 * utilisation, viridis for a GPU in use (grey where not known) and white for a free
 * one; by tenant, its first share's tenant's hue; by job, its first share's job's hue
 * (another tenant's job grey either way).
 * @param {ColourBy} by @param {GpuShare[]} shares @param {number|null} util
 * @param {TenantColours} tenants @param {string} [typeHue] the GPU's type's hue
 * @returns {string}
 */
export function gpuColour(by, shares, util, tenants, typeHue = OTHERS) {
  if (by === "type") return typeHue;
  if (!shares.length) return FREE;
  if (by === "util") return util === null ? UNKNOWN : viridis(util);
  const first = shares[0];
  if (first.job === null) return OTHERS;
  return by === "tenant" ? tenants.of(first.tenant ?? null).colour : jobColour(first.job);
}
