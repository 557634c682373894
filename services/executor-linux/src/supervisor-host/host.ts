import { randomBytes, timingSafeEqual } from "node:crypto";
import { existsSync, lstatSync, mkdirSync, readFileSync, realpathSync, unlinkSync } from "node:fs";
import type { Socket } from "node:net";
import { basename, dirname, join, resolve } from "node:path";
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { Logger } from "@seraph/kit";
import {
  HostLaunchRequestSchema,
  HostLaunchResponseSchema,
  SupervisorSpecSchema,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { NativeSystem } from "../native/native-system.js";
import { readPidNamespace } from "../native/pid-namespace.js";
import { spawnDetached, spawnSupervisorProcess, SupervisorLaunchError, supervisorRuntimeOf } from "../supervisor-client/launch.js";
import { defaultSupervisorEntry, supervisorCompileCacheDir } from "../supervisor-client/paths.js";
import { retireWarmSupervisor } from "../supervisor-client/warm.js";
import { writeFileAtomic } from "../supervisor/atomic-file.js";
import { encodeFrame } from "../supervisor/framing.js";
import { listenOneRequest } from "../supervisor/one-request-server.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { specProblems } from "../supervisor/spec.js";

/** The token file of the supervisor host listening on `socketPath`. */
export function hostTokenFile(socketPath: string): string {
  return `${socketPath}.token`;
}

/** Options of startSupervisorHost. */
export interface SupervisorHostOptions {
  /** The launch socket (its directory must be, or is created, 0700 and ours). */
  readonly socketPath: string;
  /** Specs are only accepted below this directory (the executor's data directory). */
  readonly dataDir: string;
  readonly log: Logger;
  readonly native: Pick<NativeSystem, "peerCredentials">;
  /** Supervisor bundle (default: this package's dist/supervisor-bundle/supervisor.mjs). */
  readonly supervisorEntry?: string;
  /** Node for supervisors (default: the pinned runtime, defaultSupervisorRuntime()). */
  readonly nodePath?: string | undefined;
  /** Node's compile cache for supervisors (default: `<dataDir>/supervisor-compile-cache`). */
  readonly compileCacheDir?: string | undefined;
  /** Bound on each supervisor's start (default 10000 ms). */
  readonly startTimeoutMs?: number;
}

/** A listening supervisor host. */
export interface SupervisorHost {
  /** This host's PID namespace ("pid:[inode]"). */
  readonly pidNamespace: string;
  /** Supervisors started and not yet exited (pids in this namespace). */
  readonly children: ReadonlySet<number>;
  /** Stops accepting and removes the socket (supervisors keep running). */
  close(): Promise<void>;
  /** Resolves once every supervisor this host started has exited. */
  idle(): Promise<void>;
}

/** A launch request refused with a stable code. */
class Refusal extends Error {
  override readonly name = "HostLaunchRefusal";
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Largest request frame accepted (a token and a path). */
const MAX_REQUEST_BYTES = 16 * 1024;

function privateDirOwnedByUs(dir: string, what: string): void {
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new Refusal("run_dir_not_private", `${what} ${dir} is not a directory`);
  if (st.uid !== process.getuid?.()) throw new Refusal("run_dir_not_private", `${what} ${dir} is owned by uid ${st.uid}, not ${process.getuid?.()}`);
  if ((st.mode & 0o077) !== 0) throw new Refusal("run_dir_not_private", `${what} ${dir} has mode ${(st.mode & 0o777).toString(8)}; it must be 0700`);
}

/**
 * Checks a spec path the way launchSupervisor left it: an absolute, normalised path named
 * spec.binpb below the data directory (after resolving links), a regular 0600 file owned by
 * us in a 0700 run directory owned by us that holds no marker or socket yet, whose spec is
 * valid and names that directory as its run_dir.
 */
function checkSpecPath(specPath: string, dataDirReal: string): void {
  if (resolve(specPath) !== specPath) throw new Refusal("invalid_argument", "spec_path: not a normalised absolute path");
  if (basename(specPath) !== RunDirFiles.spec) throw new Refusal("invalid_argument", `spec_path: the file must be named ${RunDirFiles.spec}`);
  const runDir = dirname(specPath);
  let real: string;
  try {
    real = realpathSync(runDir);
  } catch (err) {
    throw new Refusal("invalid_argument", `spec_path: ${(err as Error).message}`);
  }
  if (real !== runDir || !real.startsWith(`${dataDirReal}/`)) {
    throw new Refusal("spec_path_outside_data_dir", `spec_path: ${runDir} is not a real directory below ${dataDirReal}`);
  }
  privateDirOwnedByUs(runDir, "run dir");
  const st = lstatSync(specPath, { throwIfNoEntry: false });
  if (st === undefined || !st.isFile()) throw new Refusal("invalid_argument", `spec_path: ${specPath} is not a regular file`);
  if (st.uid !== process.getuid?.() || (st.mode & 0o077) !== 0) throw new Refusal("run_dir_not_private", `${specPath} must be ours and 0600`);
  for (const f of [RunDirFiles.marker, RunDirFiles.socket]) {
    if (existsSync(join(runDir, f))) throw new Refusal("run_dir_used", `run dir ${runDir} was already used (${f} exists)`);
  }
  let spec;
  try {
    spec = fromBinary(SupervisorSpecSchema, readFileSync(specPath));
  } catch {
    throw new Refusal("spec_invalid", "the spec file is not a SupervisorSpec");
  }
  const problems = specProblems(spec, Date.now());
  if (spec.runDir !== runDir) problems.push(`run_dir ${spec.runDir} is not the directory of the spec file`);
  if (problems.length > 0) throw new Refusal("spec_invalid", problems.join("; "));
}

/**
 * Checks a warm run directory the way startWarmSupervisor left it: an absolute, normalised,
 * real directory below the data directory, 0700 and ours, never used (no warm socket, marker,
 * spec or control socket).
 */
function checkWarmRunDir(runDir: string, dataDirReal: string): void {
  if (resolve(runDir) !== runDir) throw new Refusal("invalid_argument", "warm_run_dir: not a normalised absolute path");
  let real: string;
  try {
    real = realpathSync(runDir);
  } catch (err) {
    throw new Refusal("invalid_argument", `warm_run_dir: ${(err as Error).message}`);
  }
  if (real !== runDir || !real.startsWith(`${dataDirReal}/`)) {
    throw new Refusal("spec_path_outside_data_dir", `warm_run_dir: ${runDir} is not a real directory below ${dataDirReal}`);
  }
  privateDirOwnedByUs(runDir, "warm run dir");
  for (const f of [RunDirFiles.warmSocket, RunDirFiles.warmMarker, RunDirFiles.spec, RunDirFiles.marker, RunDirFiles.socket]) {
    if (existsSync(join(runDir, f))) throw new Refusal("run_dir_used", `run dir ${runDir} was already used (${f} exists)`);
  }
}

/**
 * The supervisor host: a long-lived process (PID 1's only child in its own PID namespace, e.g.
 * `tini -- node dist/supervisor-host/main.js`) that starts per-job supervisors on behalf of the
 * executor, so they live as long as the host and not as long as the executor's container. It
 * listens on a Unix socket in a 0700 directory; each connection carries one HostLaunchRequest:
 * SO_PEERCRED must show the host's own uid, the token must equal the 0600 token file it writes at
 * start, and the spec must pass checkSpecPath. It then starts the supervisor as its own child
 * (spawnSupervisorProcess: marker and socket exist before it answers) and answers its pid and
 * PID namespace. It never signals a supervisor except its own unready child at the start bound,
 * and it is not a reaper of anything but its children: orphans go to the namespace's init.
 */
export async function startSupervisorHost(o: SupervisorHostOptions): Promise<SupervisorHost> {
  const log = o.log.child({ component: "supervisor-host" });
  const dir = dirname(o.socketPath);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  privateDirOwnedByUs(dir, "socket directory");
  const dataDirReal = realpathSync(o.dataDir);
  const pidNamespace = readPidNamespace("/proc", "self") ?? "";
  const token = randomBytes(32).toString("hex");
  const expected = Buffer.from(token, "utf8");
  const st = lstatSync(o.socketPath, { throwIfNoEntry: false });
  if (st !== undefined) {
    if (!st.isSocket()) throw new Error(`${o.socketPath} exists and is not a socket`);
    unlinkSync(o.socketPath);
  }
  const entry = o.supervisorEntry ?? defaultSupervisorEntry();
  const nodePath = supervisorRuntimeOf(o.nodePath);
  const compileCacheDir = o.compileCacheDir ?? supervisorCompileCacheDir(o.dataDir);
  const children = new Set<number>();
  /** Warm supervisors this host started, by pid: their run directory at start. */
  const warmDirs = new Map<number, string>();
  const waiters: (() => void)[] = [];

  const answer = (socket: Socket, r: MessageInitShape<typeof HostLaunchResponseSchema>) => {
    socket.end(encodeFrame(toBinary(HostLaunchResponseSchema, create(HostLaunchResponseSchema, r))));
  };
  const refuse = (socket: Socket, code: string, message: string) => {
    log.warn({ event: "launch_refused", code }, message);
    answer(socket, { started: false, errorCode: code, errorMessage: message });
  };

  const handle = async (socket: Socket, payload: Buffer) => {
    let req;
    try {
      req = fromBinary(HostLaunchRequestSchema, payload);
    } catch {
      refuse(socket, "bad_frame", "the frame is not a HostLaunchRequest");
      return;
    }
    const given = Buffer.from(req.token, "utf8");
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      refuse(socket, "bad_token", "token: does not match the host's token file");
      return;
    }
    try {
      let exitedEarly = false;
      const common = {
        nodePath,
        compileCacheDir,
        startTimeoutMs: o.startTimeoutMs ?? 10_000,
        onExit: (p: number) => {
          exitedEarly = !children.delete(p);
          warmDirs.delete(p);
          log.info({ event: "supervisor_exited", pid: p }, "supervisor exited");
          if (children.size === 0) for (const w of waiters.splice(0)) w();
        },
      };
      if ((req.specPath === "") === (req.warmRunDir === "")) throw new Refusal("invalid_argument", "exactly one of spec_path and warm_run_dir must be set");
      let pid: number;
      let runDir: string;
      if (req.warmRunDir !== "") {
        if (!req.warmRunDir.startsWith("/") || req.warmRunDir.length > 4096) throw new Refusal("invalid_argument", "warm_run_dir: must be an absolute path of at most 4096 bytes");
        checkWarmRunDir(req.warmRunDir, dataDirReal);
        runDir = req.warmRunDir;
        const args = [entry, "--warm", runDir, ...(req.testBootIdFile !== "" ? ["--test-boot-id-file", req.testBootIdFile] : [])];
        pid = (await spawnDetached(runDir, args, [RunDirFiles.warmSocket, RunDirFiles.warmMarker], common)).pid;
        warmDirs.set(pid, runDir);
      } else {
        if (!req.specPath.startsWith("/") || req.specPath.length > 4096) throw new Refusal("invalid_argument", "spec_path: must be an absolute path of at most 4096 bytes");
        checkSpecPath(req.specPath, dataDirReal);
        runDir = dirname(req.specPath);
        pid = await spawnSupervisorProcess(req.specPath, { entry, ...common });
      }
      if (!exitedEarly) children.add(pid);
      log.info({ event: "supervisor_started", pid, runDir, warm: req.warmRunDir !== "" }, "supervisor started");
      answer(socket, { started: true, pid, pidNamespace });
    } catch (err) {
      if (err instanceof Refusal) refuse(socket, err.code, err.message);
      else if (err instanceof SupervisorLaunchError) refuse(socket, "launch_failed", err.message);
      else refuse(socket, "launch_failed", (err as Error).message);
    }
  };

  const server = await listenOneRequest({ socketPath: o.socketPath, native: o.native, maxRequestBytes: MAX_REQUEST_BYTES, onRequest: handle, refuse });
  // The token becomes readable only once the socket exists: a client that sees it can connect.
  writeFileAtomic(hostTokenFile(o.socketPath), `${token}\n`, 0o600);
  log.info({ event: "listening", socketPath: o.socketPath, pidNamespace }, "supervisor host listening");
  return {
    pidNamespace,
    children,
    idle: () => {
      if (children.size === 0) return Promise.resolve();
      // The children are unref'd (spawnSupervisorProcess): without a ref'd handle, a host whose
      // server is closed would simply exit, and its namespace (with every supervisor) with it.
      const hold = setInterval(() => undefined, 60_000);
      return new Promise<void>((r) => waiters.push(r)).finally(() => clearInterval(hold));
    },
    async close() {
      await server.close();
      // Warm supervisors own nothing: retired, so a draining host does not wait on them (one that
      // took a spec refuses, already_owns_job, and runs its job to the end).
      await Promise.all([...warmDirs.entries()].filter(([pid]) => children.has(pid)).map(([, runDir]) => retireWarmSupervisor(runDir)));
      for (const f of [o.socketPath, hostTokenFile(o.socketPath)]) {
        try {
          unlinkSync(f);
        } catch {
          // already gone
        }
      }
    },
  };
}
