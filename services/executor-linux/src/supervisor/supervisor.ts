import { createHash, randomBytes } from "node:crypto";
import { constants as osConstants } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import {
  CancelAckSchema,
  CleanupStatsSchema,
  CommandResultSchema,
  ControllerLossPolicy,
  GoAckSchema,
  HelloAckSchema,
  Outcome,
  OwnerMarkerSchema,
  Phase,
  ReadOutputResponseSchema,
  ReceiptSchema,
  StatusResponseSchema,
  Stream,
  StreamStatsSchema,
  type CancelAck,
  type CommandResult,
  type CommandSpec,
  type GoAck,
  type HelloAck,
  type OwnerMarker,
  type ReadOutputRequest,
  type ReadOutputResponse,
  type Receipt,
  type StatusResponse,
  type SupervisorSpec,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { Logger } from "./log.js";
import type { ExitStatus, NativeSystem } from "../native/native-system.js";
import { signalDisposition, type ProcFs, type ProcStat } from "../native/proc-fs.js";
import { writeFilesAtomicAsync } from "./atomic-file.js";
import { runCleanup, type CleanupResult } from "./cleanup.js";
import type { Containment } from "./containment.js";
import { ControlServer, HELLO_TIMEOUT_MS } from "./control-server.js";
import { DescendantLedger, findDescendants, liveOnly } from "./process-tree.js";
import { Reaper } from "./reaper.js";
import { outcomeName, receiptToJson } from "./receipt-json.js";
import { RunDirFiles, journalFileName } from "./run-dir.js";
import { MIN_KILL_MARGIN_MS, controllerLossGraceMs, effectiveLimits } from "./spec.js";
import { OutputBudget, StreamJournal } from "./journal.js";
import { Wake } from "./wake.js";

/** Everything a supervisor needs; the real values are wired in main.ts, fakes in tests. */
export interface SupervisorOptions {
  readonly native: NativeSystem;
  readonly proc: ProcFs;
  readonly log: Logger;
  readonly spec: SupervisorSpec;
  /** SHA-256 (hex) of the spec bytes the supervisor was launched with. */
  readonly specSha256: string;
  /** SHA-256 (hex) of the supervisor's own code (supervisorSourceSha256). */
  readonly sourceSha256: string;
  readonly bootId: string;
  /** Start time (field 22) of the supervisor process. */
  readonly selfStartTimeTicks: bigint;
  /** The supervisor's PID namespace (readlink /proc/self/ns/pid); "" when unreadable. */
  readonly pidNamespace?: string;
  /** Monotonic clock in ms (default performance.now). */
  readonly now?: () => number;
  /**
   * How long the supervisor stays reachable after writing its receipt (default 2000 ms).
   * It leaves earlier once a controller fetched the receipt and every connection closed.
   */
  readonly lingerMs?: number;
  /** Backup reap poll while a command runs (default 20 ms); exits are seen at once via pidfd. */
  readonly reapIntervalMs?: number;
  /** Job user and per-job cgroup (containment.ts), when the spec asks for them. */
  readonly containment?: Containment;
  /**
   * Files of the run directory written complete but not yet flushed (a warm supervisor's
   * spec.binpb): fsynced with the token and markers, before the owner marker appears.
   */
  readonly unflushed?: readonly string[] | undefined;
}

interface CommandState {
  readonly index: number;
  readonly spec: CommandSpec;
  stdout: StreamJournal | undefined;
  stderr: StreamJournal | undefined;
  pid: number | undefined;
  startedUnixMs: number;
  endedUnixMs: number;
  exit: ExitStatus | undefined;
  spawnErrno: number | undefined;
  leftovers: number;
  finished: boolean;
  /** Pipe write ends made by #prepare and not yet handed to a spawn. */
  writeFds: readonly [number, number] | undefined;
  /** OOM kills and pid-limit hits in the job's cgroup while this command ran. */
  oomKills: number;
  pidLimitHits: number;
}

const SIGCHLD = 17;

/**
 * Cleanup time a supervisor takes when it finds itself already past its deadline (it was
 * stopped, e.g. SIGSTOP from the command, or starved): the deadline is lost either way — the
 * receipt says unknown, `deadline_overrun` — but the tree is still killed and reaped.
 */
export const LATE_CLEANUP_MS = 2000;

const SIGNAL_NAMES: ReadonlyMap<number, string> = new Map(
  Object.entries(osConstants.signals).map(([name, num]) => [num, name] as const),
);

/**
 * One job's supervisor: the only process that spawns the job's commands and the only one
 * that reaps. Lifecycle: control socket + owner marker → start barrier (GO) → the fixed
 * command sequence (stopping after a failing step) → cleanup to ECHILD → atomic receipt →
 * bounded linger → return. Nothing is spawned once cleanup has begun.
 */
export class Supervisor {
  readonly #o: SupervisorOptions;
  readonly #now: () => number;
  readonly #wake = new Wake();
  readonly #reaper: Reaper;
  readonly #ledger = new DescendantLedger();
  readonly #commands: CommandState[];
  readonly #budget: OutputBudget;
  readonly #streamLimit: number;
  readonly #deadline: number;
  readonly #commandsEnd: number;
  readonly #selfPid: number;
  readonly #startedUnixMs = Date.now();
  readonly #envp: readonly string[];
  #phase: Phase;
  #marker: OwnerMarker | undefined;
  #server: ControlServer | undefined;
  #goUnixMs = 0;
  #cancelReason: string | undefined;
  #cancelEffective = false;
  #cancelledBeforeGo = false;
  #deadlineReached = false;
  #spawnClosed = false;
  #current = -1;
  #fatal: unknown;
  #leftoverScan: ProcStat[] | undefined;
  #receipt: Receipt | undefined;
  #receiptDelivered = false;
  readonly #receiptWaiters: Array<(r: Receipt) => void> = [];
  /** Policy CANCEL: armed while no controller is attached and the job has not reached cleanup. */
  #lossTimer: NodeJS.Timeout | undefined;
  #controllerLost = false;
  /** Cleanup began after the deadline itself had passed. */
  #overran = false;

  /** Prepares (nothing runs until run()). */
  constructor(options: SupervisorOptions) {
    this.#o = options;
    this.#now = options.now ?? (() => performance.now());
    this.#reaper = new Reaper(options.native);
    this.#selfPid = options.native.getpid();
    const limits = effectiveLimits(options.spec);
    this.#budget = new OutputBudget(limits.outputLimitBytes);
    this.#streamLimit = limits.streamLimitBytes;
    // Wall deadline turned monotonic once, so a clock step cannot stretch or cut the budget.
    this.#deadline = this.#now() + (Number(options.spec.deadlineUnixMs) - Date.now());
    this.#commandsEnd = this.#deadline - options.spec.cleanupReserveMs;
    this.#phase = options.spec.startBarrier ? Phase.WAITING_FOR_GO : Phase.RUNNING;
    this.#commands = options.spec.commands.map((spec, index) => ({
      index,
      spec,
      stdout: undefined,
      stderr: undefined,
      pid: undefined,
      startedUnixMs: 0,
      endedUnixMs: 0,
      exit: undefined,
      spawnErrno: undefined,
      leftovers: 0,
      finished: false,
      writeFds: undefined,
      oomKills: 0,
      pidLimitHits: 0,
    }));
    this.#envp = Object.entries(options.spec.env).map(([k, v]) => `${k}=${v}`);
  }

  /** The current phase. */
  get phase(): Phase {
    return this.#phase;
  }

  /** Records a fatal internal error: the run heads to cleanup and the outcome is unknown. */
  fail(err: unknown): void {
    this.#fatal ??= err;
    this.#wake.notify();
  }

  /** Runs the job to its receipt (written atomically before this resolves). */
  async run(): Promise<Receipt> {
    const { spec, log } = this.#o;
    const runDir = spec.runDir;
    const token = randomBytes(32).toString("hex");
    this.#server = new ControlServer({
      socketPath: join(runDir, RunDirFiles.socket),
      token,
      native: this.#o.native,
      log,
      handlers: {
        helloAck: (previous) => this.#helloAck(previous),
        go: () => this.go(),
        cancel: (reason) => this.cancel(reason),
        status: () => this.status(),
        commandCount: () => this.#commands.length,
        readOutput: (r) => this.readOutput(r),
        receipt: (wait) => this.receipt(wait),
        receiptDelivered: () => {
          this.#receiptDelivered = true;
          this.#wake.notify();
        },
        controllersChanged: (attached) => this.#controllersChanged(attached),
      },
    });
    await this.#server.listen();
    // The first controller must attach within the HELLO timeout (it connects right after launch).
    this.#armLossTimer(Math.max(HELLO_TIMEOUT_MS, controllerLossGraceMs(spec)));
    this.#marker = create(OwnerMarkerSchema, {
      supervisor: { pid: this.#selfPid, startTimeTicks: this.#o.selfStartTimeTicks, bootId: this.#o.bootId },
      jobId: spec.jobId,
      attempt: spec.attempt,
      fence: spec.fence,
      supervisorSourceSha256: this.#o.sourceSha256,
      socketPath: join(runDir, RunDirFiles.socket),
      runDir,
      writtenUnixMs: BigInt(Date.now()),
      specSha256: this.#o.specSha256,
      pidNamespace: this.#o.pidNamespace ?? "",
      observerPidNamespace: spec.observerPidNamespace,
      // What the executor bound the job to (approval, authority, posture, dispatch), verbatim.
      bindings: spec.bindings,
      // The token's hash, never the token: recovery compares it with the receipt's marker.
      tokenSha256: createHash("sha256").update(token).digest("hex"),
    });
    // One flush for the three (issue 11), and for a warm supervisor's spec.binpb: each file
    // fsynced before its rename, all in parallel, then one directory fsync; the binary marker
    // renamed last, since its appearance is what launchSupervisor waits for (the token a
    // controller needs is in place by then). The controller may HELLO and record the marker while
    // the directory flush runs; no command starts before it returns (GO is only read below).
    await writeFilesAtomicAsync(runDir, [
      { name: RunDirFiles.token, data: token, mode: 0o600 },
      { name: RunDirFiles.markerJson, data: `${toJsonString(OwnerMarkerSchema, this.#marker)}\n` },
      { name: RunDirFiles.marker, data: toBinary(OwnerMarkerSchema, this.#marker) },
    ], { flushAlso: this.#o.unflushed });
    log.info({ event: "marker_written", startBarrier: spec.startBarrier }, "owner marker durable");

    let cleanup: CleanupResult | undefined;
    try {
      const first = this.#commands[0];
      if (first !== undefined) this.#prepare(first);
      // Run the receipt path once on the current (empty) state and throw the result away:
      // V8 compiles it now rather than between the last exit and the receipt.
      toBinary(ReceiptSchema, this.#buildReceipt(undefined));
      if (await this.#waitForGo()) {
        for (const command of this.#commands) {
          if (this.#stopRequested()) break;
          if ((await this.#runCommand(command)) === "stop") break;
        }
      }
    } catch (err) {
      this.fail(err);
      log.error({ event: "supervisor_error", err }, "internal error; cleaning up, outcome unknown");
    }
    try {
      cleanup = await this.#cleanup();
    } catch (err) {
      this.fail(err);
      log.error({ event: "cleanup_error", err }, "cleanup failed; outcome unknown");
    }
    await this.#drainStreams(cleanup?.echild === true);
    this.#disarmLossTimer();
    const receipt = this.#buildReceipt(cleanup);
    log.info({ event: "receipt_built" }, "receipt built; serving it");
    // Served first: the fsyncs below can take tens of ms on a busy disk, and a controller acts
    // on the socket copy. The supervisor never exits before the file is durable, and the phase
    // turns FINISHED only once it is (so FINISHED means receipt.binpb exists).
    this.#receipt = receipt;
    for (const w of this.#receiptWaiters.splice(0)) w(receipt);
    try {
      // The binary receipt first, as before: receipt.json is its human copy.
      await writeFilesAtomicAsync(runDir, [
        { name: RunDirFiles.receipt, data: toBinary(ReceiptSchema, receipt) },
        { name: RunDirFiles.receiptJson, data: `${JSON.stringify(receiptToJson(receipt), null, 2)}\n` },
      ]);
    } catch (err) {
      // Served but not durable: the process exits non-zero (main.ts) and the log says why.
      log.error({ event: "receipt_write_failed", err }, "the receipt could not be written");
      await this.#server.close();
      throw err;
    }
    this.#phase = Phase.FINISHED;
    log.info(
      { event: "receipt_written", outcome: outcomeName(receipt.outcome), reason: receipt.reason, echild: receipt.echildObserved },
      receipt.message,
    );
    await this.#linger();
    await this.#server.close();
    for (const c of this.#commands) {
      c.stdout?.closeFile();
      c.stderr?.closeFile();
    }
    return receipt;
  }

  /** Releases the start barrier (idempotent). */
  go(): GoAck {
    if (this.#phase === Phase.WAITING_FOR_GO && this.#cancelReason === undefined && this.#fatal === undefined) {
      this.#phase = Phase.RUNNING;
      this.#goUnixMs = Date.now();
      this.#wake.notify();
    }
    const released = this.#goUnixMs > 0 || !this.#o.spec.startBarrier;
    return create(GoAckSchema, { started: released && !this.#cancelledBeforeGo, cancelledBeforeGo: this.#cancelledBeforeGo });
  }

  /** Requests cancellation: monotonic, idempotent; before GO the commands never start. */
  cancel(reason: string): CancelAck {
    if (this.#cancelReason === undefined) {
      this.#cancelReason = reason.length > 0 ? reason : "cancelled";
      if (this.#phase === Phase.WAITING_FOR_GO) {
        this.#cancelledBeforeGo = true;
        this.#cancelEffective = true;
      } else if (this.#phase === Phase.RUNNING) {
        this.#cancelEffective = true;
      }
      this.#o.log.info({ event: "cancel_requested", reason: this.#cancelReason, phase: this.#phase }, "cancel requested");
      this.#wake.notify();
    }
    return create(CancelAckSchema, { phase: this.#phase });
  }

  /** Current phase, command, counters and the results of finished commands. */
  status(): StatusResponse {
    const current = this.#commands[this.#current];
    return create(StatusResponseSchema, {
      phase: this.#phase,
      currentCommand: this.#current,
      cancelRequested: this.#cancelReason !== undefined,
      stdoutBytes: BigInt(current?.stdout?.bytes ?? 0),
      stderrBytes: BigInt(current?.stderr?.bytes ?? 0),
      finished: this.#commands.filter((c) => c.finished).map((c) => this.#result(c)),
    });
  }

  /** Reads a command's journal from `offset` (while running and after). */
  async readOutput(request: ReadOutputRequest): Promise<ReadOutputResponse> {
    const command = this.#commands[request.command];
    const journal = request.stream === Stream.STDOUT ? command?.stdout : command?.stderr;
    const base = { stream: request.stream, command: request.command, offset: request.offset };
    if (journal === undefined) {
      // Not started (yet): at the end it never will, so the stream is an empty, closed one.
      return create(ReadOutputResponseSchema, { ...base, keptBytes: 0n, eof: this.#receipt !== undefined });
    }
    const r = await journal.read(Number(request.offset), request.maxBytes);
    return create(ReadOutputResponseSchema, {
      ...base,
      data: r.data,
      keptBytes: BigInt(r.keptBytes),
      eof: r.eof,
      elidedAt: BigInt(r.elidedAt),
      elidedBytes: BigInt(r.elidedBytes),
    });
  }

  /** The receipt; with `wait`, resolves once it has been written. */
  receipt(wait: boolean): Promise<Receipt | undefined> {
    if (this.#receipt !== undefined || !wait) return Promise.resolve(this.#receipt);
    return new Promise((resolve) => this.#receiptWaiters.push(resolve));
  }

  #cancelsOnLoss(): boolean {
    return this.#o.spec.controllerLossPolicy === ControllerLossPolicy.CANCEL;
  }

  /**
   * Policy CANCEL: with no controller attached the loss timer runs; a HELLO stops it. Once the
   * receipt is being built nothing is armed any more (the job is over either way).
   */
  #controllersChanged(attached: number): void {
    if (attached > 0) this.#disarmLossTimer();
    else this.#armLossTimer(controllerLossGraceMs(this.#o.spec));
    // The linger ends as soon as the last controller is gone (not at its next 20 ms poll).
    this.#wake.notify();
  }

  #armLossTimer(ms: number): void {
    if (!this.#cancelsOnLoss() || this.#lossTimer !== undefined || this.#spawnClosed || this.#cancelReason !== undefined) return;
    if ((this.#server?.attachedControllers ?? 0) > 0) return;
    this.#lossTimer = setTimeout(() => {
      this.#lossTimer = undefined;
      if ((this.#server?.attachedControllers ?? 0) > 0 || this.#spawnClosed || this.#cancelReason !== undefined) return;
      this.#controllerLost = true;
      this.#o.log.warn({ event: "controller_lost", graceMs: ms }, "no controller attached within the grace; cancelling (policy cancel)");
      this.cancel(`controller lost: no controller attached for ${ms} ms (policy cancel)`);
    }, ms);
  }

  #disarmLossTimer(): void {
    if (this.#lossTimer === undefined) return;
    clearTimeout(this.#lossTimer);
    this.#lossTimer = undefined;
  }

  #helloAck(previousIncarnationId: string): HelloAck {
    return create(HelloAckSchema, { marker: this.#marker, phase: this.#phase, previousIncarnationId });
  }

  #stopRequested(): boolean {
    if (this.#fatal !== undefined || this.#cancelReason !== undefined) return true;
    if (this.#now() >= this.#commandsEnd) {
      this.#deadlineReached = true;
      return true;
    }
    return false;
  }

  async #waitForGo(): Promise<boolean> {
    if (!this.#o.spec.startBarrier) {
      this.#goUnixMs = Date.now();
      return true;
    }
    for (;;) {
      if (this.#phase === Phase.RUNNING) return !this.#stopRequested();
      if (this.#stopRequested()) {
        if (this.#deadlineReached) this.#o.log.warn({ event: "deadline_before_go" }, "deadline reached before GO");
        return false;
      }
      await this.#wake.wait(this.#commandsEnd - this.#now());
    }
  }

  async #runCommand(c: CommandState): Promise<"next" | "stop"> {
    const { native, log } = this.#o;
    if (this.#spawnClosed) throw new Error("invariant: spawn requested after cleanup began");
    this.#current = c.index;
    const [outW, errW] = this.#prepare(c);
    const request = { path: c.spec.argv[0] ?? "", argv: c.spec.argv, envp: this.#envp, cwd: c.spec.cwd, stdoutFd: outW, stderrFd: errW };
    const containment = this.#o.containment;
    const countersBefore = containment?.counters();
    let spawned;
    try {
      spawned = containment !== undefined ? containment.spawn(request, (r) => native.spawn(r)) : native.spawn(request);
    } finally {
      // Our copies of the write ends must go, or EOF would never come.
      this.#closeWriteEnds(c);
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
    this.#reaper.track(pid);
    log.info({ event: "spawned", command: c.index, name: c.spec.name, childPid: pid }, "command started");

    // An unreaped child cannot be reused, so this pidfd needs no identity check. Its
    // readability (process exit) wakes the loop at once; the timer is only a backup.
    const pidfd = native.pidfdOpen(pid);
    const watch = pidfd.ok ? native.watchReadable(pidfd.fd, () => this.#wake.notify()) : undefined;
    try {
      for (;;) {
        this.#reaper.reapAll();
        if (this.#reaper.exitOf(pid) !== undefined) break;
        if (this.#stopRequested()) return "stop";
        const interval = this.#o.reapIntervalMs ?? 20;
        await this.#wake.wait(Math.min(interval, this.#commandsEnd - this.#now()));
      }
    } finally {
      watch?.close();
      if (pidfd.ok) native.close(pidfd.fd);
    }
    const exit = this.#reaper.exitOf(pid);
    c.exit = exit?.status;
    c.endedUnixMs = exit?.reapedUnixMs ?? Date.now();
    c.finished = true;
    this.#noteCounters(c, countersBefore);
    c.leftovers = await this.#countLeftovers();
    log.info(
      { event: "exited", command: c.index, childPid: pid, status: c.exit, leftovers: c.leftovers },
      "command exited",
    );
    if (c.leftovers > 0) return "stop";
    return c.exit?.kind === "exited" && c.exit.code === 0 ? "next" : "stop";
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
   * the write ends (closed by #closeWriteEnds right after the spawn, or at cleanup).
   */
  #prepare(c: CommandState): readonly [number, number] {
    if (c.writeFds !== undefined) return c.writeFds;
    const { native, proc, spec } = this.#o;
    // Re-checked before every command (cheap, and off the GO → spawn path for the first): if
    // anything in this process had installed a SIGCHLD handler (e.g. node's child_process),
    // something else could reap our children.
    if (signalDisposition(proc.readSelfStatus(), SIGCHLD) !== "default") {
      throw new Error("SIGCHLD is no longer at its default disposition in the supervisor");
    }
    c.stdout = new StreamJournal(join(spec.runDir, journalFileName(c.index, "stdout")), this.#streamLimit, this.#budget);
    c.stderr = new StreamJournal(join(spec.runDir, journalFileName(c.index, "stderr")), this.#streamLimit, this.#budget);
    const [outR, outW] = native.pipe();
    const [errR, errW] = native.pipe();
    c.stdout.attach(outR);
    c.stderr.attach(errR);
    c.writeFds = [outW, errW];
    return c.writeFds;
  }

  #closeWriteEnds(c: CommandState): void {
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
    const until = this.#now() + 200;
    for (;;) {
      if (this.#reaper.reapAll().echild) return 0;
      const all = findDescendants(this.#o.proc, this.#selfPid);
      this.#ledger.note(all);
      const live = liveOnly(all).length;
      if (live > 0) {
        // Cleanup starts right after this: its first round can use this scan.
        this.#leftoverScan = all;
        return live;
      }
      if (this.#now() >= until) {
        // Children exist that no scan showed alive: report one rather than none.
        this.#o.log.warn({ event: "leftover_scan_inconclusive" }, "children exist but no scan showed them alive");
        return 1;
      }
      await new Promise((r) => setTimeout(r, 1));
    }
  }

  async #cleanup(): Promise<CleanupResult> {
    const { native, proc, log, spec } = this.#o;
    this.#spawnClosed = true;
    this.#phase = Phase.CLEANING_UP;
    // A prepared command that never started: its journals see EOF once our write ends go.
    for (const c of this.#commands) this.#closeWriteEnds(c);
    // Past the deadline with something started: the deadline was not kept. Nothing started
    // (e.g. before GO on a slow host) leaves nothing to answer for.
    this.#overran = this.#now() >= this.#deadline && this.#commands.some((c) => c.pid !== undefined);
    if (this.#overran) log.warn({ event: "cleanup_late" }, "cleanup starts past the deadline; SIGKILL rounds for up to the late-cleanup time");
    log.info({ event: "cleanup_started" }, "cleanup started");
    const result = await runCleanup(
      {
        native,
        proc,
        reaper: this.#reaper,
        rootPid: this.#selfPid,
        ledger: this.#ledger,
        now: this.#now,
        sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
        ...(this.#o.containment !== undefined ? { onKillPhase: () => this.#o.containment?.killAll() } : {}),
      },
      {
        // Never beyond the deadline, unless it has already passed: then a bounded late cleanup.
        budgetEnd: this.#overran ? this.#now() + LATE_CLEANUP_MS : this.#deadline,
        graceMs: this.#overran ? 0 : spec.graceMs,
        killMarginMs: MIN_KILL_MARGIN_MS,
        ...(this.#leftoverScan !== undefined ? { initialScan: this.#leftoverScan } : {}),
      },
    );
    // A direct command stopped by the cleanup was reaped there: record how it ended.
    const containment = this.#o.containment;
    for (const c of this.#commands) {
      if (c.pid === undefined || c.finished) continue;
      const exit = this.#reaper.exitOf(c.pid);
      if (exit !== undefined) {
        c.exit = exit.status;
        c.endedUnixMs = exit.reapedUnixMs;
        c.finished = true;
        if (containment !== undefined) {
          // Counted since the job began: only this command was running.
          const total = containment.counters();
          const earlier = this.#commands.filter((o) => o !== c);
          c.oomKills = total.oomKills - earlier.reduce((n, o) => n + o.oomKills, 0);
          c.pidLimitHits = total.pidLimitHits - earlier.reduce((n, o) => n + o.pidLimitHits, 0);
        }
      }
    }
    if (containment !== undefined) {
      // The second oracle beside ECHILD: the job's cgroup must be empty as well.
      if (result.echild) await containment.verifyEmpty(this.#now, this.#deadline);
      containment.finish();
    }
    log.info({ event: "cleanup_finished", ...result }, result.echild ? "ECHILD observed" : "cleanup budget ran out");
    return result;
  }

  async #drainStreams(echild: boolean): Promise<void> {
    this.#o.log.debug({ event: "drain_started" }, "waiting for EOF on the pipes");
    const journals = this.#commands.flatMap((c) => [c.stdout, c.stderr]).filter((j) => j !== undefined);
    // After ECHILD no writer is left, so EOF is imminent; without it a survivor may hold a pipe.
    await Promise.all(journals.map((j) => j.waitEnded(echild ? 1000 : 0)));
    for (const j of journals) if (!j.ended) j.abandon();
  }

  #result(c: CommandState): CommandResult {
    const empty = create(StreamStatsSchema, {});
    const exit = c.exit;
    return create(CommandResultSchema, {
      name: c.spec.name,
      argv: c.spec.argv,
      started: c.pid !== undefined,
      exitCode: exit?.kind === "exited" ? exit.code : undefined,
      signal: exit?.kind === "signaled" ? (SIGNAL_NAMES.get(exit.signal) ?? `SIG${exit.signal}`) : undefined,
      startedUnixMs: BigInt(c.startedUnixMs),
      endedUnixMs: BigInt(c.endedUnixMs),
      stdout: c.stdout?.stats() ?? empty,
      stderr: c.stderr?.stats() ?? empty,
      leftoverDescendants: c.leftovers,
      oomKills: c.oomKills,
      pidLimitHits: c.pidLimitHits,
    });
  }

  #buildReceipt(cleanup: CleanupResult | undefined): Receipt {
    const results = this.#commands.map((c) => this.#result(c));
    const leftovers = this.#commands.reduce((n, c) => n + c.leftovers, 0);
    const echild = cleanup?.echild === true;
    const spawnFailed = this.#commands.find((c) => c.spawnErrno !== undefined);
    const failed = this.#commands.find((c) => c.exit !== undefined && !(c.exit.kind === "exited" && c.exit.code === 0));
    let outcome: Outcome;
    let reason: string;
    let message: string;
    if (this.#fatal !== undefined) {
      outcome = Outcome.UNKNOWN;
      reason = "supervisor_error";
      message = `The supervisor hit an internal error (${String((this.#fatal as Error)?.message ?? this.#fatal)}); ${echild ? "cleanup reached ECHILD but the task outcome cannot be proved" : "cleanup could not be proved"}.`;
    } else if (this.#overran) {
      outcome = Outcome.UNKNOWN;
      reason = "deadline_overrun";
      message = `The supervisor could not act before its deadline (it was stopped or starved); cleanup started late and ${echild ? "reached ECHILD after the deadline" : "did not reach ECHILD"}.`;
    } else if (!echild) {
      outcome = Outcome.UNKNOWN;
      reason = "cleanup_unproved";
      message = "The cleanup budget ran out before waitpid returned ECHILD; processes may remain.";
    } else if (this.#o.containment?.cgroup !== undefined && this.#o.containment.problem !== "") {
      // ECHILD alone is not enough with a job cgroup: "populated 0" is the second required oracle.
      const problem = this.#o.containment.problem;
      outcome = Outcome.UNKNOWN;
      reason = problem.slice(0, problem.indexOf(":"));
      message = `ECHILD was observed, but the job's cgroup did not prove empty (${problem}).`;
    } else if (this.#controllerLost && this.#cancelEffective) {
      outcome = Outcome.CANCELLED;
      reason = "controller_lost";
      message = this.#cancelledBeforeGo
        ? "The controller was gone before GO and the policy is cancel; no command started."
        : "The controller's connection was gone for the grace and the policy is cancel; the tree was terminated and reaped to ECHILD.";
    } else if (this.#cancelledBeforeGo) {
      outcome = Outcome.CANCELLED;
      reason = "cancelled_before_go";
      message = `Cancelled before GO (${this.#cancelReason ?? ""}); no command started.`;
    } else if (this.#cancelEffective) {
      outcome = Outcome.CANCELLED;
      reason = "cancelled";
      message = `Cancelled while running (${this.#cancelReason ?? ""}); the tree was terminated and reaped to ECHILD.`;
    } else if (this.#deadlineReached) {
      outcome = Outcome.TIMED_OUT;
      reason = this.#goUnixMs === 0 ? "deadline_before_go" : "deadline";
      message = "The wall deadline (minus the cleanup reserve) was reached; the tree was terminated and reaped to ECHILD.";
    } else if (leftovers > 0) {
      outcome = Outcome.REJECTED_LEFTOVER_DESCENDANTS;
      reason = "leftover_descendants";
      message = `${leftovers} descendant(s) outlived the direct command; they were terminated and reaped, and the execution is rejected.`;
    } else if (spawnFailed !== undefined) {
      outcome = Outcome.FAILED;
      reason = "spawn_failed";
      message = `Command ${spawnFailed.spec.name} could not start (errno ${spawnFailed.spawnErrno}).`;
    } else if (failed !== undefined) {
      outcome = Outcome.FAILED;
      const how = failed.exit?.kind === "exited" ? `exit code ${failed.exit.code}` : `signal ${failed.exit?.signal}`;
      if (failed.oomKills > 0) {
        reason = "memory_limit_exceeded";
        message = `Command ${failed.spec.name} ended with ${how} after the kernel OOM-killed ${failed.oomKills} process(es) at the job's memory ceiling; later commands did not run.`;
      } else if (failed.pidLimitHits > 0) {
        reason = "pid_limit_reached";
        message = `Command ${failed.spec.name} ended with ${how} after ${failed.pidLimitHits} fork(s) were refused at the job's pids ceiling; later commands did not run.`;
      } else {
        reason = "command_failed";
        message = `Command ${failed.spec.name} ended with ${how}; later commands did not run.`;
      }
    } else {
      outcome = Outcome.SUCCEEDED;
      reason = "succeeded";
      message = "Every command exited 0, nothing outlived them, and ECHILD was observed.";
    }
    const finishedUnixMs = Date.now();
    const from = this.#goUnixMs > 0 ? this.#goUnixMs : this.#startedUnixMs;
    const kept = results.reduce((n, r) => n + (r.stdout?.keptBytes ?? 0n) + (r.stderr?.keptBytes ?? 0n), 0n);
    return create(ReceiptSchema, {
      outcome,
      reason,
      message,
      commands: results,
      cleanup: create(CleanupStatsSchema, {
        descendantsFound: this.#ledger.found,
        signalledTerm: cleanup?.signalledTerm ?? 0,
        signalledKill: cleanup?.signalledKill ?? 0,
        reaped: this.#reaper.reapedOthers + this.#commands.filter((c) => c.pid !== undefined && this.#reaper.exitOf(c.pid) !== undefined).length,
        identityRefusals: cleanup?.identityRefusals ?? 0,
        echildObserved: echild,
        cleanupMs: cleanup?.cleanupMs ?? 0,
        rounds: cleanup?.rounds ?? 0,
      }),
      leftoverDescendants: leftovers,
      echildObserved: echild,
      cancelledBeforeGo: this.#cancelledBeforeGo,
      cancelRequested: this.#cancelReason !== undefined,
      deadlineReached: this.#deadlineReached,
      marker: this.#marker,
      goUnixMs: BigInt(this.#goUnixMs),
      finishedUnixMs: BigInt(finishedUnixMs),
      durationMs: Math.max(0, finishedUnixMs - from),
      outputKeptBytes: kept,
      containment: this.#o.containment?.report(),
      controllerLossPolicy: this.#cancelsOnLoss() ? ControllerLossPolicy.CANCEL : ControllerLossPolicy.KEEP,
      controllerLost: this.#controllerLost,
    });
  }

  async #linger(): Promise<void> {
    const until = this.#now() + (this.#o.lingerMs ?? 2000);
    while (this.#now() < until) {
      if (this.#receiptDelivered && (this.#server?.openConnections ?? 0) === 0) return;
      await this.#wake.wait(Math.min(20, until - this.#now()));
    }
  }
}
