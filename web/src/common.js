// @ts-check
/**
 * What every dashboard page shares: the REST API with the signed-in token, DOM
 * building, durations, messages. Imported by dashboard.js (the shell and the Cluster,
 * Queue and Job pages) and by replays.js, whatif.js and admin.js.
 */

/**
 * @typedef {{id: number, name: string, tenant: string, role: string}} User
 * @typedef {{mount: (view: HTMLElement) => void, refresh: () => Promise<void>}} Page
 * @typedef {{name: string, description: string, active: boolean,
 *   options?: Record<string, unknown>|null}} Policy
 * @typedef {{id: string, name: string, tenant: string, status: string, num_gpus: number,
 *   model: string, priority: number, reason_code: string|null,
 *   reason_message: string|null, progress: number, restarts: number, nodes: string,
 *   gpu_mem_mib: number|null, submit_s: number|null, first_start_s: number|null,
 *   finish_s: number|null}} Job
 */

export const TOKEN_KEY = "gpuflow.token";
// Statuses of a job that waits (api/routes/jobs.py WAITING; the last three cluster mode's).
export const WAITING = ["Queued", "Preempted", "Suspended", "BackOff", "Unschedulable", "Invalid"];
export const FINISHED = ["Succeeded", "Failed", "Cancelled"];

/** The signed-in user, set by dashboard.js on sign-in.
 * @type {{me: User|null}} */
export const session = { me: null };

/** The clock the service's times are on (GET /cluster's `clock`), set by dashboard.js on
 * sign-in and by the Cluster page on each poll: "wall" in cluster mode (Unix seconds),
 * "simulated" in local mode (seconds of the simulated clock).
 * @type {{kind: "wall"|"simulated"}} */
export const clock = { kind: "simulated" };

/** @returns {string} the clock's name, for labels */
export function clockName() {
  return clock.kind === "wall" ? "wall clock" : "simulated clock";
}

/** A policy with its options in effect: "gandiva (quantum_s=30)".
 * @param {string} name @param {Record<string, unknown>|null|undefined} options @returns {string} */
export function policyText(name, options) {
  const set = Object.entries(options ?? {});
  return set.length ? `${name} (${set.map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ")})` : name;
}

/** A time on the service's clock: in cluster mode the local date and time
 * (YYYY-MM-DD HH:MM:SS), in local mode the simulated clock as a duration.
 * @param {number|null|undefined} seconds @returns {string} */
export function instant(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  if (clock.kind === "simulated") return duration(seconds);
  const t = new Date(seconds * 1000);
  const two = (/** @type {number} */ n) => String(n).padStart(2, "0");
  return `${t.getFullYear()}-${two(t.getMonth() + 1)}-${two(t.getDate())} ` +
    `${two(t.getHours())}:${two(t.getMinutes())}:${two(t.getSeconds())}`;
}

export class SignedOut extends Error {}

/** A request the API refused: its status and its body's `detail` (a 422's field errors,
 * each with its `loc`), for a form that marks the field at fault. */
export class ApiError extends Error {
  /** @param {string} message @param {number} status @param {any} detail */
  constructor(message, status, detail) {
    super(message);
    this.status = status;
    this.detail = detail;
  }
}

/** @param {string} id @returns {HTMLElement} */
export function byId(id) {
  const found = document.getElementById(id);
  if (!found) throw new Error(`#${id} missing from the page`);
  return found;
}

/**
 * A DOM element with attributes and children; text always goes in as text, never HTML.
 * @param {string} tag @param {Record<string, string>} [attrs]
 * @param {...(Node|string)} children @returns {HTMLElement}
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  node.append(...children);
  return node;
}

/** A button that runs `action` on click and reports its failure.
 * @param {string} text @param {Record<string, string>} attrs @param {() => Promise<unknown>} action */
export function button(text, attrs, action) {
  const b = /** @type {HTMLButtonElement} */ (el("button", { type: "button", ...attrs }, text));
  b.addEventListener("click", () => void action().catch(report));
  return b;
}

/** A table head row of column headings; `num` marks right-aligned numeric columns.
 * @param {string[]} headings @param {number[]} [numeric] */
