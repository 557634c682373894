import { Outcome } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { CommandState } from "./command-state.js";

/** What the supervisor knows when it builds the receipt, for the outcome decision. */
export interface OutcomeFacts {
  /** An internal error, when one happened. */
  readonly fatal: unknown;
  /** Cleanup began after the deadline itself had passed. */
  readonly overran: boolean;
  readonly echild: boolean;
  /** With a job cgroup: why it did not prove empty ("" when it did); undefined without one. */
  readonly cgroupProblem: string | undefined;
  readonly controllerLost: boolean;
  readonly cancelEffective: boolean;
  readonly cancelledBeforeGo: boolean;
  readonly cancelReason: string | undefined;
  readonly deadlineReached: boolean;
  readonly goUnixMs: number;
  readonly commands: readonly CommandState[];
}

/** A receipt's outcome, its stable reason code and one sentence. */
export interface OutcomeDecision {
  readonly outcome: Outcome;
  readonly reason: string;
  readonly message: string;
}

const decided = (outcome: Outcome, reason: string, message: string): OutcomeDecision => ({ outcome, reason, message });

/**
 * The receipt's outcome, most conservative first: an internal error, a deadline overrun, no
 * ECHILD, a cgroup that did not prove empty are all unknown; then controller loss, cancellation,
 * the deadline, leftover descendants, a failed spawn, a failing command; else succeeded.
 */
export function decideOutcome(f: OutcomeFacts): OutcomeDecision {
  const leftovers = f.commands.reduce((n, c) => n + c.leftovers, 0);
  if (f.fatal !== undefined) {
    return decided(Outcome.UNKNOWN, "supervisor_error", `The supervisor hit an internal error (${String((f.fatal as Error)?.message ?? f.fatal)}); ${f.echild ? "cleanup reached ECHILD but the task outcome cannot be proved" : "cleanup could not be proved"}.`);
  }
  if (f.overran) {
    return decided(Outcome.UNKNOWN, "deadline_overrun", `The supervisor could not act before its deadline (it was stopped or starved); cleanup started late and ${f.echild ? "reached ECHILD after the deadline" : "did not reach ECHILD"}.`);
  }
  if (!f.echild) return decided(Outcome.UNKNOWN, "cleanup_unproved", "The cleanup budget ran out before waitpid returned ECHILD; processes may remain.");
  if (f.cgroupProblem !== undefined && f.cgroupProblem !== "") {
    // ECHILD alone is not enough with a job cgroup: "populated 0" is the second required oracle.
    const problem = f.cgroupProblem;
    return decided(Outcome.UNKNOWN, problem.slice(0, problem.indexOf(":")), `ECHILD was observed, but the job's cgroup did not prove empty (${problem}).`);
  }
  if (f.controllerLost && f.cancelEffective) {
    return decided(
      Outcome.CANCELLED,
      "controller_lost",
      f.cancelledBeforeGo
        ? "The controller was gone before GO and the policy is cancel; no command started."
        : "The controller's connection was gone for the grace and the policy is cancel; the tree was terminated and reaped to ECHILD.",
    );
  }
  if (f.cancelledBeforeGo) return decided(Outcome.CANCELLED, "cancelled_before_go", `Cancelled before GO (${f.cancelReason ?? ""}); no command started.`);
  if (f.cancelEffective) return decided(Outcome.CANCELLED, "cancelled", `Cancelled while running (${f.cancelReason ?? ""}); the tree was terminated and reaped to ECHILD.`);
  if (f.deadlineReached) {
    return decided(Outcome.TIMED_OUT, f.goUnixMs === 0 ? "deadline_before_go" : "deadline", "The wall deadline (minus the cleanup reserve) was reached; the tree was terminated and reaped to ECHILD.");
  }
  if (leftovers > 0) {
    return decided(Outcome.REJECTED_LEFTOVER_DESCENDANTS, "leftover_descendants", `${leftovers} descendant(s) outlived the direct command; they were terminated and reaped, and the execution is rejected.`);
  }
  const spawnFailed = f.commands.find((c) => c.spawnErrno !== undefined);
  if (spawnFailed !== undefined) return decided(Outcome.FAILED, "spawn_failed", `Command ${spawnFailed.spec.name} could not start (errno ${spawnFailed.spawnErrno}).`);
  const failed = f.commands.find((c) => c.exit !== undefined && !(c.exit.kind === "exited" && c.exit.code === 0));
  if (failed !== undefined) {
    const how = failed.exit?.kind === "exited" ? `exit code ${failed.exit.code}` : `signal ${failed.exit?.signal}`;
    if (failed.oomKills > 0) {
      return decided(Outcome.FAILED, "memory_limit_exceeded", `Command ${failed.spec.name} ended with ${how} after the kernel OOM-killed ${failed.oomKills} process(es) at the job's memory ceiling; later commands did not run.`);
    }
    if (failed.pidLimitHits > 0) {
      return decided(Outcome.FAILED, "pid_limit_reached", `Command ${failed.spec.name} ended with ${how} after ${failed.pidLimitHits} fork(s) were refused at the job's pids ceiling; later commands did not run.`);
    }
    return decided(Outcome.FAILED, "command_failed", `Command ${failed.spec.name} ended with ${how}; later commands did not run.`);
  }
  return decided(Outcome.SUCCEEDED, "succeeded", "Every command exited 0, nothing outlived them, and ECHILD was observed.");
}
