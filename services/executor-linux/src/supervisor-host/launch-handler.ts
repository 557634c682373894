import { timingSafeEqual } from "node:crypto";
import type { Socket } from "node:net";
import { dirname } from "node:path";
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { Logger } from "@seraph/kit";
import { HostLaunchRequestSchema, HostLaunchResponseSchema, type HostLaunchRequest } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { spawnDetached, spawnSupervisorProcess, SupervisorLaunchError } from "../supervisor-client/launch.js";
import { encodeFrame } from "../supervisor/framing.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { checkSpecPath, checkWarmRunDir, Refusal } from "./launch-checks.js";

/** The supervisors one host started and has not seen exit. */
export interface HostChildren {
  /** Supervisors started and not yet exited (pids in this namespace). */
  readonly pids: Set<number>;
  /** Warm supervisors this host started, by pid: their run directory at start. */
  readonly warmDirs: Map<number, string>;
  /** Called once the last child exited. */
  readonly waiters: (() => void)[];
}

/** What the host's launch handler checks requests against and starts supervisors with. */
export interface LaunchContext {
  readonly log: Logger;
  /** The host's token (the one in its 0600 token file). */
  readonly token: Buffer;
  readonly entry: string;
  readonly nodePath: string;
  readonly compileCacheDir: string;
  readonly startTimeoutMs: number;
  readonly dataDirReal: string;
  readonly pidNamespace: string;
  readonly children: HostChildren;
}

/**
 * The handler of one launch connection: checks the frame and the token, starts the supervisor
 * (warm or for a spec, after launch-checks) as the host's child, and answers its pid and PID
 * namespace; every refusal is answered with a code and logged.
 */
export function launchHandler(c: LaunchContext): (socket: Socket, payload: Buffer) => Promise<void> {
  const refuse = (socket: Socket, code: string, message: string) => refuseLaunch(c.log, socket, code, message);
  return async (socket, payload) => {
    let req;
    try {
      req = fromBinary(HostLaunchRequestSchema, payload);
    } catch {
      refuse(socket, "bad_frame", "the frame is not a HostLaunchRequest");
      return;
    }
    const given = Buffer.from(req.token, "utf8");
    if (given.length !== c.token.length || !timingSafeEqual(given, c.token)) {
      refuse(socket, "bad_token", "token: does not match the host's token file");
      return;
    }
    try {
      const { pid, runDir } = await launch(c, req);
      c.log.info({ event: "supervisor_started", pid, runDir, warm: req.warmRunDir !== "" }, "supervisor started");
      answer(socket, { started: true, pid, pidNamespace: c.pidNamespace });
    } catch (err) {
      if (err instanceof Refusal) refuse(socket, err.code, err.message);
      else if (err instanceof SupervisorLaunchError) refuse(socket, err.noSpace ? "insufficient_space" : "launch_failed", err.message);
      else refuse(socket, "launch_failed", (err as Error).message);
    }
  };
}

function answer(socket: Socket, r: MessageInitShape<typeof HostLaunchResponseSchema>): void {
  socket.end(encodeFrame(toBinary(HostLaunchResponseSchema, create(HostLaunchResponseSchema, r))));
}

/** Answers a launch request `started: false` with the code and message, and logs it. */
export function refuseLaunch(log: Logger, socket: Socket, code: string, message: string): void {
  log.warn({ event: "launch_refused", code }, message);
  answer(socket, { started: false, errorCode: code, errorMessage: message });
}

/** Starts the supervisor one request asks for; throws Refusal for a request that may not be served. */
async function launch(c: LaunchContext, req: HostLaunchRequest): Promise<{ pid: number; runDir: string }> {
  const { children } = c;
  let exitedEarly = false;
  const common = {
    nodePath: c.nodePath,
    compileCacheDir: c.compileCacheDir,
    startTimeoutMs: c.startTimeoutMs,
    onExit: (p: number) => {
      exitedEarly = !children.pids.delete(p);
      children.warmDirs.delete(p);
      c.log.info({ event: "supervisor_exited", pid: p }, "supervisor exited");
      if (children.pids.size === 0) for (const w of children.waiters.splice(0)) w();
    },
  };
  if ((req.specPath === "") === (req.warmRunDir === "")) throw new Refusal("invalid_argument", "exactly one of spec_path and warm_run_dir must be set");
  let pid: number;
  let runDir: string;
  if (req.warmRunDir !== "") {
    if (!req.warmRunDir.startsWith("/") || req.warmRunDir.length > 4096) throw new Refusal("invalid_argument", "warm_run_dir: must be an absolute path of at most 4096 bytes");
    checkWarmRunDir(req.warmRunDir, c.dataDirReal);
    runDir = req.warmRunDir;
    const args = [c.entry, "--warm", runDir, ...(req.testBootIdFile !== "" ? ["--test-boot-id-file", req.testBootIdFile] : [])];
    pid = (await spawnDetached(runDir, args, [RunDirFiles.warmSocket, RunDirFiles.warmMarker], common)).pid;
    children.warmDirs.set(pid, runDir);
  } else {
    if (!req.specPath.startsWith("/") || req.specPath.length > 4096) throw new Refusal("invalid_argument", "spec_path: must be an absolute path of at most 4096 bytes");
    checkSpecPath(req.specPath, c.dataDirReal);
    runDir = dirname(req.specPath);
    pid = await spawnSupervisorProcess(req.specPath, { entry: c.entry, ...common });
  }
  if (!exitedEarly) children.pids.add(pid);
  return { pid, runDir };
}
