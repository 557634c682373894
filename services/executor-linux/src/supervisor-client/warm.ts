import { existsSync, readFileSync } from "node:fs";
import { rename } from "node:fs/promises";
import { connect } from "node:net";
import { join } from "node:path";
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import {
  OwnerMarkerSchema,
  SupervisorSpecSchema,
  WarmMarkerSchema,
  WarmRequestSchema,
  WarmResponseSchema,
  type SupervisorSpec,
  type WarmMarker,
  type WarmResponse,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { readPidNamespace } from "../native/pid-namespace.js";
import type { ProcFs } from "../native/proc-fs.js";
import { FrameDecoder, encodeFrame } from "../supervisor/framing.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { assertValidSpec } from "../supervisor/spec.js";
import { supervisorPidHere, verifySupervisorIdentity } from "./identity.js";
import { handleOf, prepareRunDir, requestHost, signalOwnSupervisor, spawnWarm, startedMarker, supervisorRuntimeOf, SupervisorLaunchError, type SupervisorHandle, type SupervisorHostAddress } from "./launch.js";
import { defaultSupervisorEntry } from "./paths.js";

/** A warm supervisor this process started: facilities verified, warm.sock up, no job. */
export interface WarmSupervisor {
  /** Its run directory now (moveWarmSupervisor renames it). */
  readonly runDir: string;
  readonly pid: number;
  /** What it wrote in warm.binpb (identity, run dir, source hash). */
  readonly marker: WarmMarker;
  /** Resolves when the process exited. */
  readonly exited: Promise<void>;
  /**
   * Sends a signal through this process's own child handle; false when it is not our child (a
   * supervisor host started it) or it is already gone.
   */
  readonly signal: (sig: NodeJS.Signals) => boolean;
}

/** Options of startWarmSupervisor. */
export interface WarmStartOptions {
  readonly supervisorEntry?: string | undefined;
  readonly nodePath?: string | undefined;
  readonly compileCacheDir?: string | undefined;
  /** TEST ONLY: the boot-id file the node uses (every spec it hands over must name the same). */
  readonly testBootIdFile?: string | undefined;
  readonly startTimeoutMs?: number | undefined;
  /** Start it through this supervisor host (its child, in its PID namespace) instead of as ours. */
  readonly host?: SupervisorHostAddress | undefined;
  /** /proc with the node's boot-id source (a host-started one is watched through it). */
  readonly proc?: ProcFs | undefined;
}

/** How often the executor checks that a warm supervisor a host started is still alive. */
const HOST_WARM_WATCH_MS = 250;

/** The warm supervisor was not reached or refused: it took no spec (it owns nothing). */
export class WarmUnavailableError extends SupervisorLaunchError {}

/** A warm supervisor refused a request (a stable code); nothing changed there. */
export class WarmRefusedError extends WarmUnavailableError {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`the warm supervisor refused: ${code}: ${message}`);
  }
}

/**
 * Starts `<pinned node> supervisor.mjs --warm <runDir>` as our own detached child in a fresh 0700
 * run directory and waits (bounded) until warm.sock and warm.binpb exist; the marker must name the
 * pid that was started.
 */
export async function startWarmSupervisor(runDir: string, options: WarmStartOptions = {}): Promise<WarmSupervisor> {
  const entry = options.supervisorEntry ?? defaultSupervisorEntry();
  prepareRunDir(runDir);
  if (options.host !== undefined) return startWarmThroughHost(runDir, options.host, options);
  if (!existsSync(entry)) throw new SupervisorLaunchError(`the supervisor bundle ${entry} does not exist; build first (npm run build)`);
  const { pid, exited } = await spawnWarm(runDir, {
    entry,
    testBootIdFile: options.testBootIdFile,
    nodePath: supervisorRuntimeOf(options.nodePath),
    startTimeoutMs: options.startTimeoutMs ?? 10_000,
    compileCacheDir: options.compileCacheDir,
  });
  return ownWarmSupervisor(runDir, pid, exited);
}

