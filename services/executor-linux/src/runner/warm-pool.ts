import { randomBytes } from "node:crypto";
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "@seraph/kit";
import { retireWarmSupervisor, startWarmSupervisor, type WarmSupervisor } from "../supervisor-client/warm.js";
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
  /** How many warm supervisors to keep: one per free slot. */
  readonly target: () => number;
}

/** After a failed start, the next one waits this long (a broken host does not spin). */
const RETRY_AFTER_FAILURE_MS = 5000;

/** Where warm supervisors wait: `<data dir>/warm/<id>` (short: their sockets live there). */
export const warmDirOf = (dataDir: string): string => join(dataDir, "warm");

/**
 * One started supervisor waiting for each free slot (issue 11 item 3): each is a process of the
 * bundle on the pinned runtime (our child, or the supervisor host's in the executor pod) that verified the facilities, set itself subreaper and listens on
 * warm.sock, owning nothing. take() hands one out (the claim then renames its directory to the
 * step's run directory and gives it the spec); one that dies is dropped and replaced by the next
 * fill(). Warm supervisors exit by themselves once this process is gone (they watch their parent),
 * and stop() retires them.
 */
export class WarmPool {
  readonly #d: WarmPoolDeps;
  readonly #ready = new Set<WarmSupervisor>();
  #starting = 0;
  #stopped = false;
  /** Starts in progress (stop() waits for them). */
  readonly #inFlight = new Set<Promise<void>>();
  #notBefore = 0;

  constructor(deps: WarmPoolDeps) {
    this.#d = deps;
  }

  /** Warm supervisors ready now. */
  get size(): number {
    return this.#ready.size;
  }

  /**
   * Removes what an earlier incarnation left in the warm directory: directories of warm
   * supervisors that never took a spec (a taken one was moved into its attempt's directory).
   * Any still alive is retired first (it owns nothing).
   */
  async sweep(): Promise<void> {
    const root = warmDirOf(this.#d.dataDir);
    for (const name of await readdir(root).catch(() => [] as string[])) {
      const dir = join(root, name);
      await retireWarmSupervisor(dir);
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** Starts warm supervisors until there is one per free slot (asynchronously; errors are logged). */
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
    const dir = join(warmDirOf(this.#d.dataDir), randomBytes(4).toString("hex"));
    try {
      const warm = await startWarmSupervisor(dir, {
        supervisorEntry: this.#d.supervisorEntry,
        nodePath: this.#d.supervisorRuntime,
        compileCacheDir: supervisorCompileCacheDir(this.#d.dataDir),
        testBootIdFile: this.#d.testBootIdFile,
        host: this.#d.host,
        proc: this.#d.proc,
      });
      if (this.#stopped) {
        // Stopped while it started: retire it like the waiting ones (stop() awaits this).
        await retireWarmSupervisor(dir);
        await Promise.race([warm.exited, new Promise((r) => setTimeout(r, 3000).unref())]);
        await rm(dir, { recursive: true, force: true });
        return;
      }
      this.#ready.add(warm);
      this.#d.log.debug({ pid: warm.pid, runDir: dir }, "warm supervisor ready");
      void warm.exited.then(() => {
        // Died (or retired) while waiting: it owned nothing; drop it and start another.
        if (this.#ready.delete(warm)) {
          this.#d.log.warn({ pid: warm.pid }, "a warm supervisor exited without a job; replacing it");
          void rm(dir, { recursive: true, force: true });
          this.fill();
        }
      });
    } catch (err) {
      this.#notBefore = Date.now() + RETRY_AFTER_FAILURE_MS;
      this.#d.log.warn({ err }, "warm supervisor not started; claims launch supervisors cold");
      await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    }
  }

  /** A ready warm supervisor for a claim (removed from the pool), if there is one. */
  take(): WarmSupervisor | undefined {
    for (const warm of this.#ready) {
      this.#ready.delete(warm);
      return warm;
    }
    return undefined;
  }

  /**
   * Stops filling and retires every warm supervisor still waiting, and those still starting
   * (awaited, so none outlives the executor's stop and no directory is left being written).
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    const waiting = [...this.#ready];
    this.#ready.clear();
    await Promise.all([
      ...waiting.map(async (w) => {
        await retireWarmSupervisor(w.runDir);
        await Promise.race([w.exited, new Promise((r) => setTimeout(r, 3000).unref())]);
        await rm(w.runDir, { recursive: true, force: true });
      }),
      ...[...this.#inFlight].map((p) => p.catch(() => undefined)),
    ]);
  }
}
