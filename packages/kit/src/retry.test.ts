import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ConflictError, InvalidArgumentError, SeraphError, toConnectError, UnavailableError } from "./errors.js";
import { backoffDelay, isTransient, retry } from "./retry.js";

describe("isTransient", () => {
  it("is UNAVAILABLE, and a transport failure that no Seraph service decided", () => {
    expect(isTransient(new ConnectError("connect ECONNREFUSED", Code.Unavailable))).toBe(true);
    expect(isTransient(toConnectError(new UnavailableError("jobs_unavailable", "down")))).toBe(true);
    for (const code of [Code.Canceled, Code.Aborted, Code.Unknown, Code.Internal]) {
      expect(isTransient(new ConnectError("read ECONNRESET", code)), Code[code]).toBe(true);
      // The same code as a service's decision (it carries an ErrorInfo) is not repeated.
      expect(isTransient(toConnectError(new SeraphError(code, "decided", "no"))), Code[code]).toBe(false);
    }
    expect(isTransient(toConnectError(new ConflictError("revision_conflict", "lost")))).toBe(false);
    // A reason in the text alone is not a decision: the detail is what counts.
    expect(isTransient(new ConnectError("job j is claimed (claim_conflict)", Code.Aborted))).toBe(true);
    for (const code of [Code.DeadlineExceeded, Code.NotFound, Code.InvalidArgument, Code.FailedPrecondition, Code.PermissionDenied, Code.ResourceExhausted]) {
      expect(isTransient(new ConnectError("no", code)), Code[code]).toBe(false);
    }
    expect(isTransient(new Error("boom"))).toBe(false);
    expect(isTransient(new InvalidArgumentError("f", "r", "m"))).toBe(false);
  });
});

describe("backoffDelay", () => {
  it("doubles its cap from initialMs up to maxMs and takes the random fraction of it (full jitter)", () => {
    const caps = [0, 1, 2, 3, 4, 5, 40].map((i) => backoffDelay(i, { initialMs: 100, maxMs: 1000, random: () => 1 }));
    expect(caps).toEqual([100, 200, 400, 800, 1000, 1000, 1000]);
    expect(backoffDelay(3, { initialMs: 100, maxMs: 1000, random: () => 0.25 })).toBe(200);
    expect(backoffDelay(3, { random: () => 0 })).toBe(0);
    for (let i = 0; i < 50; i++) {
      const d = backoffDelay(i % 8);
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThanOrEqual(2000);
    }
  });
});

describe("retry", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const cut = () => new ConnectError("http/2 stream closed with error code CANCEL", Code.Canceled);

  it("repeats transient failures with the jittered waits and returns the first answer", async () => {
    const at: number[] = [];
    const fractions = [0.5, 0.25];
    const p = retry(
      async ({ attempt }) => {
        at.push(Date.now());
        if (attempt < 3) throw cut();
        return "ok";
      },
      { initialMs: 100, random: () => fractions.shift() ?? 1 },
    );
    await vi.advanceTimersByTimeAsync(1000);
    await expect(p).resolves.toBe("ok");
    const t0 = at[0]!;
    // 0.5 × 100 ms, then 0.25 × 200 ms.
    expect(at.map((t) => t - t0)).toEqual([0, 50, 100]);
  });

  it("never repeats a decision", async () => {
    let calls = 0;
    await expect(
      retry(async () => {
        calls += 1;
        throw toConnectError(new ConflictError("revision_conflict", "lost"));
      }),
    ).rejects.toMatchObject({ code: Code.Aborted });
    expect(calls).toBe(1);
  });

  it("never sleeps past the deadline: the last wait is cut to it and the last try happens at it", async () => {
    const start = Date.now();
    const tries: { at: number; remainingMs: number }[] = [];
    const p = retry(
      async ({ remainingMs }) => {
        tries.push({ at: Date.now() - start, remainingMs });
        throw cut();
      },
      { deadlineMs: start + 250, initialMs: 100, random: () => 1 },
    );
    const outcome = expect(p).rejects.toMatchObject({ code: Code.Canceled });
    await vi.advanceTimersByTimeAsync(5000);
    await outcome;
    expect(tries).toEqual([
      { at: 0, remainingMs: 250 },
      { at: 100, remainingMs: 150 },
      { at: 250, remainingMs: 0 },
    ]);
  });

  it("gives up at once when less than minTryMs would be left after the wait", async () => {
    const start = Date.now();
    const at: number[] = [];
    const p = retry(
      async () => {
        at.push(Date.now() - start);
        throw cut();
      },
      { deadlineMs: start + 250, initialMs: 100, random: () => 1, minTryMs: 60 },
    );
    const outcome = expect(p).rejects.toMatchObject({ code: Code.Canceled });
    await vi.advanceTimersByTimeAsync(5000);
    await outcome;
    // After the second try 150 ms are left; a 200 ms wait cut to 150 would leave 0 < 60.
    expect(at).toEqual([0, 100]);
  });

  it("stops when the signal aborts, also in the middle of a wait, with onAbort's error", async () => {
    const stop = new AbortController();
    let calls = 0;
    const p = retry(
      async () => {
        calls += 1;
        throw cut();
      },
      { signal: stop.signal, initialMs: 1000, random: () => 1, onAbort: () => new Error("stopped") },
    );
    const outcome = expect(p).rejects.toThrow("stopped");
    await vi.advanceTimersByTimeAsync(100);
    stop.abort();
    await outcome;
    expect(calls).toBe(1);
    await expect(retry(async () => "never", { signal: stop.signal, onAbort: () => new Error("stopped") })).rejects.toThrow("stopped");
  });

  it("reports each retry before its wait", async () => {
    const seen: [number, number][] = [];
    const p = retry(
      async ({ attempt }) => {
        if (attempt < 3) throw cut();
        return attempt;
      },
      { random: () => 1, onRetry: (_err, attempt, delayMs) => seen.push([attempt, delayMs]) },
    );
    await vi.advanceTimersByTimeAsync(1000);
    await expect(p).resolves.toBe(3);
    expect(seen).toEqual([
      [1, 100],
      [2, 200],
    ]);
  });
});
