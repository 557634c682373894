import type { NativeSystem } from "../native/native-system.js";
import { Signal } from "../native/native-system.js";
import type { ProcFs, ProcStat } from "../native/proc-fs.js";
import { isExited } from "../native/proc-fs.js";
import { scanTreeWithPidfds, type OpenedDescendant, type PidfdScan } from "./pidfd-scan.js";
import type { DescendantLedger } from "./process-tree.js";
import type { Reaper } from "./reaper.js";
import { signalOpenedPidfd, signalVerified, type SignalOutcome } from "./signaller.js";

/** What the cleanup needs; every piece is injectable for unit tests. */
export interface CleanupDeps {
  readonly native: NativeSystem;
  readonly proc: ProcFs;
  readonly reaper: Reaper;
  /** The supervisor's pid: the root of the tree (a child subreaper). */
  readonly rootPid: number;
  readonly ledger: DescendantLedger;
  /** Monotonic milliseconds. */
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  /** Called once when the cleanup escalates to SIGKILL (the job cgroup's cgroup.kill). */
  readonly onKillPhase?: () => void;
}

/** Cleanup timing. */
export interface CleanupOptions {
  /** Monotonic time by which ECHILD must be observed; past it the outcome is unknown. */
  readonly budgetEnd: number;
  /** Time between SIGTERM and SIGKILL. */
  readonly graceMs: number;
  /** Part of the budget the SIGTERM grace may not eat: kept for SIGKILL rounds and reaping. */
  readonly killMarginMs: number;
  /**
   * Least time between two full scans (default 25 ms). Scans of a big tree are expensive (one
   * /proc/<pid>/stat read per process on the host), so the actual spacing also grows to twice
   * the last scan's duration; in between, only waitpid polls run (cheap, and they see ECHILD).
   */
  readonly rescanMs?: number;
  /**
   * A scan taken just before (the leftover check after a direct command exited) to use as the
   * first round instead of scanning again. Anything forked since is caught by later rounds.
   */
  readonly initialScan?: readonly ProcStat[];
}

/** What one cleanup did. `echild` is the only proof that nothing is left. */
export interface CleanupResult {
  readonly echild: boolean;
  readonly signalledTerm: number;
  readonly signalledKill: number;
  readonly identityRefusals: number;
  readonly rounds: number;
  readonly cleanupMs: number;
  /** Diagnostics (logged, not in the receipt): full scans, and time spent scanning and signalling. */
  readonly scans: number;
  readonly scanMs: number;
  readonly signalMs: number;
}

const key = (p: ProcStat): string => `${p.pid}:${p.startTimeTicks}`;

/**
 * Brings the whole tree under `rootPid` down and proves it: each round scans all of /proc,
 * walks the ppid tree, and signals every live descendant through an identity-checked pidfd
 * (opened before its stat was read, see scanTreeWithPidfds, or signalVerified) —
 * SIGTERM followed by SIGCONT (a stopped process would otherwise keep SIGTERM pending) during
 * the grace, then SIGKILL rounds — reaping in between, until `waitpid(-1, WNOHANG|__WALL)`
 * returns ECHILD. Processes that keep forking are caught by later rounds (their orphans
 * reparent to the subreaper). Never signals anything outside the tree, never extends the
 * budget: when it runs out, `echild` is false and the caller must report unknown.
 */
export async function runCleanup(deps: CleanupDeps, options: CleanupOptions): Promise<CleanupResult> {
  return new CleanupRun(deps, options).run();
}

/** One cleanup's rounds and what they did so far. */
class CleanupRun {
  readonly #d: CleanupDeps;
  readonly #o: CleanupOptions;
  readonly #start: number;
  readonly #minRescanMs: number;
  #lastScanMs = 0;
  #initial: readonly ProcStat[] | undefined;
  readonly #termed = new Set<string>();
  readonly #killed = new Set<string>();
  readonly #refused = new Set<string>();
  #rounds = 0;
  #scans = 0;
  #scanMs = 0;
  #signalMs = 0;
  #termUntil: number | undefined;
  #killPhase = false;

  constructor(deps: CleanupDeps, options: CleanupOptions) {
    this.#d = deps;
    this.#o = options;
    this.#start = deps.now();
    this.#minRescanMs = options.rescanMs ?? 25;
    this.#initial = options.initialScan;
  }

