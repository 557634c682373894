import { Code } from "@connectrpc/connect";
import { FailedPreconditionError, SeraphError, UnavailableError, type Logger } from "@seraph/kit";
import { backoffDelay } from "@seraph/kit/retry";
import { fetch as undiciFetch } from "undici";
import { isIP } from "node:net";
import { causeChain, transportCause } from "./transport-cause.js";
import { isNonPublicAddress, NonPublicAddressError, publicOnlyDispatcher } from "./public-only.js";
import { extractUnifiedDiff } from "./diff-extract.js";

/** One configured OpenAI-compatible route. */
export interface ModelRouteConfig {
  readonly id: string;
  readonly baseUrl: string;
  readonly model: string;
  /** Bearer key; empty sends no Authorization header (a local server). */
  readonly apiKey: string;
  readonly timeoutMs: number;
  readonly maxAttempts: number;
  /**
   * Refuse a route whose host is, or resolves to, a loopback, private, link-local or otherwise
   * non-public address (the settings' `model_routes_public_only`), checked on the addresses the
   * connection itself uses.
   */
  readonly publicOnly?: boolean;
}

/** A chat message. */
export interface ChatMessage {
  readonly role: "system" | "user";
  readonly content: string;
}

/** The model's answer reduced to what Seraph keeps. */
export interface ModelAnswer {
  readonly diff: string;
  /** The model the server says answered (falls back to the configured one). */
  readonly model: string;
  readonly attempts: number;
}

/** What the client needs besides the route; injectable for tests. */
export interface ModelClientDeps {
  readonly fetch?: typeof fetch;
  readonly sleep?: (ms: number) => Promise<void>;
  readonly log: Logger;
  /** Whether an error answer's body may appear in the message (only for the instance operator). */
  readonly showErrorBody?: boolean;
}

/** The most a chat-completions response body may be. */
const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;

/** A model route failure: a stable reason, the gRPC code the caller gets. */
export class ModelRouteError extends SeraphError {
  constructor(code: Code, reason: string, message: string, cause?: unknown) {
    super(code, reason, message, { cause });
  }
}

