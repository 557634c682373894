import { randomBytes } from "node:crypto";
import { readdir, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import type { Logger } from "@seraph/kit";
import { retireWarmSupervisor, startWarmSupervisor, type WarmStartOptions, type WarmSupervisor } from "../supervisor-client/warm.js";
import { supervisorCompileCacheDir } from "../supervisor-client/paths.js";
import type { SupervisorHostAddress } from "../supervisor-client/launch.js";
import type { ProcFs } from "../native/proc-fs.js";

/** What the pool needs to start warm supervisors. */
export interface WarmPoolDeps {
  readonly dataDir: string;
  readonly log: Logger;
  readonly supervisorEntry?: string | undefined;
  readonly supervisorRuntime?: string | undefined;
  readonly testBootIdFile?: string | undefined;
  /** Start them through this supervisor host (the executor pod) instead of as our children. */
  readonly host?: SupervisorHostAddress | undefined;
  readonly proc?: ProcFs | undefined;
  /** How many warm supervisors to keep: one per slot (busy slots included). */
  readonly target: () => number;
  /** TEST ONLY: starts one warm supervisor (default startWarmSupervisor). */
  readonly start?: ((runDir: string, options: WarmStartOptions) => Promise<WarmSupervisor>) | undefined;
  /** TEST ONLY: asks one to exit (default retireWarmSupervisor). */
  readonly retire?: ((runDir: string) => Promise<boolean>) | undefined;
}

/** After a failed start, the next one waits this long (a broken host does not spin). */
const RETRY_AFTER_FAILURE_MS = 5000;

/** Where warm supervisors wait: `<data dir>/warm/<id>` (short: their sockets live there). */
export const warmDirOf = (dataDir: string): string => join(dataDir, "warm");

/**
 * One started supervisor waiting for each slot (issue 11 item 3; busy slots too, so a slot's next
 * job finds one): each is a process of the
 * bundle on the pinned runtime (our child, or the supervisor host's in the executor pod) that verified the facilities, set itself subreaper and listens on
 * warm.sock, owning nothing. take() hands one out (the claim then renames its directory to the
 * step's run directory and gives it the spec); one that dies is dropped and replaced by the next
 * fill(). Warm supervisors exit by themselves once this process is gone (they watch their parent),
 * and stop() ends them.
 */
export class WarmPool {
  readonly #d: WarmPoolDeps;
  readonly #ready = new Set<WarmSupervisor>();
  #starting = 0;
  #stopped = false;
  /** Starts in progress (stop() waits for them). */
  readonly #inFlight = new Set<Promise<void>>();
  /** Directory names of this pool's own starts still under the warm directory (sweep() leaves them). */
  readonly #mine = new Set<string>();
  /** Claims waiting for a start in flight (takeOrWait), at most one per start. */
  readonly #waiting: Array<(w: WarmSupervisor | undefined) => void> = [];
  /** The one stop (every stop() call waits for the same end). */
  #stopping: Promise<void> | undefined;
  #notBefore = 0;

  constructor(deps: WarmPoolDeps) {
    this.#d = deps;
  }

  #retire(runDir: string): Promise<boolean> {
    return (this.#d.retire ?? retireWarmSupervisor)(runDir);
  }

  /** Warm supervisors ready now. */
  get size(): number {
    return this.#ready.size;
  }

  /**
   * Removes what an earlier incarnation left in the warm directory: directories of warm
   * supervisors that never took a spec (a taken one was moved into its attempt's directory).
   * Any still alive is retired first (it owns nothing). The runner's first poll fills while this
   * runs, so the directories of this pool's own starts are left alone: removed under a starting
   * one, it would be ready with no warm.sock or token to reach it and outlive stop().
   */
  async sweep(): Promise<void> {
    const root = warmDirOf(this.#d.dataDir);
    for (const name of await readdir(root).catch(() => [] as string[])) {
      if (this.#mine.has(name)) continue;
      const dir = join(root, name);
      await this.#retire(dir);
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** Starts warm supervisors until there is one per slot (asynchronously; errors are logged). */
  fill(): void {
    while (!this.#stopped && this.#ready.size + this.#starting < this.#d.target() && Date.now() >= this.#notBefore) {
      this.#starting++;
      const started: Promise<void> = this.#startOne().finally(() => {
        this.#starting--;
        this.#inFlight.delete(started);
      });
      this.#inFlight.add(started);
    }
  }

  async #startOne(): Promise<void> {
    const name = randomBytes(4).toString("hex");
    const dir = join(warmDirOf(this.#d.dataDir), name);
    this.#mine.add(name);
    try {
      const warm = await (this.#d.start ?? startWarmSupervisor)(dir, {
        supervisorEntry: this.#d.supervisorEntry,
        nodePath: this.#d.supervisorRuntime,
        compileCacheDir: supervisorCompileCacheDir(this.#d.dataDir),
        testBootIdFile: this.#d.testBootIdFile,
        host: this.#d.host,
        proc: this.#d.proc,
      });
      if (this.#stopped) {
        // Stopped while it started: ended like the waiting ones (stop() awaits this).
        await this.#end(warm);
        return;
      }
      const claim = this.#waiting.shift();
      if (claim !== undefined) {
        // A claim waits for exactly this start: it is that claim's now.
        this.#mine.delete(name);
        this.#d.log.debug({ pid: warm.pid, runDir: dir }, "warm supervisor ready; handed to the claim waiting for it");
        claim(warm);
        return;
      }
      this.#ready.add(warm);
      this.#d.log.debug({ pid: warm.pid, runDir: dir }, "warm supervisor ready");
      void warm.exited.then(() => {
        // Died (or retired) while waiting: it owned nothing; drop it and start another.
        if (this.#ready.delete(warm)) {
          this.#d.log.warn({ pid: warm.pid }, "a warm supervisor exited without a job; replacing it");
          void rm(dir, { recursive: true, force: true }).finally(() => this.#mine.delete(name));
          this.fill();
        }
      });
    } catch (err) {
      // A claim waiting for this start launches its supervisor cold.
      this.#waiting.shift()?.(undefined);
      this.#notBefore = Date.now() + RETRY_AFTER_FAILURE_MS;
      this.#d.log.warn({ err }, "warm supervisor not started; claims launch supervisors cold");
      await rm(dir, { recursive: true, force: true }).catch(() => undefined);
      this.#mine.delete(name);
    }
  }

  /**
   * Ends a warm supervisor of this pool that took no spec and waits until it is gone: retired,
   * then (our own child only: its pid cannot have been reused) SIGTERM and SIGKILL if it does not
   * exit in time; its directory is removed after. A host's child that ignores the retire is
   * left to the host (it drains its children on SIGTERM) and logged.
   */
  async #end(w: WarmSupervisor): Promise<void> {
    const gone = (ms: number) => Promise.race([w.exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref())]);
    await this.#retire(w.runDir);
    let exited = await gone(3000);
    for (const sig of ["SIGTERM", "SIGKILL"] as const) {
      if (exited || !w.signal(sig)) break;
      this.#d.log.warn({ pid: w.pid, signal: sig }, "a warm supervisor did not exit when retired; signalling it");
      exited = await gone(sig === "SIGTERM" ? 2000 : 10_000);
    }
    if (!exited) this.#d.log.error({ pid: w.pid, runDir: w.runDir }, "a warm supervisor did not exit at stop");
    await rm(w.runDir, { recursive: true, force: true });
    this.#mine.delete(basename(w.runDir));
  }

  /**
   * A warm supervisor for a claim: a ready one, else the one starting now once it is ready (a
   * cold launch instead would be a second Node start on the same cores, and no quicker than the
   * one already under way); undefined when none is ready or starting for this claim, when that
   * start fails, or at stop().
   */
  async takeOrWait(): Promise<WarmSupervisor | undefined> {
    const ready = this.take();
    if (ready !== undefined || this.#stopped || this.#waiting.length >= this.#starting) return ready;
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  /** A ready warm supervisor for a claim (removed from the pool), if there is one. */
  take(): WarmSupervisor | undefined {
    for (const warm of this.#ready) {
      this.#ready.delete(warm);
      // The claim renames its directory away (into the step's run directory).
      this.#mine.delete(basename(warm.runDir));
      // Its replacement is started once that job's result is recorded (complete() fills), or by
      // the runner's next poll; a claim meanwhile waits for a start in flight (takeOrWait).
      return warm;
    }
    return undefined;
  }

  /**
   * Stops filling and ends every warm supervisor still waiting, and those still starting
   * (awaited, so none outlives the executor's stop and no directory is left being written).
   * Every call, a concurrent second one too (the runner stops on a superseded heartbeat and again
   * with the executor), resolves only after that.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#stopOnce();
    return this.#stopping;
  }

  async #stopOnce(): Promise<void> {
    this.#stopped = true;
    // Claims waiting for a start launch cold (or are being stopped themselves).
    for (const claim of this.#waiting.splice(0)) claim(undefined);
    const waiting = [...this.#ready];
    this.#ready.clear();
    await Promise.all([...waiting.map((w) => this.#end(w)), ...[...this.#inFlight].map((p) => p.catch(() => undefined))]);
  }
}
