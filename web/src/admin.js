// @ts-check
/**
 * The Admin page (#/admin), registered by dashboard.js and linked in the navigation for
 * admins only: switch the policy after a what-if preview, cordon, drain and uncordon
 * nodes, cancel any tenant's jobs, create users and issue and revoke tokens. A
 * non-admin who opens it gets a notice and no controls (the API refuses them with
 * 403 anyway: PUT /policies/active, POST /nodes/{name}/..., GET and POST /users).
 */
import { announce, api, button, byId, el, head, policyText, replaceKeepingFocus, report, send,
  session, WAITING } from "./common.js";
import { whatifTables } from "./whatif.js";

/**
 * @typedef {{name: string, rack: number, gpus: number, gpus_allocated: number, jobs: string[],
 *   other_jobs?: number, state?: string}} AdminNode
 * @typedef {{id: number, name: string, tenant: string, role: string}} UserRow
 * @typedef {{id: number, user_id: number, name: string, created_at: string}} TokenRow
 */

// api/schemas/common.py NAME_PATTERN, as an HTML pattern (whose `v` flag wants "-" escaped).
const NAME_PATTERN = "[A-Za-z0-9][A-Za-z0-9._:\\-]{0,99}";
// Which node actions make sense in which state (the API answers the others too).
const NODE_ACTIONS = /** @type {const} */ (["cordon", "drain", "uncordon"]);
/** @type {Record<string, string[]>} */
const ALLOWED = {
  ready: ["cordon", "drain"], cordoned: ["drain", "uncordon"], draining: ["uncordon"], down: ["cordon", "uncordon"],
};

