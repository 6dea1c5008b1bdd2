// @ts-check
/**
 * The Job page's worker logs, mounted and refreshed by job.js: the last lines of one
 * worker's stdout and stderr in the job's latest attempt (GET /api/v1/jobs/{id}/logs;
 * in cluster mode its pod's log, which the node's kubelet serves; in local mode none,
 * and the note says why). The worker and the number of lines are chosen here; the
 * text is followed at the bottom unless the reader has scrolled up in it.
 */
import { api, el } from "./common.js";

/**
 * @typedef {{job_id: string, worker: number, workers: number, pod: string|null,
 *   node: string|null, phase: string|null, lines: string[], note: string|null}} JobLogs
 */

const TAIL_CHOICES = [50, 200, 1000]; // lines; the API serves up to 10,000
const DEFAULT_TAIL = 200;

/** @param {string} jobId */
export function logsSection(jobId) {
  const worker = /** @type {HTMLSelectElement} */ (el("select", { id: "logs-worker" },
    el("option", { value: "0" }, "0")));
  const tail = /** @type {HTMLSelectElement} */ (el("select", { id: "logs-tail" },
    ...TAIL_CHOICES.map((n) => el("option", { value: String(n) }, String(n)))));
  tail.value = String(DEFAULT_TAIL);
  const note = el("p", { id: "job-logs-note", role: "status" });
  const source = el("p", { id: "job-logs-source" });
  const text = el("pre", { id: "job-logs", class: "logs", tabindex: "0", "aria-label": "Worker logs" });
  const refresh = async () => {
    /** @type {JobLogs} */
    let logs;
    try {
      logs = await api(`/jobs/${jobId}/logs?worker=${worker.value}&tail_lines=${tail.value}`);
    } catch (err) { // the rest of the page stays; the section says what failed
      note.textContent = `Logs unavailable: ${err instanceof Error ? err.message : String(err)}`;
      return;
    }
    if (worker.options.length !== Math.max(logs.workers, 1)) {
      const chosen = worker.value;
      worker.replaceChildren(...Array.from({ length: Math.max(logs.workers, 1) },
        (_, i) => el("option", { value: String(i) }, String(i))));
      worker.value = Number(chosen) < worker.options.length ? chosen : "0";
    }
    note.textContent = logs.note || "";
    source.textContent = logs.pod ? `Pod ${logs.pod} on ${logs.node || "—"} (${logs.phase || "—"})` : "";
    const body = logs.lines.join("\n");
    if (text.textContent !== body) {
      const atBottom = text.scrollTop + text.clientHeight >= text.scrollHeight - 4;
      text.textContent = body;
      if (atBottom) text.scrollTop = text.scrollHeight;
    }
  };
  for (const select of [worker, tail]) select.addEventListener("change", () => void refresh());
  return {
    /** @param {HTMLElement} view */
    mount(view) {
      view.append(
        el("h3", {}, "Worker logs"),
        el("p", { class: "controls" }, el("label", {}, "Worker ", worker), " ",
          el("label", {}, "Last lines ", tail)),
        source, note, text,
      );
    },
    refresh,
  };
}
