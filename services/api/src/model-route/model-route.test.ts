import { Code } from "@connectrpc/connect";
import { createRootLogger } from "@seraph/kit";
import { describe, expect, it } from "vitest";
import { extractUnifiedDiff } from "./diff-extract.js";
import { ModelRouteError, requestPatch, type ModelRouteConfig } from "./model-client.js";
import { buildRepairPrompt } from "./prompt.js";

const DIFF = "--- a/src/x.js\n+++ b/src/x.js\n@@ -1 +1 @@\n-a\n+b\n";
const log = createRootLogger({ name: "model-test", level: "silent" });
const route: ModelRouteConfig = { id: "r", baseUrl: "http://model.invalid/v1/", model: "m", apiKey: "k", timeoutMs: 200, maxAttempts: 3 };

function completion(content: string, status = 200): Response {
  return new Response(JSON.stringify({ model: "served", choices: [{ message: { role: "assistant", content } }] }), { status, headers: { "content-type": "application/json" } });
}

async function failure(p: Promise<unknown>): Promise<ModelRouteError> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(ModelRouteError);
  return err as ModelRouteError;
}

describe("extractUnifiedDiff", () => {
  it("takes one fenced diff, an unlabelled fence holding a diff, or a raw diff with prose around it", () => {
    expect(extractUnifiedDiff(`Fix:\n\`\`\`diff\n${DIFF}\`\`\`\nDone.`)).toEqual({ ok: true, diff: DIFF });
    expect(extractUnifiedDiff(`\`\`\`\n${DIFF}\`\`\``)).toEqual({ ok: true, diff: DIFF });
    expect(extractUnifiedDiff(`Here:\n${DIFF}\nThat is all.`)).toEqual({ ok: true, diff: DIFF });
    expect(extractUnifiedDiff(`diff --git a/src/x.js b/src/x.js\n${DIFF}`)).toEqual({ ok: true, diff: `diff --git a/src/x.js b/src/x.js\n${DIFF}` });
    expect(extractUnifiedDiff(DIFF.replace(/\n$/, ""))).toEqual({ ok: true, diff: DIFF });
  });
  it("refuses none and several", () => {
    expect(extractUnifiedDiff("change the minus to a plus")).toMatchObject({ ok: false, reason: "model_no_diff" });
    expect(extractUnifiedDiff("```js\nconst a = 1;\n```")).toMatchObject({ ok: false, reason: "model_no_diff" });
    expect(extractUnifiedDiff(`\`\`\`diff\n${DIFF}\`\`\`\n\`\`\`patch\n${DIFF}\`\`\``)).toMatchObject({ ok: false, reason: "model_multiple_diffs" });
  });
});

describe("requestPatch", () => {
  it("posts model and messages to {base}/chat/completions with the bearer key", async () => {
    const calls: { url: string; init: RequestInit }[] = [];
    const fetch = (async (url: string, init: RequestInit) => {
      calls.push({ url, init });
      return completion(`\`\`\`diff\n${DIFF}\`\`\``);
    }) as unknown as typeof globalThis.fetch;
    const res = await requestPatch(route, [{ role: "user", content: "hi" }], { log, fetch });
    expect(res).toEqual({ diff: DIFF, model: "served", attempts: 1 });
    expect(calls[0]?.url).toBe("http://model.invalid/v1/chat/completions");
    expect((calls[0]?.init.headers as Record<string, string>).authorization).toBe("Bearer k");
    expect(JSON.parse(String(calls[0]?.init.body))).toMatchObject({ model: "m", messages: [{ role: "user", content: "hi" }] });
  });

  it("retries 429/5xx/network errors with backoff, bounded; never retries 401 or a timeout", async () => {
    const sleeps: number[] = [];
    const sleep = async (ms: number) => void sleeps.push(ms);
    let n = 0;
    const flaky = (async () => {
      n += 1;
      if (n === 1) return new Response("", { status: 429 });
      if (n === 2) throw new TypeError("fetch failed");
      return completion(DIFF);
    }) as unknown as typeof globalThis.fetch;
    expect((await requestPatch(route, [], { log, fetch: flaky, sleep })).attempts).toBe(3);
    expect(sleeps).toHaveLength(2);
    // Kit's backoff with full jitter: each wait is within its doubling cap (250 ms, then 500 ms).
    expect(sleeps[0]!).toBeLessThanOrEqual(250);
    expect(sleeps[1]!).toBeLessThanOrEqual(500);

    let m = 0;
    const always500 = (async () => {
      m += 1;
      return new Response("boom", { status: 503 });
    }) as unknown as typeof globalThis.fetch;
    const e500 = await failure(requestPatch(route, [], { log, fetch: always500, sleep }));
    expect([e500.code, e500.reason, m]).toEqual([Code.Unavailable, "model_http_error", 3]);

    let k = 0;
    const unauthorized = (async () => {
      k += 1;
      return new Response("no", { status: 401 });
    }) as unknown as typeof globalThis.fetch;
    const e401 = await failure(requestPatch(route, [], { log, fetch: unauthorized, sleep }));
    expect([e401.code, e401.reason, k]).toEqual([Code.FailedPrecondition, "model_unauthorized", 1]);

    let t = 0;
    const hang = ((_u: string, init: RequestInit) => {
      t += 1;
      return new Promise((_r, reject) => init.signal?.addEventListener("abort", () => reject(init.signal?.reason)));
    }) as unknown as typeof globalThis.fetch;
    const eTimeout = await failure(requestPatch(route, [], { log, fetch: hang, sleep }));
    expect([eTimeout.code, eTimeout.reason, t]).toEqual([Code.DeadlineExceeded, "model_timeout", 1]);
  });

  it("names garbage and missing content model_bad_response", async () => {
    const garbage = (async () => new Response("<html>", { status: 200 })) as unknown as typeof globalThis.fetch;
    expect((await failure(requestPatch(route, [], { log, fetch: garbage }))).reason).toBe("model_bad_response");
    const empty = (async () => new Response(JSON.stringify({ choices: [{ message: {} }] }), { status: 200 })) as unknown as typeof globalThis.fetch;
    expect((await failure(requestPatch(route, [], { log, fetch: empty }))).reason).toBe("model_bad_response");
  });
});

describe("buildRepairPrompt", () => {
  it("carries only the consented files, the criteria and the allowed paths", () => {
    const [system, user] = buildRepairPrompt({ acceptanceCriteria: "tests pass", allowedPatchPaths: ["src"], files: [{ path: "src/x.js", content: "a\n" }] });
    expect(system?.content).toContain("exactly one unified diff");
    expect(system?.content).toContain("src");
    expect(user?.content).toContain("=== src/x.js ===\na\n=== end src/x.js ===");
    expect(user?.content).toContain("tests pass");
  });
});
