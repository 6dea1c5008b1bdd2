// @ts-check
/**
 * The admin's quota editor on the Quotas page (quotas.js): create or replace a quota
 * (PUT /api/v1/quotas/{name}) and delete one (DELETE). The API checks every change as
 * the whole tree it makes; a refusal (422) is shown on the field it names, and one
 * naming another quota's field (a parent's guarantee its children now pass) above the
 * form, with that quota named. Quotas are typed as a number of GPUs of any model, or
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
// api/schemas/quotas.py QUOTA_NAME_PATTERN (a DNS label), as an HTML pattern.
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
 * @param {() => QuotaState[]} quotas the page's last reading
 * @param {() => Promise<void>} changed called after a change is saved
 * @returns {Editor}
 */
export function quotaEditor(quotas, changed) {
  function clearErrors() {
    for (const f of FIELDS) {
      input(`quota-${f}`).removeAttribute("aria-invalid");
      const msg = document.getElementById(`quota-${f}-error`);
      if (msg) msg.textContent = "";
    }
    const general = document.getElementById("quota-form-error");
    if (general) { general.textContent = ""; general.hidden = true; }
  }

  /** Show a refusal on the fields it names. @param {unknown} err */
  function showErrors(err) {
    if (!(err instanceof ApiError) || err.status !== 422 || !Array.isArray(err.detail)) throw err;
    /** @type {string[]} */
    const general = [];
    for (const d of err.detail) {
      // ["body", "limit"], ["path", "name"]; another quota's: ["body", "research",
      // "guarantee"] on a change, ["team-a.parent"] on a delete.
      const all = /** @type {unknown[]} */ (d.loc ?? []).map(String);
      const loc = all[0] === "body" || all[0] === "path" ? all.slice(1) : all;
      const field = loc !== all || loc.length === 1 ? FIELDS.find((f) => f === loc[0]) : undefined;
      if (field) {
        input(`quota-${field}`).setAttribute("aria-invalid", "true");
        const box = /** @type {HTMLElement} */ (document.getElementById(`quota-${field}-error`));
        box.textContent = box.textContent ? `${box.textContent}; ${d.msg}` : String(d.msg);
      } else {
        // Another quota's field ("research.guarantee" or ["research", "guarantee"]).
        const [other, ...rest] = loc.join(".").split(".");
        general.push(`quota ${other}${rest.length ? `, ${rest.join(".")}` : ""}: ${d.msg}`);
      }
    }
    const box = /** @type {HTMLElement} */ (document.getElementById("quota-form-error"));
    box.textContent = general.length ? `Refused: ${general.join("; ")}` : "Refused: see the fields marked.";
    box.hidden = false;
    const first = FIELDS.find((f) => input(`quota-${f}`).getAttribute("aria-invalid") === "true");
    if (first) input(`quota-${first}`).focus();
  }

  function body() {
    const value = (/** @type {string} */ f) => input(`quota-${f}`).value.trim();
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
    const name = input("quota-name").value.trim();
    try {
      /** @type {QuotaState} */
      const saved = await send(`/quotas/${encodeURIComponent(name)}`, "PUT", body());
      announce(`Quota ${saved.name} saved: guarantee ${saved.guarantee_gpus} GPUs.`);
    } catch (err) {
      showErrors(err);
      return;
    }
    await changed();
  }

  async function remove() {
    clearErrors();
    const name = input("quota-name").value.trim();
    try {
      await send(`/quotas/${encodeURIComponent(name)}`, "DELETE");
      announce(`Quota ${name} deleted.`);
    } catch (err) {
      showErrors(err);
      return;
    }
    /** @type {HTMLFormElement} */ (document.getElementById("quota-form")).reset();
    await changed();
  }

  function refreshParents() {
    const box = /** @type {HTMLSelectElement|null} */ (document.getElementById("quota-parent"));
    if (!box) return;
    const names = quotas().map((q) => q.name).sort();
    const have = [...box.options].slice(1).map((o) => o.value);
    if (have.join("\n") === names.join("\n")) return;
    const chosen = box.value;
    box.replaceChildren(el("option", { value: "" }, "(none: a root)"), ...names.map((n) => el("option", { value: n }, n)));
    box.value = names.includes(chosen) ? chosen : "";
  }

  /** Fill the form with quota `name`'s spec. @param {string} name */
  function load(name) {
    const q = quotas().find((s) => s.name === name);
    if (!q) return;
    clearErrors();
    refreshParents();
    input("quota-name").value = q.name;
    input("quota-parent").value = q.parent ?? "";
    input("quota-guarantee").value = quotaInput(q.guarantee);
    input("quota-limit").value = quotaInput(q.limit);
    input("quota-weight").value = String(q.weight);
    input("quota-tenants").value = q.tenants.join(", ");
    input("quota-name").focus();
    announce(`Editing quota ${q.name}.`);
  }

  function form() {
    /** @param {string} f @param {HTMLElement} control */
    const field = (f, control) => {
      control.setAttribute("aria-describedby", `quota-${f}-error`);
      return [el("label", { for: `quota-${f}` }, LABELS[f]),
        el("span", { class: "field" }, control, el("span", { id: `quota-${f}-error`, class: "field-error" }))];
    };
    const box = el("form", { id: "quota-form", class: "fields", "aria-labelledby": "quota-form-title", novalidate: "" },
      el("h3", { id: "quota-form-title" }, "Create, change or delete a quota"),
      el("p", { id: "quota-form-error", class: "error", role: "alert", hidden: "" }),
      ...field("name", el("input", { id: "quota-name", required: "", pattern: NAME_PATTERN, spellcheck: "false" })),
      ...field("parent", el("select", { id: "quota-parent" }, el("option", { value: "" }, "(none: a root)"))),
      ...field("guarantee", el("input", { id: "quota-guarantee", spellcheck: "false" })),
      ...field("limit", el("input", { id: "quota-limit", spellcheck: "false" })),
      ...field("weight", el("input", { id: "quota-weight", inputmode: "decimal", value: "1" })),
      ...field("tenants", el("input", { id: "quota-tenants", spellcheck: "false" })),
      el("span", { class: "actions" },
        el("button", { type: "submit" }, "Save quota"), " ",
        el("button", { type: "button", id: "quota-delete", class: "danger" }, "Delete quota")));
    box.addEventListener("submit", (e) => { e.preventDefault(); void save().catch(report); });
    box.querySelector("#quota-delete")?.addEventListener("click", () => void remove().catch(report));
    return box;
  }

  return { form, load, refreshParents };
}
