// @ts-check
/**
 * The admin's queue editor on the Quotas page (quotas.js): create or replace a queue
 * (PUT /api/v1/quotas/{name}) and delete one (DELETE). The API checks every change as
 * the whole tree it makes; a refusal (422) is shown on the field it names, and one
 * naming another queue's field (a parent's guarantee its children now pass) above the
 * form, with that queue named. Quotas are typed as a number of GPUs of any model, or
 * per model as "A100=32, H100=16"; anything else goes to the API as typed, which
 * refuses it by field: one set of rules, the server's.
 */
import { announce, ApiError, el, report, send } from "./common.js";

/**
 * @typedef {import("./quotas.js").QuotaState} QuotaState
 * @typedef {{form: () => HTMLElement, load: (name: string) => void, refreshParents: () => void}} Editor
 */

// The API's fields, in the form's order, and how each is labelled.
const FIELDS = /** @type {const} */ (["name", "parent", "guarantee", "limit", "weight", "tenants"]);
/** @type {Record<string, string>} */
const LABELS = {
  name: "Name", parent: "Parent", guarantee: "Guarantee (GPUs, or per model: A100=32, H100=16)",
  limit: "Limit (empty: none)", weight: "Weight", tenants: "Tenants (comma-separated; empty: its name)",
};
// api/schemas/quotas.py QUEUE_NAME_PATTERN (a DNS label), as an HTML pattern.
const NAME_PATTERN = "[a-z0-9]([\\-a-z0-9]*[a-z0-9])?";

/** @param {string} id @returns {HTMLInputElement} */
function input(id) {
  return /** @type {HTMLInputElement} */ (document.getElementById(id));
}

/** A quota as typed: "" -> null, "12" -> 12, "A100=32, H100=16" -> {A100: 32, H100: 16};
 * anything else as typed, for the API to refuse by field.
 * @param {string} text @returns {unknown} */
export function parseQuota(text) {
  const t = text.trim();
  if (!t) return null;
  if (/^\d+$/.test(t)) return Number(t);
  if (!t.includes("=")) return t;
  /** @type {Record<string, unknown>} */
  const out = {};
  for (const part of t.split(",")) {
    const [model, value = ""] = part.split("=").map((s) => s.trim());
    out[model] = /^\d+$/.test(value) ? Number(value) : value;
  }
  return out;
}

/** @param {unknown} quota @returns {string} */
function quotaInput(quota) {
  if (quota === null || quota === undefined) return "";
  if (typeof quota === "object") return Object.entries(quota).map(([m, n]) => `${m}=${n}`).join(", ");
  return String(quota);
}

/**
 * @param {() => QuotaState[]} queues the page's last reading
 * @param {() => Promise<void>} changed called after a change is saved
 * @returns {Editor}
 */
