import { randomBytes } from "node:crypto";
import { existsSync, lstatSync, mkdirSync, realpathSync, unlinkSync } from "node:fs";
import type { Socket } from "node:net";
import { dirname } from "node:path";
import type { Logger } from "@seraph/kit";
import type { NativeSystem } from "../native/native-system.js";
import { readPidNamespace } from "../native/pid-namespace.js";
import { supervisorRuntimeOf } from "../supervisor-client/launch.js";
import { defaultSupervisorEntry, supervisorCompileCacheDir } from "../supervisor-client/paths.js";
import { retireWarmSupervisor } from "../supervisor-client/warm.js";
import { writeFileAtomic } from "../supervisor/atomic-file.js";
import { listenOneRequest } from "../supervisor/one-request-server.js";
import { launchHandler, refuseLaunch, type HostChildren } from "./launch-handler.js";
import { privateDirOwnedByUs } from "./launch-checks.js";

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

/** The supervisor host was started without its per-job supervisor bundle (the message names it and the fix). */
export class SupervisorBundleMissingError extends Error {
  override readonly name = "SupervisorBundleMissingError";
}

/** Largest request frame accepted (a token and a path). */
const MAX_REQUEST_BYTES = 16 * 1024;

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
  const entry = o.supervisorEntry ?? defaultSupervisorEntry();
  if (!existsSync(entry)) {
    throw new SupervisorBundleMissingError(`the supervisor host cannot start supervisors: the per-job supervisor bundle ${entry} is missing; run \`npm run build\` (it builds the bundle, \`tsc -b\` does not)`);
  }
  claimSocketPath(o.socketPath);
  const pidNamespace = readPidNamespace("/proc", "self") ?? "";
  const token = randomBytes(32).toString("hex");
  const children: HostChildren = { pids: new Set(), warmDirs: new Map(), waiters: [] };
  const handle = launchHandler({
    log,
    token: Buffer.from(token, "utf8"),
    entry,
    nodePath: supervisorRuntimeOf(o.nodePath),
    compileCacheDir: o.compileCacheDir ?? supervisorCompileCacheDir(o.dataDir),
    startTimeoutMs: o.startTimeoutMs ?? 10_000,
    dataDirReal: realpathSync(o.dataDir),
    pidNamespace,
    children,
  });
  const refuse = (socket: Socket, code: string, message: string) => refuseLaunch(log, socket, code, message);
  const server = await listenOneRequest({ socketPath: o.socketPath, native: o.native, maxRequestBytes: MAX_REQUEST_BYTES, onRequest: handle, refuse });
  // The token becomes readable only once the socket exists: a client that sees it can connect.
  writeFileAtomic(hostTokenFile(o.socketPath), `${token}\n`, 0o600);
  log.info({ event: "listening", socketPath: o.socketPath, pidNamespace }, "supervisor host listening");
  return {
    pidNamespace,
    children: children.pids,
    idle: () => {
      if (children.pids.size === 0) return Promise.resolve();
      // The children are unref'd (spawnSupervisorProcess): without a ref'd handle, a host whose
      // server is closed would simply exit, and its namespace (with every supervisor) with it.
      const hold = setInterval(() => undefined, 60_000);
      return new Promise<void>((r) => children.waiters.push(r)).finally(() => clearInterval(hold));
    },
    async close() {
      await server.close();
      // Warm supervisors own nothing: retired, so a draining host does not wait on them (one that
      // took a spec refuses, already_owns_job, and runs its job to the end).
      await Promise.all([...children.warmDirs.entries()].filter(([pid]) => children.pids.has(pid)).map(([, runDir]) => retireWarmSupervisor(runDir)));
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

/** Makes the socket's directory (0700, ours) and removes a stale socket; refuses anything else in its place. */
function claimSocketPath(socketPath: string): void {
  const dir = dirname(socketPath);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  privateDirOwnedByUs(dir, "socket directory");
  const st = lstatSync(socketPath, { throwIfNoEntry: false });
  if (st !== undefined) {
    if (!st.isSocket()) throw new Error(`${socketPath} exists and is not a socket`);
    unlinkSync(socketPath);
  }
}
