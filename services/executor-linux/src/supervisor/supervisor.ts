// One job's supervisor as one state machine: the control handlers (go, cancel, status, output,
// receipt) and the run loop share its phase and flags, so they stay in one class (over 400 lines).
// Its steps live beside it: commands.ts (spawn and watch), cleanup.ts, outcome.ts (the receipt's
// outcome), command-state.ts (per-command state and results), journal.ts, control-server.ts.
import { createHash, randomBytes } from "node:crypto";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import {
  CancelAckSchema,
  CleanupStatsSchema,
  ControllerLossPolicy,
  GoAckSchema,
  HelloAckSchema,
  OwnerMarkerSchema,
  Phase,
  ReadOutputResponseSchema,
  ReceiptSchema,
  StatusResponseSchema,
  Stream,
  type CancelAck,
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
import type { NativeSystem } from "../native/native-system.js";
import type { ProcFs } from "../native/proc-fs.js";
import { writeFilesAtomicAsync } from "./atomic-file.js";
import { runCleanup, type CleanupResult } from "./cleanup.js";
import { commandResult, newCommandState, recordCleanupExits, type CommandState } from "./command-state.js";
import { CommandRunner } from "./commands.js";
import type { Containment } from "./containment.js";
import { ControlServer, HELLO_TIMEOUT_MS } from "./control-server.js";
import { OutputBudget } from "./journal.js";
import { decideOutcome } from "./outcome.js";
import { DescendantLedger } from "./process-tree.js";
import { Reaper } from "./reaper.js";
import { outcomeName, receiptToJson } from "./receipt-json.js";
import { RunDirFiles } from "./run-dir.js";
import { MIN_KILL_MARGIN_MS, controllerLossGraceMs, effectiveLimits } from "./spec.js";
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

/**
 * Cleanup time a supervisor takes when it finds itself already past its deadline (it was
 * stopped, e.g. SIGSTOP from the command, or starved): the deadline is lost either way — the
 * receipt says unknown, `deadline_overrun` — but the tree is still killed and reaped.
 */
export const LATE_CLEANUP_MS = 2000;

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
  readonly #runner: CommandRunner;
  readonly #deadline: number;
  readonly #commandsEnd: number;
  readonly #selfPid: number;
  readonly #startedUnixMs = Date.now();
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
    // Wall deadline turned monotonic once, so a clock step cannot stretch or cut the budget.
    this.#deadline = this.#now() + (Number(options.spec.deadlineUnixMs) - Date.now());
    this.#commandsEnd = this.#deadline - options.spec.cleanupReserveMs;
    this.#phase = options.spec.startBarrier ? Phase.WAITING_FOR_GO : Phase.RUNNING;
    this.#commands = options.spec.commands.map((spec, index) => newCommandState(spec, index));
    this.#runner = new CommandRunner({
      native: options.native,
      proc: options.proc,
      log: options.log,
      spec: options.spec,
      reaper: this.#reaper,
      ledger: this.#ledger,
      wake: this.#wake,
      now: this.#now,
      selfPid: this.#selfPid,
      budget: new OutputBudget(limits.outputLimitBytes),
      streamLimit: limits.streamLimitBytes,
      containment: options.containment,
      reapIntervalMs: options.reapIntervalMs ?? 20,
    });
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
    const token = randomBytes(32).toString("hex");
    const server = await this.#listen(token);
    await this.#publishMarker(token);
    const cleanup = await this.#runToCleanup();
    await this.#drainStreams(cleanup?.echild === true);
    this.#disarmLossTimer();
    const receipt = this.#buildReceipt(cleanup);
    this.#o.log.info({ event: "receipt_built" }, "receipt built; serving it");
    // Served first: the fsyncs below can take tens of ms on a busy disk, and a controller acts
    // on the socket copy. The supervisor never exits before the file is durable, and the phase
    // turns FINISHED only once it is (so FINISHED means receipt.binpb exists).
    this.#receipt = receipt;
    for (const w of this.#receiptWaiters.splice(0)) w(receipt);
    await this.#writeReceipt(receipt, server);
    await this.#linger();
    await server.close();
    for (const c of this.#commands) {
      c.stdout?.closeFile();
      c.stderr?.closeFile();
    }
    return receipt;
  }

  /** Opens the control socket; the first controller must attach within the HELLO timeout. */
  async #listen(token: string): Promise<ControlServer> {
    const { spec, log } = this.#o;
    const server = new ControlServer({
      socketPath: join(spec.runDir, RunDirFiles.socket),
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
    this.#server = server;
    await server.listen();
    // The first controller must attach within the HELLO timeout (it connects right after launch).
    this.#armLossTimer(Math.max(HELLO_TIMEOUT_MS, controllerLossGraceMs(spec)));
    return server;
  }

  /** Writes the capability token and the owner marker (binary and JSON), durable together. */
  async #publishMarker(token: string): Promise<void> {
    const { spec, log } = this.#o;
    const runDir = spec.runDir;
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
  }

  /** The start barrier, the command sequence, then cleanup; an internal error is recorded and cleanup still runs. */
  async #runToCleanup(): Promise<CleanupResult | undefined> {
    const { log } = this.#o;
    try {
      const first = this.#commands[0];
      if (first !== undefined) this.#runner.prepare(first);
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
      return await this.#cleanup();
    } catch (err) {
      this.fail(err);
      log.error({ event: "cleanup_error", err }, "cleanup failed; outcome unknown");
      return undefined;
    }
  }

  /** Writes receipt.binpb then receipt.json atomically; the phase turns FINISHED once they are durable. */
  async #writeReceipt(receipt: Receipt, server: ControlServer): Promise<void> {
    const { spec, log } = this.#o;
    try {
      // The binary receipt first, as before: receipt.json is its human copy.
      await writeFilesAtomicAsync(spec.runDir, [
        { name: RunDirFiles.receipt, data: toBinary(ReceiptSchema, receipt) },
        { name: RunDirFiles.receiptJson, data: `${JSON.stringify(receiptToJson(receipt), null, 2)}\n` },
      ]);
    } catch (err) {
      // Served but not durable: the process exits non-zero (main.ts) and the log says why.
      log.error({ event: "receipt_write_failed", err }, "the receipt could not be written");
      await server.close();
      throw err;
    }
    this.#phase = Phase.FINISHED;
    log.info(
      { event: "receipt_written", outcome: outcomeName(receipt.outcome), reason: receipt.reason, echild: receipt.echildObserved },
      receipt.message,
    );
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
      finished: this.#commands.filter((c) => c.finished).map((c) => commandResult(c)),
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
    if (this.#spawnClosed) throw new Error("invariant: spawn requested after cleanup began");
    this.#current = c.index;
    return this.#runner.run(c, () => this.#stopRequested(), this.#commandsEnd);
  }

  async #cleanup(): Promise<CleanupResult> {
    const { native, proc, log, spec } = this.#o;
    this.#spawnClosed = true;
    this.#phase = Phase.CLEANING_UP;
    // A prepared command that never started: its journals see EOF once our write ends go.
    for (const c of this.#commands) this.#runner.closeWriteEnds(c);
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
        ...(this.#runner.leftoverScan !== undefined ? { initialScan: this.#runner.leftoverScan } : {}),
      },
    );
    // A direct command stopped by the cleanup was reaped there: record how it ended.
    const containment = this.#o.containment;
    recordCleanupExits(this.#commands, this.#reaper, containment);
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

  #buildReceipt(cleanup: CleanupResult | undefined): Receipt {
    const results = this.#commands.map((c) => commandResult(c));
    const leftovers = this.#commands.reduce((n, c) => n + c.leftovers, 0);
    const echild = cleanup?.echild === true;
    const { outcome, reason, message } = decideOutcome({
      fatal: this.#fatal,
      overran: this.#overran,
      echild,
      cgroupProblem: this.#o.containment?.cgroup !== undefined ? this.#o.containment.problem : undefined,
      controllerLost: this.#controllerLost,
      cancelEffective: this.#cancelEffective,
      cancelledBeforeGo: this.#cancelledBeforeGo,
      cancelReason: this.#cancelReason,
      deadlineReached: this.#deadlineReached,
      goUnixMs: this.#goUnixMs,
      commands: this.#commands,
    });
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
