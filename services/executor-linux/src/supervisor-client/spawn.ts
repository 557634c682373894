import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, existsSync, lstatSync, mkdirSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { EXIT_NO_SPACE } from "../supervisor/storage.js";
import { launchWrite, SupervisorLaunchError } from "./launch-error.js";

// Starting a supervisor process and waiting until it is ready, apart from launch.ts: nothing here
// loads protobuf, so `seraph-exec run` can start its supervisor before its own modules load
// (cli/run-prestart.ts). launch.ts re-exports all of it.

/** Early stderr of the supervisor process (before its pino log exists). */
const STDERR_FILE = "supervisor.stderr";

function tail(path: string, bytes = 4000): string {
  try {
    const text = readFileSync(path, "utf8");
    return text.slice(-bytes);
  } catch {
    return "";
  }
}

function logTail(runDir: string): string {
  return [tail(join(runDir, RunDirFiles.log)), tail(join(runDir, STDERR_FILE))].filter((t) => t.length > 0).join("\n");
}

/**
 * Checks (and creates) a run directory for a fresh launch: a 0700 directory owned by this
 * process's uid that holds no spec, marker or socket yet.
 */
export function prepareRunDir(runDir: string): void {
  mkdirSync(runDir, { recursive: true, mode: 0o700 });
  const st = lstatSync(runDir);
  if (!st.isDirectory()) throw new SupervisorLaunchError(`run dir ${runDir} is not a directory`);
  if (typeof process.getuid === "function" && st.uid !== process.getuid()) {
    throw new SupervisorLaunchError(`run dir ${runDir} is not owned by uid ${process.getuid()}`);
  }
  if ((st.mode & 0o077) !== 0) {
    throw new SupervisorLaunchError(`run dir ${runDir} has mode ${(st.mode & 0o777).toString(8)}; it must be 0700`);
  }
  for (const f of [RunDirFiles.spec, RunDirFiles.marker, RunDirFiles.socket]) {
    if (existsSync(join(runDir, f))) throw new SupervisorLaunchError(`run dir ${runDir} was already used (${f} exists)`);
  }
}

/**
 * Checks (and creates) the supervisors' compile-cache directory: a 0700 directory owned by this
 * process's uid, never one another uid could have filled.
 */
export function prepareCompileCacheDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new SupervisorLaunchError(`compile cache ${dir} is not a directory`);
  if (typeof process.getuid === "function" && st.uid !== process.getuid()) {
    throw new SupervisorLaunchError(`compile cache ${dir} is not owned by uid ${process.getuid()}`);
  }
  if ((st.mode & 0o077) !== 0) throw new SupervisorLaunchError(`compile cache ${dir} has mode ${(st.mode & 0o777).toString(8)}; it must be 0700`);
}

/** Supervisors this process started itself and has not seen exit, by pid (for SupervisorHandle.signal). */
const ownChildren = new Map<number, ChildProcess>();

/**
 * Sends `sig` to a supervisor this process started itself and has not seen exit (the pid cannot
 * have been reused: it is still our unreaped child). False when it is not ours or already gone.
 */
export function signalOwnSupervisor(pid: number, sig: NodeJS.Signals): boolean {
  return ownChildren.get(pid)?.kill(sig) ?? false;
}

/**
 * V8 flags of every supervisor process (`<node> <flags> <bundle> …`). `--max-semi-space-size=1`
 * caps V8's young generation at 1 MiB per semi-space: evaluating the bundle made V8 grow it to
 * 4 MiB committed, 0.6 MiB of it in use, held for as long as the supervisor waits (1.5 MiB of
 * RssAnon at the start barrier). Measured interleaved against no flag, the 512 MiB flood
 * (journal copy loop) and the 1,000-process cleanup were not slower with it
 * (docs/benchmarks.md, Supervisor (e)).
 */
export const SUPERVISOR_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=1"];

/** How spawnDetached starts a supervisor process. */
export interface SpawnOptions {
  readonly nodePath: string;
  readonly startTimeoutMs: number;
  readonly compileCacheDir?: string | undefined;
  readonly onExit?: (pid: number) => void;
  /** Aborted before the process is ready: it is SIGKILLed (it owns nothing yet) and the start fails once it exited. */
  readonly signal?: AbortSignal | undefined;
}

