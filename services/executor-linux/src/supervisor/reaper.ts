import type { ExitStatus, NativeSystem } from "../native/native-system.js";

/** The exit of a tracked child: how it ended and when it was reaped (Date.now()). */
export interface TrackedExit {
  readonly status: ExitStatus;
  readonly reapedUnixMs: number;
}

/**
 * The only code that calls waitpid: `waitpid(-1, WNOHANG | __WALL)` until nothing is left to
 * reap. Statuses of tracked pids (the direct commands) are kept; everything else reaped is
 * counted (orphaned descendants reparented to the subreaper).
 */
export class Reaper {
  readonly #native: NativeSystem;
  readonly #tracked = new Set<number>();
  readonly #exits = new Map<number, TrackedExit>();
  #reapedOthers = 0;
  #echildSeen = false;

  /** @param native the waitpid provider */
  constructor(native: NativeSystem) {
    this.#native = native;
  }

  /** Starts keeping the exit status of `pid` (call right after spawning it). */
  track(pid: number): void {
    this.#tracked.add(pid);
  }

  /** The exit of a tracked pid once it was reaped. */
  exitOf(pid: number): TrackedExit | undefined {
    return this.#exits.get(pid);
  }

  /** Number of reaped processes that were not tracked (descendants, not direct commands). */
  get reapedOthers(): number {
    return this.#reapedOthers;
  }

  /** Whether the last reapAll ended with ECHILD (no children at all). */
  get echildSeen(): boolean {
    return this.#echildSeen;
  }

  /**
   * Reaps every child that has exited. Returns whether waitpid ended with ECHILD (the proof
   * that no child, live or zombie, remains) and how many were reaped by this call.
   */
  reapAll(): { readonly echild: boolean; readonly reaped: number } {
    let reaped = 0;
    for (;;) {
      const r = this.#native.waitAny();
      if (r.kind === "reaped") {
        reaped++;
        if (this.#tracked.delete(r.pid)) this.#exits.set(r.pid, { status: r.status, reapedUnixMs: Date.now() });
        else this.#reapedOthers++;
        continue;
      }
      this.#echildSeen = r.kind === "echild";
      return { echild: this.#echildSeen, reaped };
    }
  }
}