/**
 * The warm supervisor our own child `pid` is, once spawnWarm found it ready in `runDir`: its warm
 * marker must name that pid and that run directory.
 */
export function ownWarmSupervisor(runDir: string, pid: number, exited: Promise<void>): WarmSupervisor {
  const marker = fromBinary(WarmMarkerSchema, readFileSync(join(runDir, RunDirFiles.warmMarker)));
  if (marker.supervisor?.pid !== pid || marker.runDir !== runDir) {
    throw new SupervisorLaunchError(`warm marker names pid ${marker.supervisor?.pid} in ${marker.runDir}, but pid ${pid} was started in ${runDir}`);
  }
  return { runDir, pid, marker, exited, signal: (sig) => signalOwnSupervisor(pid, sig) };
}

/**
 * The host starts `--warm <runDir>` as its own child (in its PID namespace); the warm marker must
 * name the pid and namespace the host answered, and that process must be visible from here.
 * Its exit is watched through /proc (it is not our child).
 */
async function startWarmThroughHost(runDir: string, host: SupervisorHostAddress, options: WarmStartOptions): Promise<WarmSupervisor> {
  const started = await requestHost(host, { warmRunDir: runDir, testBootIdFile: options.testBootIdFile ?? "" }, (options.startTimeoutMs ?? 10_000) + 5000);
  const marker = fromBinary(WarmMarkerSchema, readFileSync(join(runDir, RunDirFiles.warmMarker)));
  if (marker.supervisor?.pid !== started.pid || marker.pidNamespace !== started.pidNamespace || marker.runDir !== runDir) {
    throw new SupervisorLaunchError(`warm marker names pid ${marker.supervisor?.pid} in ${marker.pidNamespace || "(none)"}, but the host started pid ${started.pid} in ${started.pidNamespace}`);
  }
  const identity = create(OwnerMarkerSchema, { supervisor: marker.supervisor, pidNamespace: marker.pidNamespace });
  if (supervisorPidHere(identity) === undefined) {
    await retireWarmSupervisor(runDir);
    throw new SupervisorLaunchError(`the warm supervisor (pid ${started.pid} in ${started.pidNamespace}) is not visible from this executor's PID namespace`);
  }
  const exited = new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      void verifySupervisorIdentity(identity, options.proc).then((v) => {
        if (v === "alive") return;
        clearInterval(timer);
        resolve();
      });
    }, HOST_WARM_WATCH_MS);
    timer.unref();
  });
  // Not our child: only the host may signal it (retire asks it to exit; a draining host ends it).
  return { runDir, pid: started.pid, marker, exited, signal: () => false };
}

/** Sends one WarmRequest (token from the run directory's warm.token) and reads the answer. */
export async function sendWarmRequest(runDir: string, body: MessageInitShape<typeof WarmRequestSchema>["body"], timeoutMs = 10_000): Promise<WarmResponse> {
  const token = readFileSync(join(runDir, RunDirFiles.warmToken), "utf8").trim();
  const request = encodeFrame(toBinary(WarmRequestSchema, create(WarmRequestSchema, { token, body })));
  return new Promise<WarmResponse>((resolve, reject) => {
    const socket = connect(join(runDir, RunDirFiles.warmSocket));
    const decoder = new FrameDecoder();
    let done = false;
    let connected = false;
    const finish = (err: Error | undefined, value?: WarmResponse) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve(value as WarmResponse);
    };
    const timer = setTimeout(() => finish(new SupervisorLaunchError(`the warm supervisor did not answer within ${timeoutMs} ms`)), timeoutMs);
    socket.on("connect", () => {
      connected = true;
      socket.write(request);
    });
    // Not connected: the request never reached it. Connected without an answer: it may have taken it.
    socket.on("error", (err) => finish(new (connected ? SupervisorLaunchError : WarmUnavailableError)(`cannot reach the warm supervisor in ${runDir}: ${err.message}`)));
    socket.on("close", () => finish(new SupervisorLaunchError("the warm supervisor closed the connection without an answer")));
    socket.on("data", (chunk: Buffer) => {
      try {
        const first = decoder.push(chunk)[0];
        if (first !== undefined) finish(undefined, fromBinary(WarmResponseSchema, first));
      } catch (err) {
        finish(new SupervisorLaunchError(`undecodable answer from the warm supervisor: ${(err as Error).message}`));
      }
    });
  });
}

