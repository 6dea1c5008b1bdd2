// @ts-check
/**
 * The dashboard's shell, loaded by index.html as an ES module, served at / by
 * api/dashboard.py; the Cluster, Queue (the wait order), Quotas (the quota tree), Job,
 * Events, History, Replays, What-if and Admin pages are in cluster.js, order.js,
 * quotas.js, job.js, events.js, history.js, replays.js, whatif.js and admin.js, shared
 * helpers in common.js and charts.js.
 * Plain browser JavaScript with JSDoc types, served as it is (web/__init__.py); tsc
 * checks the types (`make typecheck`, web/tsconfig.json).
 * It reads the REST API at /api/v1 with the token the user signs in with (kept in
 * sessionStorage), and polls it every POLL_MS.
 */
import { adminPage } from "./admin.js";
import { clusterPage } from "./cluster.js";
import { api, byId, clock, report, session, showError, signOut, TOKEN_KEY } from "./common.js";
import { eventsPage } from "./events.js";
import { historyPage } from "./history.js";
import { jobPage } from "./job.js";
import { orderPage } from "./order.js";
import { quotasPage } from "./quotas.js";
import { replaysPage } from "./replays.js";
import { whatifPage } from "./whatif.js";

/**
 * @typedef {import("./common.js").User} User
 * @typedef {import("./common.js").Page} Page
 */

const POLL_MS = 1000; // the issue asks for updates at least every 2 s; this leaves time to fetch

// ---- signing in -------------------------------------------------------------------

async function signIn() {
  /** @type {User} */
  const me = await api("/users/me");
  session.me = me;
  // Which clock the service's times are on; a backend not up yet says so on the pages.
  /** @type {{clock: "wall"|"simulated"}|null} */
  const summary = await api("/cluster").catch(() => null);
  if (summary) clock.kind = summary.clock;
  byId("nav-admin").hidden = me.role !== "admin";
  byId("whoami").textContent = `${me.name} · tenant ${me.tenant} · ${me.role}`;
  byId("sign-in").hidden = true;
  byId("nav").hidden = false;
  byId("sign-out").hidden = false;
  showError("");
  route();
}

// ---- routing and polling ----------------------------------------------------------

/** @type {Page|null} */
let current = null;
let timer = 0;

// The pages by the name in their #/name address (#/name?key=value: the page's filters);
// the Job page is #/job/<id>. The wait order's page keeps its address, #/queue.
/** @type {Record<string, (params: URLSearchParams) => Page>} */
const PAGES = {
  cluster: () => clusterPage, queue: () => orderPage, quotas: quotasPage, replays: replaysPage, whatif: whatifPage,
  admin: adminPage, events: eventsPage, history: historyPage,
};

function route() {
  if (!sessionStorage.getItem(TOKEN_KEY)) return;
  const hash = location.hash || "#/cluster";
  const job = /^#\/job\/([0-9a-f]{32})$/.exec(hash);
  const [asked, query] = hash.slice(2).split("?", 2);
  const name = job ? "job" : Object.hasOwn(PAGES, asked) ? asked : "cluster";
  for (const link of document.querySelectorAll("nav a[data-page]")) {
    if (link.getAttribute("data-page") === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  current = job ? jobPage(job[1]) : PAGES[name](new URLSearchParams(query ?? ""));
  const view = byId("view");
  view.replaceChildren();
  current.mount(view);
  showError("");
  byId("notice").textContent = "";
  poll();
}

async function poll() {
  window.clearTimeout(timer);
  const page = current;
  try {
    await page?.refresh();
    if (page === current) byId("status").textContent = `Updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    if (page === current) report(err);
  }
  if (page === current && sessionStorage.getItem(TOKEN_KEY)) timer = window.setTimeout(poll, POLL_MS);
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  byId("sign-in").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = /** @type {HTMLInputElement} */ (byId("token"));
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    signIn().catch(report);
  });
  byId("sign-out").addEventListener("click", () => {
    window.clearTimeout(timer);
    current = null;
    signOut();
  });
  if (sessionStorage.getItem(TOKEN_KEY)) signIn().catch(report);
  else signOut();
});
