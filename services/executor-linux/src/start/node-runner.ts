import type { NodeKey } from "@seraph/attestation";
import type { Client } from "@connectrpc/connect";
import type { Logger, Signals } from "@seraph/kit";
import type { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { FacilityReport } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { ProcFs } from "../native/proc-fs.js";
import type { FileDigestCache } from "../profile/file-digests.js";
import type { RuntimeDigestCache } from "../profile/index.js";
import type { NodeIdentity } from "../runner/registration.js";
import { startRunner, type Runner } from "../runner/runner.js";
import type { ContainmentSettings } from "../supervisor-client/node-containment.js";

/** What the node's job runner is started with, once the node is registered. */
export interface NodeRunnerInput {
  readonly jobs: Client<typeof JobsService>;
  /** The node's Ed25519 key (loaded at start): signs receipts. */
  readonly signingKey: NodeKey;
  readonly signals: Signals;
  readonly identity: NodeIdentity;
  readonly dataDir: string;
  readonly log: Logger;
  readonly pollMs: number;
  readonly facilities: FacilityReport;
  readonly proc: ProcFs;
  readonly testBootIdFile?: string | undefined;
  readonly repositoryRoots: readonly string[];
  readonly supervisorHostSocket?: string | undefined;
  readonly containmentSettings: ContainmentSettings;
  readonly runtimeDigests: RuntimeDigestCache;
  readonly fileDigests: FileDigestCache;
  readonly supervisorRuntime: string | undefined;
  readonly supervisorEntry: string;
  /** One warm supervisor per slot when set. */
  readonly warmSlots: number | undefined;
  /** SERAPH_MIN_FREE_BYTES (default 256 MiB). */
  readonly minFreeBytes?: number | undefined;
}

/**
 * Starts the job runner. The node's Ed25519 key (generated at first start, 0600 in the data
 * directory) is its identity towards the jobs service and signs every receipt; its public half
 * is <data dir>/node-key.pub.
 */
export function startNodeRunner(i: NodeRunnerInput): Runner {
  const signingKey = i.signingKey;
  return startRunner({
    jobs: i.jobs,
    signals: i.signals,
    identity: i.identity,
    signingKey,
    dataDir: i.dataDir,
    log: i.log,
    pollMs: i.pollMs,
    facilities: () => i.facilities,
    proc: i.proc,
    testBootIdFile: i.testBootIdFile,
    repositoryRoots: i.repositoryRoots,
    supervisorHost: i.supervisorHostSocket === undefined ? undefined : { socketPath: i.supervisorHostSocket, tokenFile: `${i.supervisorHostSocket}.token` },
    containment: { settings: i.containmentSettings, facilities: i.facilities.containment },
    runtimeDigests: i.runtimeDigests,
    fileDigests: i.fileDigests,
    supervisorRuntime: i.supervisorRuntime,
    supervisorEntry: i.supervisorEntry,
    warmSlots: i.warmSlots,
    minFreeBytes: i.minFreeBytes,
  });
}
