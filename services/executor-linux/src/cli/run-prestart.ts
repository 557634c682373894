import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defaultSupervisorEntry, defaultSupervisorRuntime } from "../supervisor-client/paths.js";
import { signalOwnSupervisor, spawnWarm, waitExit } from "../supervisor-client/spawn.js";

// Nothing here loads protobuf or the rest of `run`: seraph-exec.ts imports it statically, so the
// supervisor starts while `run`'s own modules load and its arguments are checked.

/**
 * A warm supervisor `seraph-exec run` started as its first step, in the run directory it will use:
 * its facilities verified, owning nothing until `run` hands it the spec (or discards it).
 */
export interface Prestart {
  /** The run directory (mkdtemp under $TMPDIR, 0700, as a fresh launch makes it). */
  readonly runDir: string;
  /**
   * The started process once warm.sock and warm.binpb exist; rejects when it could not start
   * (then its directory is already removed, and `run` launches afresh, which reports why).
   */
  readonly ready: Promise<{ readonly pid: number; readonly exited: Promise<void> }>;
  /** Ends it (SIGKILL through our child handle: it owns nothing) and removes its run directory. */
  discard(): Promise<void>;
}

/**
 * Starts `run`'s supervisor ahead as a warm one (supervisor.mjs --warm, on the pinned runtime,
 * exactly as a fresh launch would start it but without a spec), or undefined when there is
 * no pinned runtime or no bundle (the fresh launch then refuses with its own message). A warm
 * supervisor whose launcher dies exits within 250 ms by itself. `options` (tests): another
 * runtime or bundle.
 */
export function prestartSupervisor(options: { readonly nodePath?: string | undefined; readonly entry?: string } = {}): Prestart | undefined {
  const nodePath = options.nodePath ?? defaultSupervisorRuntime();
  const entry = options.entry ?? defaultSupervisorEntry();
  if (nodePath === undefined || !existsSync(entry)) return undefined;
  let runDir: string;
  try {
    runDir = mkdtempSync(join(tmpdir(), "seraph-exec-"));
  } catch {
    return undefined; // the fresh launch's own mkdtemp fails the same way, where `run` reports it
  }
  const abandon = new AbortController();
  const remove = (): void => rmSync(runDir, { recursive: true, force: true });
  const ready = spawnWarm(runDir, { entry, nodePath, startTimeoutMs: 10_000, signal: abandon.signal });
  // Not started: nothing of it is left (the process exited before spawnWarm rejected).
  ready.catch(remove);
  return {
    runDir,
    ready,
    discard: async () => {
      abandon.abort();
      const started = await ready.catch(() => undefined);
      if (started !== undefined) {
        signalOwnSupervisor(started.pid, "SIGKILL");
        await waitExit(started.exited);
      }
      remove();
    },
  };
}