async function readBounded(res: Response): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > MAX_RESPONSE_BYTES) {
      await reader.cancel();
      throw new ModelRouteError(Code.FailedPrecondition, "model_bad_response", `The model route answered with more than ${MAX_RESPONSE_BYTES} bytes.`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** The wait before retry `attempt` (1 for the first): kit's backoff shape (exponential, full jitter), 250 ms doubling to 4 s. */
function backoffMs(attempt: number): number {
  return backoffDelay(attempt - 1, { initialMs: 250, maxMs: 4000 });
}

/** The fetch a route is asked with: for a public-only route, one whose connections resolve only to public addresses. */
function fetchFor(route: ModelRouteConfig, url: string, deps: ModelClientDeps): typeof fetch {
  if (route.publicOnly !== true) return deps.fetch ?? fetch;
  const host = new URL(url).hostname.replace(/^\[(.*)\]$/, "$1");
  // An IP literal is never looked up: it is checked here.
  if (isIP(host) !== 0 && isNonPublicAddress(host)) throw notPublic(route, new NonPublicAddressError(host, host));
  const dispatcher = publicOnlyDispatcher();
  return ((input: string, init: RequestInit) => undiciFetch(input, { ...(init as object), dispatcher } as never)) as unknown as typeof fetch;
}

function notPublic(route: ModelRouteConfig, e: NonPublicAddressError): ModelRouteError {
  return new ModelRouteError(Code.FailedPrecondition, "model_route_not_public", `The model route ${route.id} was not contacted: ${e.message}, and the settings allow only public model routes (model_routes_public_only).`, e);
}

/** The NonPublicAddressError in an error's cause chain, if any. */
function nonPublicIn(err: unknown): NonPublicAddressError | undefined {
  return causeChain(err).find((e): e is NonPublicAddressError => e instanceof NonPublicAddressError);
}

/**
 * Asks an OpenAI-compatible route (POST {base_url}/chat/completions) for a patch and extracts the
 * one unified diff of its answer. Each attempt is bounded by the route's timeout; 429, 5xx and
 * network errors are retried with exponential backoff up to max_attempts; a timeout is not retried
 * (it already spent the route's budget). Every failure is a ModelRouteError with a stable reason:
 * model_timeout (DEADLINE_EXCEEDED), model_http_error / model_unreachable (UNAVAILABLE),
 * model_unauthorized, model_bad_response, model_no_diff, model_multiple_diffs, model_route_not_public
 * (FAILED_PRECONDITION).
 */
export async function requestPatch(route: ModelRouteConfig, messages: readonly ChatMessage[], deps: ModelClientDeps, signal?: AbortSignal): Promise<ModelAnswer> {
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const url = `${route.baseUrl.replace(/\/+$/, "")}/chat/completions`;
  const doFetch = fetchFor(route, url, deps);
  const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json" };
  if (route.apiKey !== "") headers.authorization = `Bearer ${route.apiKey}`;
  const body = JSON.stringify({ model: route.model, messages, temperature: 0, stream: false });
  const attempts = Math.max(1, route.maxAttempts);
  const log = deps.log.child({ modelRoute: route.id });
  let last: ModelRouteError | undefined;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    if (attempt > 1) await sleep(backoffMs(attempt - 1));
    const timeout = AbortSignal.timeout(route.timeoutMs);
    const combined = signal ? AbortSignal.any([timeout, signal]) : timeout;
    let res: Response;
    let text: string;
    try {
      // A redirect is never followed: the prompt carries private source, and a route that
      // redirects would send it to a host nobody configured.
      res = await doFetch(url, { method: "POST", headers, body, signal: combined, redirect: "manual" });
      if ((res.status >= 300 && res.status < 400) || res.type === "opaqueredirect") {
        await res.body?.cancel().catch(() => undefined);
        throw new ModelRouteError(Code.FailedPrecondition, "model_redirect_refused", `The model route ${route.id} answered with a redirect (HTTP ${res.status}); redirects are refused. An operator must configure the final URL.`);
      }
      text = await readBounded(res);
    } catch (err) {
      if (err instanceof ModelRouteError) throw err;
      const refused = nonPublicIn(err);
      if (refused) throw notPublic(route, refused);
      if (signal?.aborted) throw new ModelRouteError(Code.Canceled, "model_cancelled", "The request was cancelled.", err);
      if (timeout.aborted) {
        throw new ModelRouteError(Code.DeadlineExceeded, "model_timeout", `The model route ${route.id} did not answer within ${route.timeoutMs} ms.`, err);
      }
      const cause = transportCause(err);
      last = new ModelRouteError(Code.Unavailable, "model_unreachable", `The model route ${route.id} could not be reached at ${new URL(url).host}: ${cause}.`, err);
      log.warn({ attempt, cause }, "model route unreachable");
      continue;
    }
    if (res.status === 401 || res.status === 403) {
      throw new ModelRouteError(Code.FailedPrecondition, "model_unauthorized", `The model route ${route.id} refused the configured key (HTTP ${res.status}); an operator must set a valid key.`);
    }
    if (res.status === 429 || res.status >= 500) {
      last = new ModelRouteError(Code.Unavailable, "model_http_error", `The model route ${route.id} answered HTTP ${res.status} after ${attempt} attempt(s).`);
      log.warn({ attempt, status: res.status }, "model route error; retrying when attempts remain");
      continue;
    }
    if (res.status < 200 || res.status >= 300) {
      log.warn({ status: res.status, body: text.slice(0, 200) }, "model route refused the request");
      const detail = deps.showErrorBody ? `: ${text.slice(0, 200)}` : " (the answer's body is shown only to the instance operator)";
      throw new ModelRouteError(Code.FailedPrecondition, "model_http_error", `The model route ${route.id} answered HTTP ${res.status}${detail}`);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw new ModelRouteError(Code.FailedPrecondition, "model_bad_response", `The model route ${route.id} did not answer with JSON.`, err);
    }
    const choice = (parsed as { choices?: { message?: { content?: unknown } }[] } | null)?.choices?.[0];
    const content = choice?.message?.content;
    if (typeof content !== "string") {
      throw new ModelRouteError(Code.FailedPrecondition, "model_bad_response", `The model route ${route.id} answered without choices[0].message.content.`);
    }
    const extracted = extractUnifiedDiff(content);
    if (!extracted.ok) throw new ModelRouteError(Code.FailedPrecondition, extracted.reason, extracted.message);
    const answered = (parsed as { model?: unknown }).model;
    return { diff: extracted.diff, model: typeof answered === "string" && answered !== "" ? answered : route.model, attempts: attempt };
  }
  throw last ?? new UnavailableError("model_http_error", `The model route ${route.id} failed.`);
}

/** Thrown when the prompt would exceed its bound. */
export function promptTooLarge(bytes: number, max: number): FailedPreconditionError {
  return new FailedPreconditionError("prompt_too_large", `The consented source is ${bytes} bytes; a model prompt may carry at most ${max}. Narrow the source paths.`);
}
