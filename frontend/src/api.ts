// Fetching from the plugin's JSON routes (docs/http_api.md). Relative URLs only: TensorBoard's
// plugin iframe sets <base href="plugin/tb_attn/">, which also makes --path_prefix work.
// Failures are thrown as ApiError with the server's message; nothing is turned into "no data".
// A 202 means the server is still parsing the traces behind the answer: it is polled.

import type {
  Comparison,
  DrillTree,
  MemoryCurve,
  RankView,
  RunsResponse,
  RunSummary,
  ScalingFits,
  StrategyTable,
  TimelineSlice,
} from "./types";

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

export type Params = Record<string, string | number | boolean | null | undefined>;

/** `./route?a=1&b=2` with every value URI-encoded; null and undefined values are left out. */
export function url(route: string, params: Params = {}): string {
  const parts: string[] = [];
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === false) continue;
    parts.push(`${encodeURIComponent(key)}=${encodeURIComponent(value === true ? "1" : String(value))}`);
  }
  return `./${route}${parts.length ? "?" + parts.join("&") : ""}`;
}

/**
 * `./route?runs=R1,R2&...`: the run names are URI-encoded one by one and joined with literal
 * commas (a comma inside a name is encoded, so it cannot split it).
 */
export function runsUrl(route: string, runs: string[], params: Params = {}): string {
  const rest = url(route, params).slice(`./${route}`.length).replace(/^\?/, "");
  return `./${route}?runs=${runs.map(encodeURIComponent).join(",")}${rest ? "&" + rest : ""}`;
}

async function getJson<T>(route: string, params: Params, signal?: AbortSignal): Promise<T> {
  return getJsonAt<T>(route, url(route, params), signal);
}

/** How long a route may stay "loading" (202) before the tab gives up waiting for it. */
const LOADING_TIMEOUT_MS = 30 * 60 * 1000;

/** A route's final answer: 202 "loading" (traces still being parsed) is polled until it is not. */
async function getJsonAt<T>(route: string, target: string, signal?: AbortSignal): Promise<T> {
  const started = Date.now();
  for (;;) {
    const { status, body } = await fetchJson(route, target, signal);
    if (status !== 202) return body as T;
    if (Date.now() - started > LOADING_TIMEOUT_MS) {
      throw new ApiError(`${route}: the server is still parsing after ${LOADING_TIMEOUT_MS / 60000} minutes`, 202);
    }
    const retry = (body as { retry_after_ms?: unknown }).retry_after_ms;
    await sleep(typeof retry === "number" && retry > 0 ? Math.min(retry, 5000) : 500, signal);
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new DOMException("aborted", "AbortError"));
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(new DOMException("aborted", "AbortError"));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

async function fetchJson(route: string, target: string, signal?: AbortSignal): Promise<{ status: number; body: unknown }> {
  let response: Response;
  try {
    response = await fetch(target, { signal, headers: { Accept: "application/json" } });
  } catch (err) {
    if (isAbort(err)) throw err;
    throw new ApiError(`Could not reach the server for ${route}: ${errorText(err)}`, 0);
  }
  const text = await response.text();
  let body: unknown = undefined;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    // Not JSON (an HTML error page from a proxy, say): report the status and the start of it.
  }
  if (!response.ok) {
    // The contract's {"error": "..."}; TensorBoard's own error pages are plain text, which is
    // shown as it is when it is short (an HTML page from a proxy is not).
    const plain = text.trim();
    const message =
      body && typeof body === "object" && typeof (body as { error?: unknown }).error === "string"
        ? (body as { error: string }).error
        : plain && plain.length <= 500 && !plain.startsWith("<")
          ? plain
          : `HTTP ${response.status} ${response.statusText} from ${route}`;
    throw new ApiError(message, response.status);
  }
  if (body === undefined) throw new ApiError(`${route}: the response is not JSON`, response.status);
  return { status: response.status, body };
}

export function isAbort(err: unknown): boolean {
  return err instanceof DOMException && err.name === "AbortError";
}

export function errorText(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

export interface Target {
  run: string;
  worker: string | null;
  span: string | null;
}

export const api = {
  runs: (refresh: boolean, signal?: AbortSignal) => getJson<RunsResponse>("runs", { refresh }, signal),
  summary: (t: Target, signal?: AbortSignal) =>
    getJson<RunSummary>("summary", { run: t.run, worker: t.worker, span: t.span }, signal),
  drilldown: (t: Target, layer: number, phase: string | null, backward: boolean, signal?: AbortSignal) =>
    getJson<DrillTree>(
      "drilldown",
      { run: t.run, worker: t.worker, span: t.span, layer, phase, backward },
      signal,
    ),
  memory: (t: Target, step: number | null, signal?: AbortSignal) =>
    getJson<MemoryCurve>("memory", { run: t.run, worker: t.worker, span: t.span, step }, signal),
  timeline: (t: Target, step: number | null, signal?: AbortSignal) =>
    getJson<TimelineSlice>("timeline", { run: t.run, worker: t.worker, span: t.span, step }, signal),
  compare: (runs: string[], baseline: string | null, signal?: AbortSignal) =>
    getJsonAt<Comparison>("compare", runsUrl("compare", runs, { baseline }), signal),
  scaling: (runs: string[], signal?: AbortSignal) =>
    getJsonAt<ScalingFits>("scaling", runsUrl("scaling", runs), signal),
  /** `baseline` is a strategy ("sdpa", "performer M=64"); null: the server's rule (naive, else the first exact one). */
  strategies: (runs: string[], baseline: string | null, signal?: AbortSignal) =>
    getJsonAt<StrategyTable>("strategies", runsUrl("strategies", runs, { baseline }), signal),
  /** `ranks`: a rank selection ("0-7,512"); null: every rank. */
  ranks: (run: string, margin: number | null, ranks: string | null, signal?: AbortSignal) =>
    getJson<RankView>("ranks", { run, margin, ranks }, signal),
};

/**
 * Keeps only the latest request of one kind: starting a new one aborts the previous, and a
 * response that arrives after a newer request started (the user switched runs) is discarded.
 */
export class Latest {
  private seq = 0;
  private controller: AbortController | null = null;

  /** Runs `fn`; resolves to its result, or to `stale` when a newer request superseded it. */
  async run<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<{ stale: true } | { stale: false; value: T }> {
    this.controller?.abort();
    const controller = new AbortController();
    this.controller = controller;
    const seq = ++this.seq;
    try {
      const value = await fn(controller.signal);
      return seq === this.seq ? { stale: false, value } : { stale: true };
    } catch (err) {
      if (seq !== this.seq || isAbort(err)) return { stale: true };
      throw err;
    } finally {
      if (this.controller === controller) this.controller = null;
    }
  }

  /** Invalidates any request in flight. */
  cancel(): void {
    this.seq++;
    this.controller?.abort();
    this.controller = null;
  }
}