/** @returns {import("./common.js").Page} */
export function adminPage() {
  let admin = false;
  let previewed = "";

  async function preview() {
    const ask = /** @type {HTMLButtonElement} */ (byId("policy-preview-button"));
    if (ask.disabled) return; // one what-if at a time (the server answers 429 to a second)
    ask.disabled = true;
    try {
      await showPreview();
    } finally {
      ask.disabled = false;
    }
  }

  async function showPreview() {
    const chosen = /** @type {HTMLSelectElement} */ (byId("policy-choice")).value;
    /** @type {{name: string}} */
    const active = await api("/policies/active");
    // Cluster mode's active policy is "unknown" before the operator's first round: the choice alone.
    const known = [.../** @type {HTMLSelectElement} */ (byId("policy-choice")).options].map((o) => o.value);
    const policies = chosen === active.name || !known.includes(active.name) ? [chosen] : [active.name, chosen];
    const result = await send("/whatif", "POST", { policies });
    byId("policy-preview").replaceChildren(...whatifTables(result, "preview"));
    previewed = chosen;
    const apply = /** @type {HTMLButtonElement} */ (byId("policy-switch"));
    apply.disabled = chosen === active.name;
    apply.textContent = `Switch to ${chosen}`;
    announce(`Preview of ${chosen} next to ${active.name} ready.`);
  }

  async function switchPolicy() {
    const chosen = /** @type {HTMLSelectElement} */ (byId("policy-choice")).value;
    if (chosen !== previewed) { announce("Preview the policy first."); return; }
    /** @type {{name: string}} */
    const now = await send("/policies/active", "PUT", { name: chosen });
    byId("policy-active").textContent = now.name;
    /** @type {HTMLButtonElement} */ (byId("policy-switch")).disabled = true;
    announce(`The active policy is now ${now.name}.`);
  }

  /** @param {AdminNode} node @param {string} action */
  async function nodeAction(node, action) {
    /** @type {AdminNode} */
    const after = await send(`/nodes/${encodeURIComponent(node.name)}/${action}`, "POST");
    announce(`Node ${after.name} is now ${after.state ?? action}.`);
    await refresh();
  }

  /** @param {{id: string, name: string}} job */
  async function cancel(job) {
    const after = await send(`/jobs/${job.id}/cancel`, "POST");
    announce(`Job ${after.name} is now ${after.status}.`);
    await refresh();
  }

  async function loadUsers() {
    /** @type {[{data: UserRow[]}, {data: TokenRow[]}]} */
    const [users, tokens] = await Promise.all([api("/users?limit=1000"), api("/tokens")]);
    replaceKeepingFocus(byId("user-rows"), users.data.map((u) => el("tr", { "data-user": u.name },
      el("td", { class: "num" }, String(u.id)), el("th", { scope: "row" }, u.name), el("td", {}, u.tenant),
      el("td", {}, u.role),
      el("td", {}, button("Issue token", { "aria-label": `Issue a token for ${u.name}`, "data-key": `token-${u.id}` },
        () => issueToken(u))))));
    replaceKeepingFocus(byId("token-rows"), tokens.data.map((t) => el("tr", {},
      el("td", { class: "num" }, String(t.id)), el("td", {}, t.name), el("td", {}, new Date(t.created_at).toLocaleString()),
      el("td", {}, button("Revoke", { class: "danger", "aria-label": `Revoke token ${t.name} (${t.id})`,
        "data-key": `revoke-${t.id}` }, async () => {
        await send(`/tokens/${t.id}`, "DELETE");
        announce(`Token ${t.id} revoked.`);
        await loadUsers();
      })))));
  }

  /** @param {UserRow} user */
  async function issueToken(user) {
    /** @type {{token: string, name: string}} */
    const made = await send(`/users/${user.id}/tokens`, "POST", { name: "dashboard" });
    const out = /** @type {HTMLInputElement} */ (byId("new-token"));
    out.value = made.token;
    byId("new-token-for").textContent = `New token for ${user.name} (shown only now):`;
    byId("new-token-box").hidden = false;
    out.focus();
    out.select();
    await loadUsers();
  }

  async function createUser() {
    const value = (/** @type {string} */ id) => /** @type {HTMLInputElement} */ (byId(id)).value.trim();
    /** @type {UserRow} */
    const user = await send("/users", "POST", { name: value("user-name"), tenant: value("user-tenant"),
      role: value("user-role") });
    announce(`User ${user.name} created (tenant ${user.tenant}, ${user.role}).`);
    /** @type {HTMLFormElement} */ (byId("user-form")).reset();
    await loadUsers();
  }

  /** @param {AdminNode} node */
  function nodeRow(node) {
    const state = node.state ?? "ready";
    const allowed = ALLOWED[state] ?? NODE_ACTIONS;
    const actions = NODE_ACTIONS.map((action) => {
      const b = button(action[0].toUpperCase() + action.slice(1), { "aria-label": `${action} ${node.name}`,
        "data-key": `${action}-${node.name}`, class: action === "drain" ? "danger" : "" }, () => nodeAction(node, action));
      b.disabled = !allowed.includes(action);
      return b;
    });
    return el("tr", { "data-node": node.name }, el("th", { scope: "row" }, node.name),
      el("td", { class: "num" }, String(node.rack)), el("td", { "data-field": "state" }, state),
      el("td", { class: "num" }, `${node.gpus_allocated.toFixed(1)} / ${node.gpus}`),
      el("td", {}, String(node.jobs.length + (node.other_jobs ?? 0))), el("td", { class: "actions" }, ...actions));
  }

  async function refresh() {
    if (!admin) return;
    /** @type {[import("./common.js").Policy, {data: AdminNode[]}, ...{data: import("./common.js").Job[]}[]]} */
    const [active, nodes, ...lists] = await Promise.all([
      api("/policies/active"), api("/nodes"),
      ...["Running", ...WAITING].map((s) => api(`/jobs?status=${s}&limit=1000`)),
    ]);
    // As the scheduler runs it (cluster mode: the operator's word, from its first round).
    const shown = active.name === "unknown" ? "—" : policyText(active.name, active.options);
    if (byId("policy-active").textContent !== shown) byId("policy-active").textContent = shown;
    replaceKeepingFocus(byId("node-rows"), nodes.data.map(nodeRow));
    const jobs = lists.flatMap((l) => l.data).sort((a, b) => a.id.localeCompare(b.id));
    replaceKeepingFocus(byId("admin-job-rows"), jobs.map((job) => el("tr", { "data-job": job.id },
      el("th", { scope: "row" }, el("a", { href: `#/job/${job.id}` }, `${job.name} (${job.id.slice(0, 8)})`)),
      el("td", {}, job.tenant), el("td", {}, job.status), el("td", { class: "num" }, String(job.num_gpus)),
      el("td", {}, job.nodes || "—"),
      el("td", {}, button("Cancel", { class: "danger", "aria-label": `Cancel job ${job.name}`, "data-key": `cancel-${job.id}` },
        () => cancel(job))))));
  }

  /** @param {HTMLElement} view */
  function mount(view) {
    admin = session.me?.role === "admin";
    view.append(el("h2", {}, "Admin"));
    if (!admin) {
      view.append(el("p", { id: "admin-refused" }, "This page is for admins: your token's role is not admin, " +
        "and the API refuses these actions to it (403)."));
      return;
    }
    const userForm = el("form", { id: "user-form", class: "fields", "aria-labelledby": "user-form-title" },
      el("h4", { id: "user-form-title" }, "Create a user"),
      el("label", { for: "user-name" }, "Name"), el("input", { id: "user-name", required: "", pattern: NAME_PATTERN }),
      el("label", { for: "user-tenant" }, "Tenant"), el("input", { id: "user-tenant", required: "", pattern: NAME_PATTERN }),
      el("label", { for: "user-role" }, "Role"),
      el("select", { id: "user-role" }, el("option", { value: "user" }, "user"), el("option", { value: "admin" }, "admin")),
      el("button", { type: "submit" }, "Create user"));
    userForm.addEventListener("submit", (e) => { e.preventDefault(); void createUser().catch(report); });
    const apply = button("Switch policy", { id: "policy-switch", class: "danger" }, switchPolicy);
    apply.disabled = true;
    const choice = el("select", { id: "policy-choice" });
    choice.addEventListener("change", () => { apply.disabled = true; byId("policy-preview").replaceChildren(); });
    view.append(
      el("section", { "aria-labelledby": "policy-title" },
        el("h3", { id: "policy-title" }, "Scheduling policy"),
        el("p", {}, "Active: ", el("strong", { id: "policy-active" }, "…")),
        el("label", { for: "policy-choice" }, "New policy "), choice, " ",
        button("Preview", { id: "policy-preview-button" }, preview), " ", apply,
        el("div", { id: "policy-preview", "aria-live": "polite" })),
      el("section", { "aria-labelledby": "nodes-title" },
        el("h3", { id: "nodes-title" }, "Nodes"),
        el("table", {}, head(["Node", "Rack", "State", "GPUs allocated", "Jobs", "Actions"], [1, 3, 4]),
          el("tbody", { id: "node-rows" }))),
      el("section", { "aria-labelledby": "admin-jobs-title" },
        el("h3", { id: "admin-jobs-title" }, "Active jobs (every tenant)"),
        el("table", {}, head(["Job", "Tenant", "Status", "GPUs", "Nodes", ""], [3]),
          el("tbody", { id: "admin-job-rows" }))),
      el("section", { "aria-labelledby": "users-title" },
        el("h3", { id: "users-title" }, "Users and tokens"),
        el("table", {}, head(["Id", "User", "Tenant", "Role", ""], [0]), el("tbody", { id: "user-rows" })),
        el("div", { id: "new-token-box", hidden: "" }, el("label", { for: "new-token", id: "new-token-for" }),
          el("input", { id: "new-token", readonly: "", size: "60", spellcheck: "false" })),
        userForm,
        el("h4", {}, "Your tokens"),
        el("table", {}, head(["Id", "Name", "Created", ""], [0]), el("tbody", { id: "token-rows" }))),
    );
    void setUp().catch(report);
  }

  async function setUp() {
    /** @type {{data: import("./common.js").Policy[]}} */
    const policies = await api("/policies");
    const active = policies.data.find((p) => p.active);
    byId("policy-active").textContent = active ? policyText(active.name, active.options ?? null) : "—";
    byId("policy-choice").replaceChildren(...policies.data.map((p) =>
      el("option", { value: p.name, ...(p.active ? { selected: "" } : {}) }, p.name)));
    await loadUsers();
  }

  return { mount, refresh };
}