/**
 * Starts `<nodePath> SUPERVISOR_NODE_FLAGS ...args` detached from us (own session, stdio ignored but stderr into the
 * run dir, no inherited environment, unref'd) and waits (bounded) until every file of `ready`
 * exists in `runDir`. A process that dies first fails with the end of its log; one not ready in
 * time is sent SIGTERM (still our unreaped child, so its pid cannot have been reused). Returns the
 * child's pid and a promise of its exit.
 */
export async function spawnDetached(
  runDir: string,
  args: readonly string[],
  ready: readonly string[],
  options: SpawnOptions,
): Promise<{ pid: number; exited: Promise<void> }> {
  if (options.compileCacheDir !== undefined) prepareCompileCacheDir(options.compileCacheDir);
  const stderrFd = launchWrite(runDir, "stderr file", () => openSync(join(runDir, STDERR_FILE), "a", 0o600));
  let exited: string | undefined;
  let noSpace = false;
  let child;
  try {
    child = spawn(options.nodePath, [...SUPERVISOR_NODE_FLAGS, ...args], {
      detached: true,
      stdio: ["ignore", "ignore", stderrFd],
      // Nothing inherited; only node's compile cache when one is given (the commands get the
      // spec's env, never the supervisor's).
      env: options.compileCacheDir !== undefined ? { NODE_COMPILE_CACHE: options.compileCacheDir } : {},
      cwd: runDir,
    });
  } finally {
    closeSync(stderrFd);
  }
  const gone = new Promise<void>((r) => {
    child.once("error", (err) => {
      exited ??= `could not start: ${err.message}`;
      r();
    });
    child.once("exit", (code, signal) => {
      noSpace = code === EXIT_NO_SPACE;
      exited ??= signal !== null ? `exited on ${signal}` : `exited with status ${code}${noSpace ? ` (no space in ${runDir} for its owner marker and receipt reserve; nothing started)` : ""}`;
      if (child.pid !== undefined) options.onExit?.(child.pid);
      if (child.pid !== undefined) ownChildren.delete(child.pid);
      r();
    });
  });
  child.unref();
  if (child.pid !== undefined) ownChildren.set(child.pid, child);

  const until = Date.now() + options.startTimeoutMs;
  for (;;) {
    if (ready.every((f) => existsSync(join(runDir, f)))) break;
    if (exited !== undefined) throw new SupervisorLaunchError(`supervisor ${exited} before it was ready`, logTail(runDir), noSpace);
    if (options.signal?.aborted === true) {
      child.kill("SIGKILL");
      await waitExit(gone);
      throw new SupervisorLaunchError("the supervisor's start was abandoned before it was ready");
    }
    if (Date.now() >= until) {
      child.kill("SIGTERM");
      throw new SupervisorLaunchError(`supervisor not ready within ${options.startTimeoutMs} ms`, logTail(runDir));
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  if (child.pid === undefined) throw new SupervisorLaunchError("the supervisor has no pid");
  return { pid: child.pid, exited: gone };
}

/**
 * Starts `<nodePath> <entry> --warm <runDir>` (spawnDetached) and waits until warm.sock and
 * warm.binpb exist: a warm supervisor, facilities verified, owning nothing until a spec is handed
 * over (supervisor-client/warm.ts). `runDir` must have passed prepareRunDir.
 */
export function spawnWarm(runDir: string, options: SpawnOptions & { readonly entry: string; readonly testBootIdFile?: string | undefined }): Promise<{ pid: number; exited: Promise<void> }> {
  const args = [options.entry, "--warm", runDir, ...(options.testBootIdFile ? ["--test-boot-id-file", options.testBootIdFile] : [])];
  return spawnDetached(runDir, args, [RunDirFiles.warmSocket, RunDirFiles.warmMarker], options);
}

/**
 * Waits for `exited` (a spawnDetached exit promise) for at most `timeoutMs`; true once it
 * resolved. The child is unref'd, so its exit alone would not keep the event loop alive: a timer
 * does, until then.
 */
export async function waitExit(exited: Promise<void>, timeoutMs = 5000): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<boolean>((r) => {
    timer = setTimeout(() => r(false), timeoutMs);
  });
  try {
    return await Promise.race([exited.then(() => true), bound]);
  } finally {
    clearTimeout(timer);
  }
}