export function head(headings, numeric = []) {
  return el("thead", {}, el("tr", {}, ...headings.map((h, i) =>
    el("th", { scope: "col", class: numeric.includes(i) ? "num" : "" }, h))));
}

/** Replace `box`'s children, keeping keyboard focus on the element with the same
 * data-key (tables are rebuilt on every poll).
 * @param {HTMLElement} box @param {Node[]} children */
export function replaceKeepingFocus(box, children) {
  const active = document.activeElement;
  const key = active instanceof HTMLElement && box.contains(active) ? active.dataset.key : undefined;
  box.replaceChildren(...children);
  if (key) /** @type {HTMLElement|null} */ (box.querySelector(`[data-key="${CSS.escape(key)}"]`))?.focus();
}

/** @param {number|null|undefined} seconds @returns {string} */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h ? `${h}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

/** @param {number|null|undefined} value @param {number} [digits] @returns {string} */
export function fixed(value, digits = 2) {
  return value === null || value === undefined || !Number.isFinite(value) ? "—" : value.toFixed(digits);
}

/** @param {number|null|undefined} ratio @returns {string} */
export function percent(ratio) {
  return ratio === null || ratio === undefined ? "—" : `${(ratio * 100).toFixed(1)} %`;
}

// ---- the API and the token -------------------------------------------------------

/** A refused request's detail as text: a string, a 422's field errors, a trace's error.
 * @param {any} body @param {string} fallback @returns {string} */
function detailText(body, fallback) {
  const detail = body?.detail;
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) return detail.map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ");
  if (detail && typeof detail === "object") return String(detail.error || detail.msg || fallback);
  return fallback;
}

/** @param {string} path @param {RequestInit} [init] @returns {Promise<Response>} */
async function request(path, init = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) throw new SignedOut();
  /** @type {Record<string, string>} */
  const headers = { Authorization: `Bearer ${token}`, Accept: "application/json" };
  if (typeof init.body === "string") headers["Content-Type"] = "application/json";
  const res = await fetch(`/api/v1${path}`, { ...init, headers });
  if (res.status === 401) {
    signOut("The server refused that token (401 Unauthorized): check it and paste it again.");
    throw new SignedOut();
  }
  if (!res.ok) {
    const body = await res.json().catch(() => null);
    throw new ApiError(`${init.method || "GET"} ${path}: ${res.status} ${detailText(body, res.statusText)}`,
      res.status, body?.detail);
  }
  return res;
}

/** A JSON request to /api/v1; null for 204 No Content.
 * @param {string} path @param {RequestInit} [init] @returns {Promise<any>} */
export async function api(path, init = {}) {
  const res = await request(path, init);
  return res.status === 204 ? null : res.json();
}

/** @param {string} path @param {string} method @param {unknown} [body] @returns {Promise<any>} */
export function send(path, method, body) {
  return api(path, body === undefined ? { method } : { method, body: JSON.stringify(body) });
}

/** Fetch a file with the token (a link cannot carry it) and save it as `filename`.
 * @param {string} path @param {string} filename */
export async function download(path, filename) {
  const blob = await (await request(path)).blob();
  const url = URL.createObjectURL(blob);
  const link = el("a", { href: url, download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  window.setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** @param {string} [message] */
export function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  session.me = null;
  byId("nav").hidden = true;
  byId("sign-out").hidden = true;
  byId("whoami").textContent = "";
  byId("view").replaceChildren();
  byId("sign-in").hidden = false;
  showError(message || "");
  /** @type {HTMLInputElement} */ (byId("token")).focus();
}

/** @param {string} message */
export function showError(message) {
  const box = byId("error");
  box.textContent = message;
  box.hidden = !message;
}

/** The outcome of an action, for screen readers and sighted users alike (a polite
 * live region of its own: the status line is rewritten on every poll).
 * @param {string} message */
export function announce(message) {
  byId("notice").textContent = message;
}

/** @param {unknown} err */
export function report(err) {
  if (!(err instanceof SignedOut)) showError(err instanceof Error ? err.message : String(err));
}

/** Why a job waits, as its last scheduling round said.
 * @param {Job} job @returns {string} */
export function reasonText(job) {
  if (!job.reason_code) return "not yet considered by a scheduling round";
  return job.reason_message ? `${job.reason_code}: ${job.reason_message}` : job.reason_code;
}
