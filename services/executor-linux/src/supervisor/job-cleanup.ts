import type { NativeSystem } from "../native/native-system.js";
import type { ProcFs, ProcStat } from "../native/proc-fs.js";
import { runCleanup, type CleanupResult } from "./cleanup.js";
import { recordCleanupExits, type CommandState } from "./command-state.js";
import type { Containment } from "./containment.js";
import type { Logger } from "./log.js";
import type { DescendantLedger } from "./process-tree.js";
import type { Reaper } from "./reaper.js";
import { MIN_KILL_MARGIN_MS } from "./spec.js";

/** What one job's cleanup runs with. */
export interface JobCleanupInput {
  readonly native: NativeSystem;
  readonly proc: ProcFs;
  readonly reaper: Reaper;
  readonly rootPid: number;
  readonly ledger: DescendantLedger;
  readonly now: () => number;
  readonly containment: Containment | undefined;
  readonly commands: readonly CommandState[];
  /** Monotonic time by which ECHILD must be observed. */
  readonly budgetEnd: number;
  /** The job's deadline (monotonic): the cgroup's emptiness is awaited until then at most. */
  readonly deadline: number;
  readonly graceMs: number;
  /** The leftover check's scan, used as the first round. */
  readonly leftoverScan: readonly ProcStat[] | undefined;
}

/**
 * Cleans up the job's tree (runCleanup; the cgroup's cgroup.kill at the SIGKILL phase), records
 * how each direct command stopped by the cleanup ended, and with a cgroup checks the second
 * oracle beside ECHILD: the cgroup is empty.
 */
export async function cleanUpJob(x: JobCleanupInput): Promise<CleanupResult> {
  const { containment } = x;
  const result = await runCleanup(
    {
      native: x.native,
      proc: x.proc,
      reaper: x.reaper,
      rootPid: x.rootPid,
      ledger: x.ledger,
      now: x.now,
      sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
      ...(containment !== undefined ? { onKillPhase: () => containment.killAll() } : {}),
    },
    {
      budgetEnd: x.budgetEnd,
      graceMs: x.graceMs,
      killMarginMs: MIN_KILL_MARGIN_MS,
      ...(x.leftoverScan !== undefined ? { initialScan: x.leftoverScan } : {}),
    },
  );
  // A direct command stopped by the cleanup was reaped there: record how it ended.
  recordCleanupExits([...x.commands], x.reaper, containment);
  if (containment !== undefined) {
    // The second oracle beside ECHILD: the job's cgroup must be empty as well.
    if (result.echild) await containment.verifyEmpty(x.now, x.deadline);
    containment.finish();
  }
  return result;
}

/** Waits for EOF on every journal's pipe (briefly after ECHILD, when no writer is left) and abandons those still open. */
export async function drainJournals(commands: readonly CommandState[], echild: boolean, log: Logger): Promise<void> {
  log.debug({ event: "drain_started" }, "waiting for EOF on the pipes");
  const journals = commands.flatMap((c) => [c.stdout, c.stderr]).filter((j) => j !== undefined);
  // After ECHILD no writer is left, so EOF is imminent; without it a survivor may hold a pipe.
  await Promise.all(journals.map((j) => j.waitEnded(echild ? 1000 : 0)));
  for (const j of journals) if (!j.ended) j.abandon();
}
