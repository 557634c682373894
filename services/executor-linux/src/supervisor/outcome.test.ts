import { create } from "@bufbuild/protobuf";
import { CommandSpecSchema, Outcome } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { describe, expect, it } from "vitest";
import { newCommandState, type CommandState } from "./command-state.js";
import { decideOutcome, type OutcomeFacts } from "./outcome.js";

function command(patch: Partial<CommandState> = {}): CommandState {
  return { ...newCommandState(create(CommandSpecSchema, { name: "test", argv: ["/bin/true"] }), 0), pid: 42, finished: true, exit: { kind: "exited", code: 0 }, ...patch };
}

const facts = (patch: Partial<OutcomeFacts> = {}): OutcomeFacts => ({
  fatal: undefined,
  overran: false,
  echild: true,
  cgroupProblem: undefined,
  controllerLost: false,
  cancelEffective: false,
  cancelledBeforeGo: false,
  cancelReason: undefined,
  deadlineReached: false,
  goUnixMs: 1,
  commands: [command()],
  ...patch,
});

describe("decideOutcome: the receipt's outcome, most conservative first", () => {
  it("succeeds only with ECHILD, nothing left over and every command at exit 0", () => {
    expect(decideOutcome(facts())).toMatchObject({ outcome: Outcome.SUCCEEDED, reason: "succeeded" });
    expect(decideOutcome(facts({ echild: false }))).toMatchObject({ outcome: Outcome.UNKNOWN, reason: "cleanup_unproved" });
  });

  it("an internal error or a deadline overrun is unknown even with ECHILD and a cancellation", () => {
    expect(decideOutcome(facts({ fatal: new Error("boom"), cancelEffective: true }))).toMatchObject({ outcome: Outcome.UNKNOWN, reason: "supervisor_error" });
    expect(decideOutcome(facts({ fatal: new Error("boom") })).message).toContain("boom");
    expect(decideOutcome(facts({ overran: true, cancelEffective: true }))).toMatchObject({ outcome: Outcome.UNKNOWN, reason: "deadline_overrun" });
  });

  it("a job cgroup that did not prove empty is unknown with the problem's code", () => {
    expect(decideOutcome(facts({ cgroupProblem: "" }))).toMatchObject({ outcome: Outcome.SUCCEEDED });
    expect(decideOutcome(facts({ cgroupProblem: "cgroup_populated: still 1 process" }))).toMatchObject({ outcome: Outcome.UNKNOWN, reason: "cgroup_populated" });
  });

  it("controller loss, cancellation before and after GO, and the deadline", () => {
    expect(decideOutcome(facts({ controllerLost: true, cancelEffective: true }))).toMatchObject({ outcome: Outcome.CANCELLED, reason: "controller_lost" });
    expect(decideOutcome(facts({ cancelledBeforeGo: true, cancelEffective: true, cancelReason: "x" }))).toMatchObject({ outcome: Outcome.CANCELLED, reason: "cancelled_before_go" });
    expect(decideOutcome(facts({ cancelEffective: true, cancelReason: "why" })).message).toContain("(why)");
    expect(decideOutcome(facts({ deadlineReached: true }))).toMatchObject({ outcome: Outcome.TIMED_OUT, reason: "deadline" });
    expect(decideOutcome(facts({ deadlineReached: true, goUnixMs: 0 }))).toMatchObject({ reason: "deadline_before_go" });
  });

  it("leftovers reject; a failed spawn, an OOM kill, a pid limit and a plain failure each fail with their own reason", () => {
    expect(decideOutcome(facts({ commands: [command({ leftovers: 2 })] }))).toMatchObject({ outcome: Outcome.REJECTED_LEFTOVER_DESCENDANTS, reason: "leftover_descendants" });
    expect(decideOutcome(facts({ commands: [command({ spawnErrno: 2, exit: undefined })] }))).toMatchObject({ outcome: Outcome.FAILED, reason: "spawn_failed" });
    const failing = { exit: { kind: "exited", code: 1 } } as const;
    expect(decideOutcome(facts({ commands: [command({ ...failing, oomKills: 1 })] })).reason).toBe("memory_limit_exceeded");
    expect(decideOutcome(facts({ commands: [command({ ...failing, pidLimitHits: 3 })] })).reason).toBe("pid_limit_reached");
    expect(decideOutcome(facts({ commands: [command(failing)] }))).toMatchObject({ outcome: Outcome.FAILED, reason: "command_failed", message: "Command test ended with exit code 1; later commands did not run." });
  });
});
