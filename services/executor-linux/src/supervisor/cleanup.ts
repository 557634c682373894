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
  const { native, proc, reaper, now, sleep } = deps;
  const start = now();
  const minRescanMs = options.rescanMs ?? 25;
  let lastScanMs = 0;
  let initial = options.initialScan;
  const termed = new Set<string>();
  const killed = new Set<string>();
  const refused = new Set<string>();
  let rounds = 0;
  let scans = 0;
  let scanMs = 0;
  let signalMs = 0;
  let termUntil: number | undefined;
  let killPhase = false;

  const finish = (echild: boolean): CleanupResult => ({
    echild,
    signalledTerm: termed.size,
    signalledKill: killed.size,
    identityRefusals: refused.size,
    rounds,
    cleanupMs: Math.round(now() - start),
    scans,
    scanMs: Math.round(scanMs),
    signalMs: Math.round(signalMs),
  });

  // Reap-only polling between scans: cheap (one syscall), while a scan reads every /proc/<pid>/stat.
  const reapFor = async (ms: number): Promise<boolean> => {
    const until = now() + ms;
    for (;;) {
      if (reaper.reapAll().echild) return true;
      if (now() >= until || now() >= options.budgetEnd) return false;
      await sleep(1);
    }
  };

  for (;;) {
    if (reaper.reapAll().echild) return finish(true);
    const t = now();
    if (t >= options.budgetEnd) return finish(false);
    let entries: readonly OpenedDescendant[];
    let scan: PidfdScan | undefined;
    if (initial !== undefined) {
      // A plain scan taken earlier: these get signalVerified (open, then re-check).
      entries = initial.map((stat) => ({ stat, pidfd: undefined }));
      initial = undefined;
    } else {
      const scanStart = now();
      scan = scanTreeWithPidfds(native, proc, deps.rootPid);
      entries = scan.descendants;
      lastScanMs = now() - scanStart;
      scans++;
      scanMs += lastScanMs;
      deps.ledger.note(entries.map((e) => e.stat));
    }
    const rescanMs = Math.max(minRescanMs, 2 * lastScanMs);
    // A zombie leader whose other threads run is live: it is signalled through its own pidfd.
    const live = entries.filter((e) => !isExited(e.stat));
    // Every pidfd of this round is closed before any await: fds never pile up across rounds.
    const send = (e: OpenedDescendant, signals: readonly number[]): SignalOutcome =>
      e.pidfd !== undefined ? signalOpenedPidfd(native, e.pidfd, signals) : signalVerified(native, proc, e.stat, signals);
    if (live.length === 0) {
      scan?.close();
      // Only zombies (all children of the root by now) or processes exiting this instant.
      if (await reapFor(5)) return finish(true);
      continue;
    }
    if (termUntil === undefined) {
      rounds++;
      termUntil = options.graceMs > 0 ? Math.min(t + options.graceMs, options.budgetEnd - options.killMarginMs) : t;
    }
    // Through the scan's pidfds first, then close them all, then the rest through
    // signalVerified (which needs an fd of its own per process): a tree bigger than the fd
    // limit is still signalled, over more calls.
    const signalAll = (signals: readonly number[], skip: (e: OpenedDescendant) => boolean, done: Set<string>): void => {
      const later: OpenedDescendant[] = [];
      for (const e of live) {
        if (skip(e)) continue;
        if (e.pidfd === undefined) {
          later.push(e);
          continue;
        }
        const r = send(e, signals);
        if (r.kind === "signalled") done.add(key(e.stat));
      }
      scan?.close();
      for (const e of later) {
        const r = send(e, signals);
        if (r.kind === "signalled") done.add(key(e.stat));
        else if (r.kind === "refused") refused.add(key(e.stat));
      }
    };
    if (t < termUntil) {
      const signalStart = now();
      signalAll([Signal.SIGTERM, Signal.SIGCONT], (e) => termed.has(key(e.stat)), termed);
      signalMs += now() - signalStart;
      if (await reapFor(Math.max(1, Math.min(rescanMs, termUntil - now())))) return finish(true);
      continue;
    }
    rounds++;
    const signalStart = now();
    if (!killPhase) {
      killPhase = true;
      deps.onKillPhase?.();
    }
    signalAll([Signal.SIGKILL], () => false, killed);
    signalMs += now() - signalStart;
    if (await reapFor(Math.max(10, 2 * lastScanMs))) return finish(true);
  }
}
