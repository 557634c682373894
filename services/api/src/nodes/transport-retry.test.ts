import { Code, ConnectError } from "@connectrpc/connect";
import { ConflictError, InvalidArgumentError, toConnectError } from "@seraph/kit";
import { describe, expect, it, vi } from "vitest";
import { withTransportRetry } from "./transport-retry.js";

describe("withTransportRetry (EnqueueJob through a jobs replica that dies)", () => {
  it("repeats a call cut by a dying replica (CANCELED, then UNAVAILABLE) and returns the answer of the replica that answers", async () => {
    // connect-node reports a connection reset mid-answer as ABORTED ("read ECONNRESET"), with no
    // service reason: a transport failure too.
    const failures = [new ConnectError("http/2 stream closed with error code CANCEL", Code.Canceled), new ConnectError("read ECONNRESET", Code.Aborted), new ConnectError("connect ECONNREFUSED", Code.Unavailable)];
    let calls = 0;
    const got = await withTransportRetry(5000, async () => {
      calls += 1;
      const f = failures.shift();
      if (f) throw f;
      return "job-1";
    });
    expect(got).toBe("job-1");
    expect(calls).toBe(4);
  });

  it("never repeats a decision of the service, and gives up with the last transport failure once the budget is spent", async () => {
    let calls = 0;
    await expect(
      withTransportRetry(5000, async () => {
        calls += 1;
        throw toConnectError(new InvalidArgumentError("bundle", "invalid_bundle", "the bundle names no node"));
      }),
    ).rejects.toMatchObject({ code: Code.InvalidArgument });
    expect(calls).toBe(1);
    calls = 0;
    // The service's own ABORTED (a conflict) carries its ErrorInfo: a decision, not repeated.
    await expect(
      withTransportRetry(5000, async () => {
        calls += 1;
        throw toConnectError(new ConflictError("revision_conflict", "the approval's job was queued concurrently"));
      }),
    ).rejects.toMatchObject({ code: Code.Aborted });
    expect(calls).toBe(1);
    calls = 0;
    const timeouts: number[] = [];
    vi.useFakeTimers({ toFake: ["setTimeout", "Date"] });
    try {
      const call = withTransportRetry(350, async (timeoutMs) => {
        calls += 1;
        timeouts.push(timeoutMs);
        throw new ConnectError("connect ECONNREFUSED", Code.Unavailable);
      }, { random: () => 1 });
      const outcome = expect(call).rejects.toMatchObject({ code: Code.Unavailable });
      await vi.advanceTimersByTimeAsync(1000);
      await outcome;
    } finally {
      vi.useRealTimers();
    }
    // With the jitter at its top: 100 ms, then 200 ms of backoff; three tries inside 350 ms, each
    // given only what is left, and no fourth try with nothing left.
    expect(calls).toBe(3);
    expect(timeouts).toEqual([350, 250, 50]);
  });
});