  async run(): Promise<CleanupResult> {
    const { reaper, now } = this.#d;
    const options = this.#o;
    for (;;) {
      if (reaper.reapAll().echild) return this.#finish(true);
      const t = now();
      if (t >= options.budgetEnd) return this.#finish(false);
      const { entries, scan } = this.#nextEntries();
      const rescanMs = Math.max(this.#minRescanMs, 2 * this.#lastScanMs);
      // A zombie leader whose other threads run is live: it is signalled through its own pidfd.
      const live = entries.filter((e) => !isExited(e.stat));
      if (live.length === 0) {
        scan?.close();
        // Only zombies (all children of the root by now) or processes exiting this instant.
        if (await this.#reapFor(5)) return this.#finish(true);
        continue;
      }
      if (this.#termUntil === undefined) {
        this.#rounds++;
        this.#termUntil = options.graceMs > 0 ? Math.min(t + options.graceMs, options.budgetEnd - options.killMarginMs) : t;
      }
      if (t < this.#termUntil) {
        const signalStart = now();
        this.#signalAll(live, scan, [Signal.SIGTERM, Signal.SIGCONT], (e) => this.#termed.has(key(e.stat)), this.#termed);
        this.#signalMs += now() - signalStart;
        if (await this.#reapFor(Math.max(1, Math.min(rescanMs, this.#termUntil - now())))) return this.#finish(true);
        continue;
      }
      this.#rounds++;
      const signalStart = now();
      if (!this.#killPhase) {
        this.#killPhase = true;
        this.#d.onKillPhase?.();
      }
      this.#signalAll(live, scan, [Signal.SIGKILL], () => false, this.#killed);
      this.#signalMs += now() - signalStart;
      if (await this.#reapFor(Math.max(10, 2 * this.#lastScanMs))) return this.#finish(true);
    }
  }

  /** This round's descendants: the caller's initial scan once, then a fresh scan with pidfds. */
  #nextEntries(): { entries: readonly OpenedDescendant[]; scan: PidfdScan | undefined } {
    const { native, proc, now } = this.#d;
    if (this.#initial !== undefined) {
      // A plain scan taken earlier: these get signalVerified (open, then re-check).
      const entries = this.#initial.map((stat) => ({ stat, pidfd: undefined }));
      this.#initial = undefined;
      return { entries, scan: undefined };
    }
    const scanStart = now();
    const scan = scanTreeWithPidfds(native, proc, this.#d.rootPid);
    this.#lastScanMs = now() - scanStart;
    this.#scans++;
    this.#scanMs += this.#lastScanMs;
    this.#d.ledger.note(scan.descendants.map((e) => e.stat));
    return { entries: scan.descendants, scan };
  }

  /**
   * Through the scan's pidfds first, then close them all, then the rest through signalVerified
   * (which needs an fd of its own per process): a tree bigger than the fd limit is still
   * signalled, over more calls. Every pidfd of this round is closed before any await: fds never
   * pile up across rounds.
   */
  #signalAll(live: readonly OpenedDescendant[], scan: PidfdScan | undefined, signals: readonly number[], skip: (e: OpenedDescendant) => boolean, done: Set<string>): void {
    const { native, proc } = this.#d;
    const send = (e: OpenedDescendant): SignalOutcome =>
      e.pidfd !== undefined ? signalOpenedPidfd(native, e.pidfd, signals) : signalVerified(native, proc, e.stat, signals);
    const later: OpenedDescendant[] = [];
    for (const e of live) {
      if (skip(e)) continue;
      if (e.pidfd === undefined) {
        later.push(e);
        continue;
      }
      const r = send(e);
      if (r.kind === "signalled") done.add(key(e.stat));
    }
    scan?.close();
    for (const e of later) {
      const r = send(e);
      if (r.kind === "signalled") done.add(key(e.stat));
      else if (r.kind === "refused") this.#refused.add(key(e.stat));
    }
  }

  /** Reap-only polling between scans: cheap (one syscall), while a scan reads every /proc/<pid>/stat. */
  async #reapFor(ms: number): Promise<boolean> {
    const { reaper, now, sleep } = this.#d;
    const until = now() + ms;
    for (;;) {
      if (reaper.reapAll().echild) return true;
      if (now() >= until || now() >= this.#o.budgetEnd) return false;
      await sleep(1);
    }
  }

  #finish(echild: boolean): CleanupResult {
    return {
      echild,
      signalledTerm: this.#termed.size,
      signalledKill: this.#killed.size,
      identityRefusals: this.#refused.size,
      rounds: this.#rounds,
      cleanupMs: Math.round(this.#d.now() - this.#start),
      scans: this.#scans,
      scanMs: Math.round(this.#scanMs),
      signalMs: Math.round(this.#signalMs),
    };
  }
}
