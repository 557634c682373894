import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { closeSync, existsSync, lstatSync, mkdirSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  OwnerMarkerSchema,
  SupervisorSpecSchema,
  type OwnerMarker,
  type SupervisorSpec,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { writeFileAtomic } from "../supervisor/atomic-file.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { assertValidSpec } from "../supervisor/spec.js";
import { connectSupervisor, type ConnectOptions, type SupervisorConnection } from "./connection.js";
import { verifySupervisorIdentity, type SupervisorIdentityVerdict } from "./identity.js";
import { defaultSupervisorEntry } from "./paths.js";

/** Early stderr of the supervisor process (before its pino log exists). */
const STDERR_FILE = "supervisor.stderr";

/** Options of launchSupervisor. */
export interface LaunchOptions {
  /** Compiled supervisor entry (default: this package's dist/supervisor/main.js). */
  readonly supervisorEntry?: string;
  /** Node executable for the supervisor (default: process.execPath). */
  readonly nodePath?: string;
  /** Bound on the wait for marker + socket (default 10000 ms). */
  readonly startTimeoutMs?: number;
}

/** The supervisor could not be started or died before it was ready. */
export class SupervisorLaunchError extends Error {
  override readonly name = "SupervisorLaunchError";
  /** @param message what failed; @param logTail the end of supervisor.log / supervisor.stderr */
  constructor(
    message: string,
    readonly logTail: string = "",
  ) {
    super(logTail.length > 0 ? `${message}\n--- supervisor log ---\n${logTail}` : message);
  }
}

/** A started supervisor whose owner marker exists. */
export interface SupervisorHandle {
  readonly runDir: string;
  /** The owner marker the supervisor wrote (pid, start time, boot id, job, attempt, fence, hashes). */
  readonly marker: OwnerMarker;
  /** The supervisor's pid (also in the marker). */
  readonly pid: number;
  /** Connects as `incarnationId` (default: a fresh UUID). */
  connect(incarnationId?: string, options?: ConnectOptions): Promise<SupervisorConnection>;
  /** pid + start time + boot id check through /proc. */
  verify(): Promise<SupervisorIdentityVerdict>;
  /** Resolves true once the supervisor's identity is no longer alive, false after `timeoutMs`. */
  waitGone(timeoutMs?: number): Promise<boolean>;
}

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

function prepareRunDir(runDir: string): void {
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

/** Polls /proc until the identity in `marker` is not alive any more. */
export async function waitSupervisorGone(marker: OwnerMarker, timeoutMs: number): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if ((await verifySupervisorIdentity(marker)) !== "alive") return true;
    if (Date.now() >= until) return false;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Starts one supervisor for `spec`: validates the spec, creates spec.run_dir (0700; a
 * pre-created one must be 0700 and ours), writes spec.binpb (0600), starts
 * `node dist/supervisor/main.js --spec …` detached (own session, stdio ignored, empty
 * environment, unref'd), and waits (bounded) until the owner marker and the control socket
 * exist. If the supervisor dies first, the error carries the end of its log. The controller
 * only ever waits on this one pid (through libuv); it never becomes a subreaper.
 */
export async function launchSupervisor(spec: SupervisorSpec, options: LaunchOptions = {}): Promise<SupervisorHandle> {
  assertValidSpec(spec, Date.now());
  const entry = options.supervisorEntry ?? defaultSupervisorEntry();
  if (!existsSync(entry)) {
    throw new SupervisorLaunchError(`the compiled supervisor ${entry} does not exist; build first (npx tsc -b services/executor-linux)`);
  }
  const runDir = spec.runDir;
  prepareRunDir(runDir);
  const specPath = join(runDir, RunDirFiles.spec);
  writeFileAtomic(specPath, toBinary(SupervisorSpecSchema, spec), 0o600);

  const stderrFd = openSync(join(runDir, STDERR_FILE), "a", 0o600);
  let exited: string | undefined;
  let child;
  try {
    child = spawn(options.nodePath ?? process.execPath, [entry, "--spec", specPath], {
      detached: true,
      stdio: ["ignore", "ignore", stderrFd],
      env: {},
      cwd: runDir,
    });
  } finally {
    closeSync(stderrFd);
  }
  child.once("error", (err) => {
    exited ??= `could not start: ${err.message}`;
  });
  child.once("exit", (code, signal) => {
    exited ??= signal !== null ? `exited on ${signal}` : `exited with status ${code}`;
  });
  child.unref();

  const markerPath = join(runDir, RunDirFiles.marker);
  const socketPath = join(runDir, RunDirFiles.socket);
  const until = Date.now() + (options.startTimeoutMs ?? 10_000);
  for (;;) {
    if (existsSync(markerPath) && existsSync(socketPath)) break;
    if (exited !== undefined) throw new SupervisorLaunchError(`supervisor ${exited} before it was ready`, logTail(runDir));
    if (Date.now() >= until) {
      // Still our unreaped child, so this pid cannot have been reused; SIGTERM = cancel.
      child.kill("SIGTERM");
      throw new SupervisorLaunchError(`supervisor not ready within ${options.startTimeoutMs ?? 10_000} ms`, logTail(runDir));
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  const marker = fromBinary(OwnerMarkerSchema, readFileSync(markerPath));
  const pid = marker.supervisor?.pid;
  if (pid === undefined || pid !== child.pid) {
    throw new SupervisorLaunchError(`owner marker names pid ${pid}, but the supervisor is pid ${child.pid}`);
  }
  return {
    runDir,
    marker,
    pid,
    connect: (incarnationId = randomUUID(), connectOptions) => connectSupervisor(runDir, incarnationId, connectOptions),
    verify: () => verifySupervisorIdentity(marker),
    waitGone: (timeoutMs = 5000) => waitSupervisorGone(marker, timeoutMs),
  };
}