/**
 * Hands `spec` (whose run_dir must be the warm supervisor's) to a warm supervisor, after checking
 * that the process in its warm marker is still that process (pid, start time, boot id), and
 * waits (bounded) until it wrote its owner marker and ctl.sock: from then on it is exactly a
 * freshly launched supervisor of that spec (same identity fields in the marker, same start
 * barrier). A refusal throws WarmRefusedError (the supervisor is unchanged and still warm).
 */
export async function handOverSpec(warm: WarmSupervisor, spec: SupervisorSpec, options: { readonly proc?: ProcFs | undefined; readonly startTimeoutMs?: number } = {}): Promise<SupervisorHandle> {
  assertValidSpec(spec, Date.now());
  if (spec.runDir !== warm.runDir) throw new SupervisorLaunchError(`spec.run_dir ${spec.runDir} is not the warm supervisor's ${warm.runDir}`);
  const identity = warm.marker.supervisor;
  const alive = identity ? await verifySupervisorIdentity(create(OwnerMarkerSchema, { supervisor: identity, pidNamespace: warm.marker.pidNamespace }), options.proc) : "gone";
  if (alive !== "alive") throw new WarmUnavailableError(`the warm supervisor pid ${identity?.pid} is ${alive}`);
  const observer = readPidNamespace("/proc", "self") ?? "";
  const written = create(SupervisorSpecSchema, { ...spec, observerPidNamespace: observer });
  const answer = await sendWarmRequest(warm.runDir, { case: "spec", value: toBinary(SupervisorSpecSchema, written) });
  if (!answer.accepted) throw new WarmRefusedError(answer.errorCode, answer.errorMessage);
  let exited = false;
  void warm.exited.then(() => (exited = true));
  const until = Date.now() + (options.startTimeoutMs ?? 10_000);
  for (;;) {
    if (existsSync(join(warm.runDir, RunDirFiles.marker)) && existsSync(join(warm.runDir, RunDirFiles.socket))) break;
    if (exited) throw new SupervisorLaunchError("the warm supervisor exited after taking the spec, before it was ready");
    if (Date.now() >= until) throw new SupervisorLaunchError("the warm supervisor took the spec but wrote no owner marker in time");
    await new Promise((r) => setTimeout(r, 2));
  }
  const { marker, pid } = await startedMarker(warm.runDir, { pid: warm.pid, pidNamespace: warm.marker.pidNamespace || undefined }, observer);
  if (marker.supervisor?.startTimeTicks !== identity?.startTimeTicks) throw new SupervisorLaunchError("the owner marker names another process than the warm marker");
  return handleOf(warm.runDir, marker, pid, options.proc);
}

/**
 * Renames a warm supervisor's run directory to `to` (which must not exist, on the same
 * filesystem), so the job's run directory is where a fresh launch would have made it; the
 * supervisor recognises its directory by inode. Returns the moved supervisor.
 */
export async function moveWarmSupervisor(warm: WarmSupervisor, to: string): Promise<WarmSupervisor> {
  if (existsSync(to)) throw new SupervisorLaunchError(`run dir ${to} was already used`);
  await rename(warm.runDir, to);
  return { ...warm, runDir: to };
}

/** Asks a warm supervisor that owns nothing to exit; true when it accepted. */
export async function retireWarmSupervisor(runDir: string): Promise<boolean> {
  const answer = await sendWarmRequest(runDir, { case: "retire", value: {} }, 3000).catch(() => undefined);
  return answer?.accepted === true;
}