export function quotaEditor(queues, changed) {
  function clearErrors() {
    for (const f of FIELDS) {
      input(`queue-${f}`).removeAttribute("aria-invalid");
      const msg = document.getElementById(`queue-${f}-error`);
      if (msg) msg.textContent = "";
    }
    const general = document.getElementById("queue-form-error");
    if (general) { general.textContent = ""; general.hidden = true; }
  }

  /** Show a refusal on the fields it names. @param {unknown} err */
  function showErrors(err) {
    if (!(err instanceof ApiError) || err.status !== 422 || !Array.isArray(err.detail)) throw err;
    /** @type {string[]} */
    const general = [];
    for (const d of err.detail) {
      // ["body", "limit"], ["path", "name"]; another queue's: ["body", "research",
      // "guarantee"] on a change, ["team-a.parent"] on a delete.
      const all = /** @type {unknown[]} */ (d.loc ?? []).map(String);
      const loc = all[0] === "body" || all[0] === "path" ? all.slice(1) : all;
      const field = loc !== all || loc.length === 1 ? FIELDS.find((f) => f === loc[0]) : undefined;
      if (field) {
        input(`queue-${field}`).setAttribute("aria-invalid", "true");
        const box = /** @type {HTMLElement} */ (document.getElementById(`queue-${field}-error`));
        box.textContent = box.textContent ? `${box.textContent}; ${d.msg}` : String(d.msg);
      } else {
        // Another queue's field ("research.guarantee" or ["research", "guarantee"]).
        const [other, ...rest] = loc.join(".").split(".");
        general.push(`queue ${other}${rest.length ? `, ${rest.join(".")}` : ""}: ${d.msg}`);
      }
    }
    const box = /** @type {HTMLElement} */ (document.getElementById("queue-form-error"));
    box.textContent = general.length ? `Refused: ${general.join("; ")}` : "Refused: see the fields marked.";
    box.hidden = false;
    const first = FIELDS.find((f) => input(`queue-${f}`).getAttribute("aria-invalid") === "true");
    if (first) input(`queue-${first}`).focus();
  }

  function body() {
    const value = (/** @type {string} */ f) => input(`queue-${f}`).value.trim();
    const weight = value("weight");
    return {
      parent: value("parent") || null,
      guarantee: parseQuota(value("guarantee")),
      limit: parseQuota(value("limit")),
      weight: weight === "" ? 1 : /^-?\d+(\.\d+)?$/.test(weight) ? Number(weight) : weight,
      tenants: value("tenants") ? value("tenants").split(",").map((s) => s.trim()).filter(Boolean) : [],
    };
  }

  async function save() {
    clearErrors();
    const name = input("queue-name").value.trim();
    try {
      /** @type {QuotaState} */
      const saved = await send(`/quotas/${encodeURIComponent(name)}`, "PUT", body());
      announce(`Queue ${saved.name} saved: guarantee ${saved.guarantee_gpus} GPUs.`);
    } catch (err) {
      showErrors(err);
      return;
    }
    await changed();
  }

  async function remove() {
    clearErrors();
    const name = input("queue-name").value.trim();
    try {
      await send(`/quotas/${encodeURIComponent(name)}`, "DELETE");
      announce(`Queue ${name} deleted.`);
    } catch (err) {
      showErrors(err);
      return;
    }
    /** @type {HTMLFormElement} */ (document.getElementById("queue-form")).reset();
    await changed();
  }

  function refreshParents() {
    const box = /** @type {HTMLSelectElement|null} */ (document.getElementById("queue-parent"));
    if (!box) return;
    const names = queues().map((q) => q.name).sort();
    const have = [...box.options].slice(1).map((o) => o.value);
    if (have.join("\n") === names.join("\n")) return;
    const chosen = box.value;
    box.replaceChildren(el("option", { value: "" }, "(none: a root)"), ...names.map((n) => el("option", { value: n }, n)));
    box.value = names.includes(chosen) ? chosen : "";
  }

  /** Fill the form with queue `name`'s spec. @param {string} name */
  function load(name) {
    const q = queues().find((s) => s.name === name);
    if (!q) return;
    clearErrors();
    refreshParents();
    input("queue-name").value = q.name;
    input("queue-parent").value = q.parent ?? "";
    input("queue-guarantee").value = quotaInput(q.guarantee);
    input("queue-limit").value = quotaInput(q.limit);
    input("queue-weight").value = String(q.weight);
    input("queue-tenants").value = q.tenants.join(", ");
    input("queue-name").focus();
    announce(`Editing queue ${q.name}.`);
  }

  function form() {
    /** @param {string} f @param {HTMLElement} control */
    const field = (f, control) => {
      control.setAttribute("aria-describedby", `queue-${f}-error`);
      return [el("label", { for: `queue-${f}` }, LABELS[f]),
        el("span", { class: "field" }, control, el("span", { id: `queue-${f}-error`, class: "field-error" }))];
    };
    const box = el("form", { id: "queue-form", class: "fields", "aria-labelledby": "queue-form-title", novalidate: "" },
      el("h3", { id: "queue-form-title" }, "Create, change or delete a queue"),
      el("p", { id: "queue-form-error", class: "error", role: "alert", hidden: "" }),
      ...field("name", el("input", { id: "queue-name", required: "", pattern: NAME_PATTERN, spellcheck: "false" })),
      ...field("parent", el("select", { id: "queue-parent" }, el("option", { value: "" }, "(none: a root)"))),
      ...field("guarantee", el("input", { id: "queue-guarantee", spellcheck: "false" })),
      ...field("limit", el("input", { id: "queue-limit", spellcheck: "false" })),
      ...field("weight", el("input", { id: "queue-weight", inputmode: "decimal", value: "1" })),
      ...field("tenants", el("input", { id: "queue-tenants", spellcheck: "false" })),
      el("span", { class: "actions" },
        el("button", { type: "submit" }, "Save queue"), " ",
        el("button", { type: "button", id: "queue-delete", class: "danger" }, "Delete queue")));
    box.addEventListener("submit", (e) => { e.preventDefault(); void save().catch(report); });
    box.querySelector("#queue-delete")?.addEventListener("click", () => void remove().catch(report));
    return box;
  }

  return { form, load, refreshParents };
}
