import { create } from "@bufbuild/protobuf";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Outcome, ReceiptSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterEach, describe, expect, it, vi } from "vitest";
import pino from "pino";
import { SupervisorConnectionClosedError, SupervisorProtocolError, type SupervisorConnection } from "../supervisor-client/index.js";
import { CONTROLLER_DEADLINE_MARGIN_MS } from "../supervisor-client/run-to-receipt.js";
import { CancelLatch, superviseUntilReceipt, verdictOf, type SuperviseContext } from "./job-execution.js";

const receipt = (o: { outcome: Outcome; echildObserved?: boolean; cancelledBeforeGo?: boolean }) => create(ReceiptSchema, { echildObserved: true, ...o });

describe("verdictOf: a step's receipt in job terms (conservative)", () => {
  it("succeeds only with ECHILD observed; continues to the next step when not last", () => {
    expect(verdictOf(receipt({ outcome: Outcome.SUCCEEDED }), true, true)).toMatchObject({ state: JobState.SUCCEEDED, outcome: "succeeded" });
    expect(verdictOf(receipt({ outcome: Outcome.SUCCEEDED }), true, false)).toMatchObject({ next: true });
    expect(verdictOf(receipt({ outcome: Outcome.SUCCEEDED, echildObserved: false }), true, true)).toMatchObject({ state: JobState.UNKNOWN, outcome: "unknown_cleanup_unproven" });
  });
  it("maps failures, timeouts and leftovers with proved cleanup to terminal states that release the slot", () => {
    expect(verdictOf(receipt({ outcome: Outcome.FAILED }), true, true).state).toBe(JobState.FAILED);
    expect(verdictOf(receipt({ outcome: Outcome.TIMED_OUT }), true, true).outcome).toBe("timed_out");
    expect(verdictOf(receipt({ outcome: Outcome.REJECTED_LEFTOVER_DESCENDANTS }), true, true).state).toBe(JobState.REJECTED);
    expect(verdictOf(receipt({ outcome: Outcome.UNKNOWN }), true, true).state).toBe(JobState.UNKNOWN);
  });
  it("a cancellation is 'before start' only when the first command never started; otherwise unknown_external_effect", () => {
    expect(verdictOf(receipt({ outcome: Outcome.CANCELLED, cancelledBeforeGo: true }), true, true)).toMatchObject({ state: JobState.CANCELLED, outcome: "cancelled_before_start" });
    expect(verdictOf(receipt({ outcome: Outcome.CANCELLED, cancelledBeforeGo: true }), false, true)).toMatchObject({ state: JobState.UNKNOWN, outcome: "unknown_external_effect" });
    expect(verdictOf(receipt({ outcome: Outcome.CANCELLED }), true, true)).toMatchObject({ state: JobState.UNKNOWN, outcome: "unknown_external_effect" });
  });
});

describe("verdictOf and output the storage refused to keep", () => {
  it("keeps the step's real outcome (as for output past the limit) and names what was not kept in the message", () => {
    const r = create(ReceiptSchema, { outcome: Outcome.SUCCEEDED, echildObserved: true, message: "Every command exited 0.", storageErrors: ["cmd-0.stdout: ENOSPC after 4096 kept bytes"] });
    expect(verdictOf(r, true, true)).toMatchObject({
      state: JobState.SUCCEEDED,
      outcome: "succeeded",
      message: "Every command exited 0. Not kept (the run directory's storage refused the write): cmd-0.stdout: ENOSPC after 4096 kept bytes.",
    });
    expect(verdictOf(create(ReceiptSchema, { ...r, outcome: Outcome.FAILED }), true, true)).toMatchObject({ state: JobState.FAILED, outcome: "failed" });
    expect(verdictOf(r, true, false)).toMatchObject({ next: true, message: "" });
  });
});

describe("cancellation helpers", () => {
  it("the cancel latch is monotonic: the first reason stays", async () => {
    const l = new CancelLatch();
    l.trigger("first");
    l.trigger("second");
    await l.requested;
    expect(l.reason).toBe("first");
  });
});

describe("superviseUntilReceipt: the runner never waits without a bound", () => {
  const ctx = (deadlineMs: number): SuperviseContext =>
    ({
      log: pino({ level: "silent" }),
      active: { jobId: "j", attempt: 1, fence: 1n, cancel: new CancelLatch(), connection: undefined },
      deadlineMs,
      deps: { pollMs: 10_000, signal: new AbortController().signal, jobs: { reportProgress: async () => ({ cancelRequested: false }) } },
    }) as unknown as SuperviseContext;
  const conn = (receipt: () => Promise<never>): SupervisorConnection => ({ receipt, cancel: async () => ({}) }) as unknown as SupervisorConnection;

  it("a supervisor that never answers (SIGSTOPped) ends as supervisor_unresponsive at the attempt's deadline + the margin", async () => {
    const never = () => new Promise<never>(() => undefined);
    // The attempt's deadline passed 4.9 s ago: the runner's own deadline is 100 ms away.
    const r = await superviseUntilReceipt(ctx(Date.now() - CONTROLLER_DEADLINE_MARGIN_MS + 100), conn(never));
    expect(r).toBe("supervisor_unresponsive");
  });

  it("a connection taken over by another incarnation is controller_superseded; any other close is supervisor_lost", async () => {
    const far = Date.now() + 60_000;
    expect(await superviseUntilReceipt(ctx(far), conn(() => Promise.reject(new SupervisorProtocolError("superseded", "incarnation x took over"))))).toBe("controller_superseded");
    expect(await superviseUntilReceipt(ctx(far), conn(() => Promise.reject(new SupervisorConnectionClosedError("by the supervisor"))))).toBe("supervisor_lost");
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it("polls progress once per poll interval and leaves no timer behind when the receipt arrives", async () => {
    vi.useFakeTimers();
    let polls = 0;
    let deliver: (r: ReturnType<typeof receipt>) => void = () => undefined;
    const c = ctx(Date.now() + 3_600_000);
    (c.deps.jobs as unknown as { reportProgress: () => Promise<{ cancelRequested: boolean }> }).reportProgress = async () => {
      polls++;
      return { cancelRequested: false };
    };
    const pending = superviseUntilReceipt(c, { receipt: () => new Promise((r) => { deliver = r; }), cancel: async () => ({}) } as unknown as SupervisorConnection);
    await vi.advanceTimersByTimeAsync(35_000);
    expect(polls).toBe(3);
    // One tick and the runner's own deadline are pending while it waits, nothing more.
    expect(vi.getTimerCount()).toBe(2);
    deliver(receipt({ outcome: Outcome.SUCCEEDED }));
    expect((await pending) as unknown).toMatchObject({ outcome: Outcome.SUCCEEDED });
    expect(vi.getTimerCount()).toBe(0);
  });
});
