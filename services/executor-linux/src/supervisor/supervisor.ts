// One job's supervisor as one state machine: the control handlers (go, cancel, status, output,
// receipt) and the run loop share its phase and flags, so they stay in one class. Its steps live
// beside it: owner-marker.ts, commands.ts (spawn and watch), job-cleanup.ts and cleanup.ts,
// outcome.ts and receipt-build.ts (the receipt), command-state.ts (per-command state and
// results), journal.ts, control-server.ts with control-answers.ts, loss-timer.ts.
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { create } from "@bufbuild/protobuf";
import {
  CancelAckSchema,
  ControllerLossPolicy,
  GoAckSchema,
  HelloAckSchema,
  Phase,
  type CancelAck,
  type GoAck,
  type HelloAck,
  type OwnerMarker,
  type ReadOutputRequest,
  type ReadOutputResponse,
  type Receipt,
  type StatusResponse,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { CleanupResult } from "./cleanup.js";
import { readCommandOutput, statusOf } from "./control-answers.js";
import { cleanUpJob, drainJournals } from "./job-cleanup.js";
import { newCommandState, type CommandState } from "./command-state.js";
import { CommandRunner } from "./commands.js";
import { ControlServer, HELLO_TIMEOUT_MS } from "./control-server.js";
import { OutputBudget } from "./journal.js";
import { DescendantLedger } from "./process-tree.js";
import { Reaper } from "./reaper.js";
import { receiptSizeBound } from "./receipt-bound.js";
import { ReceiptReserve, writeReceiptFiles } from "./receipt-reserve.js";
import { RunDirFiles } from "./run-dir.js";
import { StorageNotes } from "./storage.js";
import { controllerLossGraceMs, effectiveLimits } from "./spec.js";
import { Wake } from "./wake.js";
import { ownerMarkerOf, writeOwnerFiles } from "./owner-marker.js";
import { buildReceipt } from "./receipt-build.js";
import { LATE_CLEANUP_MS, type SupervisorOptions } from "./supervisor-options.js";
import { LossTimer } from "./loss-timer.js";

export { LATE_CLEANUP_MS, type SupervisorOptions } from "./supervisor-options.js";

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
  readonly #lossTimer: LossTimer;
  #controllerLost = false;
  /** Cleanup began after the deadline itself had passed. */
  #overran = false;
  /** Every write the storage refused (journals, log), for the receipt. */
  readonly #storage: StorageNotes;
  /** The receipt's space, taken with the owner marker (before GO). */
  #reserve: ReceiptReserve | undefined;

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
    this.#storage = options.storage ?? new StorageNotes();
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
      storage: this.#storage,
      containment: options.containment,
      reapIntervalMs: options.reapIntervalMs ?? 20,
    });
    this.#lossTimer = new LossTimer({
      log: options.log,
      cancelsOnLoss: this.#cancelsOnLoss(),
      attached: () => this.#server?.attachedControllers ?? 0,
      armable: () => !this.#spawnClosed && this.#cancelReason === undefined,
      onLost: (ms) => {
        this.#controllerLost = true;
        this.cancel(`controller lost: no controller attached for ${ms} ms (policy cancel)`);
      },
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
    await drainJournals(this.#commands, cleanup?.echild === true, this.#o.log);
    this.#lossTimer.disarm();
    const receipt = this.#buildReceipt(cleanup);
    this.#o.log.info({ event: "receipt_built" }, "receipt built; serving it");
    // Served first: the fsyncs below can take tens of ms on a busy disk, and a controller acts
    // on the socket copy. The supervisor never exits before the file is durable, and the phase
    // turns FINISHED only once it is (so FINISHED means receipt.binpb exists).
    this.#receipt = receipt;
    for (const w of this.#receiptWaiters.splice(0)) w(receipt);
    // Into the space reserved before GO. Not durable: the process exits non-zero (main.ts), the log says why.
    await writeReceiptFiles(this.#o.spec.runDir, this.#reserve, receipt, this.#o.log, () => server.close());
    this.#phase = Phase.FINISHED;
    await this.#linger();
    await server.close();
    for (const c of this.#commands) for (const j of [c.stdout, c.stderr]) j?.closeFile();
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
    this.#lossTimer.arm(Math.max(HELLO_TIMEOUT_MS, controllerLossGraceMs(spec)));
    return server;
  }

  /**
   * Takes the receipt's space (its size is bounded once the marker exists), then writes the
   * capability token and the owner marker (binary and JSON), all durable together. No space for
   * them: InsufficientSpaceError (the process exits 73 before any marker, nothing started).
   */
  async #publishMarker(token: string): Promise<void> {
    const { spec, log } = this.#o;
    this.#marker = ownerMarkerOf(this.#o, this.#selfPid, token);
    // Also the receipt path's first run: V8 compiles it now rather than after the last exit.
    this.#reserve = ReceiptReserve.create(spec.runDir, receiptSizeBound(this.#buildReceipt(undefined)));
    await writeOwnerFiles(spec.runDir, token, this.#marker, [...(this.#o.unflushed ?? []), ...ReceiptReserve.names]);
    log.info({ event: "marker_written", startBarrier: spec.startBarrier }, "owner marker durable");
  }

  /** The start barrier, the command sequence, then cleanup; an internal error is recorded and cleanup still runs. */
  async #runToCleanup(): Promise<CleanupResult | undefined> {
    const { log } = this.#o;
    try {
      const first = this.#commands[0];
      if (first !== undefined) this.#runner.prepare(first);
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
    return statusOf(this.#phase, this.#commands, this.#current, this.#cancelReason !== undefined);
  }

  /** Reads a command's journal from `offset` (while running and after). */
  readOutput(request: ReadOutputRequest): Promise<ReadOutputResponse> {
    return readCommandOutput(this.#commands, request, this.#receipt !== undefined);
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
    if (attached > 0) this.#lossTimer.disarm();
    else this.#lossTimer.arm(controllerLossGraceMs(this.#o.spec));
    // The linger ends as soon as the last controller is gone (not at its next 20 ms poll).
    this.#wake.notify();
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
    const result = await cleanUpJob({
      native,
      proc,
      reaper: this.#reaper,
      rootPid: this.#selfPid,
      ledger: this.#ledger,
      now: this.#now,
      containment: this.#o.containment,
      commands: this.#commands,
      // Never beyond the deadline, unless it has already passed: then a bounded late cleanup.
      budgetEnd: this.#overran ? this.#now() + LATE_CLEANUP_MS : this.#deadline,
      deadline: this.#deadline,
      graceMs: this.#overran ? 0 : spec.graceMs,
      leftoverScan: this.#runner.leftoverScan,
    });
    log.info({ event: "cleanup_finished", ...result }, result.echild ? "ECHILD observed" : "cleanup budget ran out");
    return result;
  }

  #buildReceipt(cleanup: CleanupResult | undefined): Receipt {
    return buildReceipt({
      cleanup,
      commands: this.#commands,
      ledger: this.#ledger,
      reaper: this.#reaper,
      containment: this.#o.containment,
      marker: this.#marker,
      startedUnixMs: this.#startedUnixMs,
      cancelsOnLoss: this.#cancelsOnLoss(),
      state: {
        fatal: this.#fatal,
        overran: this.#overran,
        controllerLost: this.#controllerLost,
        cancelEffective: this.#cancelEffective,
        cancelledBeforeGo: this.#cancelledBeforeGo,
        cancelReason: this.#cancelReason,
        deadlineReached: this.#deadlineReached,
        goUnixMs: this.#goUnixMs,
      },
      storageErrors: this.#storage.lines(),
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
