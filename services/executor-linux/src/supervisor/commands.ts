import { join } from "node:path";
import type { SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { NativeSystem } from "../native/native-system.js";
import { signalDisposition, type ProcFs, type ProcStat } from "../native/proc-fs.js";
import type { CommandState } from "./command-state.js";
import type { Containment } from "./containment.js";
import { OutputBudget, StreamJournal } from "./journal.js";
import type { Logger } from "./log.js";
import { DescendantLedger, findDescendants, liveOnly } from "./process-tree.js";
import type { Reaper } from "./reaper.js";
import { journalFileName } from "./run-dir.js";
import type { StorageNotes } from "./storage.js";
import type { Wake } from "./wake.js";

const SIGCHLD = 17;

/** What the command runner shares with its supervisor. */
export interface CommandRunnerOptions {
  readonly native: NativeSystem;
  readonly proc: ProcFs;
  readonly log: Logger;
  readonly spec: SupervisorSpec;
  readonly reaper: Reaper;
  readonly ledger: DescendantLedger;
  readonly wake: Wake;
  readonly now: () => number;
  readonly selfPid: number;
  readonly budget: OutputBudget;
  readonly streamLimit: number;
  /** Where the journals note writes the storage refused. */
  readonly storage: StorageNotes;
  readonly containment: Containment | undefined;
  /** Backup reap poll while a command runs (ms). */
  readonly reapIntervalMs: number;
}

/**
 * Spawns the job's commands one at a time and watches each to its exit: pipes and journals
 * made ahead of the spawn, the exit seen through a pidfd (a poll as backup), the counters of
 * the job's cgroup, and the descendants that outlived the command.
 */
export class CommandRunner {
  readonly #o: CommandRunnerOptions;
  readonly #envp: readonly string[];
  #leftoverScan: ProcStat[] | undefined;

  /** @param options the supervisor's shared parts */
  constructor(options: CommandRunnerOptions) {
    this.#o = options;
    this.#envp = Object.entries(options.spec.env).map(([k, v]) => `${k}=${v}`);
  }

  /** The /proc scan that found leftovers after the last command (cleanup's first round can use it). */
  get leftoverScan(): ProcStat[] | undefined {
    return this.#leftoverScan;
  }

  /**
   * Runs `c` to its exit or until `stopRequested` (deadline, cancel, fatal error; polled up to
   * `commandsEnd`): "next" when it exited 0 and left nothing behind, else "stop".
   */
  async run(c: CommandState, stopRequested: () => boolean, commandsEnd: number): Promise<"next" | "stop"> {
    const { native, log, reaper, containment } = this.#o;
    const [outW, errW] = this.prepare(c);
    const request = { path: c.spec.argv[0] ?? "", argv: c.spec.argv, envp: this.#envp, cwd: c.spec.cwd, stdoutFd: outW, stderrFd: errW };
    const countersBefore = containment?.counters();
    let spawned;
    try {
      spawned = containment !== undefined ? containment.spawn(request, (r) => native.spawn(r)) : native.spawn(request);
    } finally {
      // Our copies of the write ends must go, or EOF would never come.
      this.closeWriteEnds(c);
    }
    if (!spawned.ok) {
      c.spawnErrno = spawned.errno;
      c.finished = true;
      log.warn({ event: "spawn_failed", command: c.index, errno: spawned.errno }, "command could not start");
      return "stop";
    }
    const pid = spawned.pid;
    c.pid = pid;
    c.startedUnixMs = Date.now();
    reaper.track(pid);
    // The start time beside the pid (an unreaped child: the pid is still its own), so an executor
    // that finds this supervisor dead can tell the command's process from a later one on that pid.
    const childStartTimeTicks = this.#o.proc.readStat(pid)?.startTimeTicks ?? "";
    log.info({ event: "spawned", command: c.index, name: c.spec.name, childPid: pid, childStartTimeTicks }, "command started");
    if ((await this.#watch(pid, stopRequested, commandsEnd)) === "stop") return "stop";
    const exit = reaper.exitOf(pid);
    c.exit = exit?.status;
    c.endedUnixMs = exit?.reapedUnixMs ?? Date.now();
    c.finished = true;
    this.#noteCounters(c, countersBefore);
    c.leftovers = await this.#countLeftovers();
    log.info({ event: "exited", command: c.index, childPid: pid, status: c.exit, leftovers: c.leftovers }, "command exited");
    if (c.leftovers > 0) return "stop";
    return c.exit?.kind === "exited" && c.exit.code === 0 ? "next" : "stop";
  }

  /** Waits for `pid`'s exit: "exited" once reaped, "stop" when a stop was requested first. */
  async #watch(pid: number, stopRequested: () => boolean, commandsEnd: number): Promise<"exited" | "stop"> {
    const { native, reaper, wake } = this.#o;
    // An unreaped child cannot be reused, so this pidfd needs no identity check. Its
    // readability (process exit) wakes the loop at once; the timer is only a backup.
    const pidfd = native.pidfdOpen(pid);
    const watch = pidfd.ok ? native.watchReadable(pidfd.fd, () => wake.notify()) : undefined;
    try {
      for (;;) {
        reaper.reapAll();
        if (reaper.exitOf(pid) !== undefined) return "exited";
        if (stopRequested()) return "stop";
        await wake.wait(Math.min(this.#o.reapIntervalMs, commandsEnd - this.#o.now()));
      }
    } finally {
      watch?.close();
      if (pidfd.ok) native.close(pidfd.fd);
    }
  }

  #noteCounters(c: CommandState, before: { oomKills: number; pidLimitHits: number } | undefined): void {
    const containment = this.#o.containment;
    if (containment === undefined || before === undefined) return;
    const after = containment.counters();
    c.oomKills = after.oomKills - before.oomKills;
    c.pidLimitHits = after.pidLimitHits - before.pidLimitHits;
  }

  /**
   * Journals and pipes of a command, made ahead of its spawn (command 0 while waiting for GO)
   * so that GO → spawn is only the spawn. The read ends are already being drained; returns
   * the write ends (closed by closeWriteEnds right after the spawn, or at cleanup).
   */
  prepare(c: CommandState): readonly [number, number] {
    if (c.writeFds !== undefined) return c.writeFds;
    const { native, proc, spec } = this.#o;
    // Re-checked before every command (cheap, and off the GO → spawn path for the first): if
    // anything in this process had installed a SIGCHLD handler (e.g. node's child_process),
    // something else could reap our children.
    if (signalDisposition(proc.readSelfStatus(), SIGCHLD) !== "default") {
      throw new Error("SIGCHLD is no longer at its default disposition in the supervisor");
    }
    c.stdout = new StreamJournal(join(spec.runDir, journalFileName(c.index, "stdout")), this.#o.streamLimit, this.#o.budget, this.#o.storage);
    c.stderr = new StreamJournal(join(spec.runDir, journalFileName(c.index, "stderr")), this.#o.streamLimit, this.#o.budget, this.#o.storage);
    const [outR, outW] = native.pipe();
    const [errR, errW] = native.pipe();
    c.stdout.attach(outR);
    c.stderr.attach(errR);
    c.writeFds = [outW, errW];
    return c.writeFds;
  }

  /** Closes this process's copies of a command's pipe write ends (idempotent). */
  closeWriteEnds(c: CommandState): void {
    if (c.writeFds === undefined) return;
    this.#o.native.close(c.writeFds[0]);
    this.#o.native.close(c.writeFds[1]);
    c.writeFds = undefined;
  }

  /**
   * Live descendants right after a direct command exited: they outlived it. ECHILD at once
   * proves there are none without a /proc scan. A scan is not atomic — a chain member can
   * fork and exit between readdir and its stat read, leaving only a zombie in view — so
   * while children exist but the scan shows nobody alive, reap and rescan (bounded).
   */
  async #countLeftovers(): Promise<number> {
    const until = this.#o.now() + 200;
    for (;;) {
      if (this.#o.reaper.reapAll().echild) return 0;
      const all = findDescendants(this.#o.proc, this.#o.selfPid);
      this.#o.ledger.note(all);
      const live = liveOnly(all).length;
      if (live > 0) {
        // Cleanup starts right after this: its first round can use this scan.
        this.#leftoverScan = all;
        return live;
      }
      if (this.#o.now() >= until) {
        // Children exist that no scan showed alive: report one rather than none.
        this.#o.log.warn({ event: "leftover_scan_inconclusive" }, "children exist but no scan showed them alive");
        return 1;
      }
      await new Promise((r) => setTimeout(r, 1));
    }
  }
}
