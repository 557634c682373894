import type { ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "@seraph/kit";
import type { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import type { FacilityReport, NodeContainment } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { FileDigestCache } from "../profile/file-digests.js";
import type { RuntimeDigestCache } from "../profile/index.js";

/** What the executor node API depends on. */
export interface ExecutorServiceDeps {
  readonly nodeId: string;
  /** Absolute directories under which repositories may be used on this node. */
  readonly repositoryRoots: readonly string[];
  readonly log: Logger;
  /** The Linux facility report; default: probe in a short-lived child (never in this process). */
  readonly readFacilities?: () => Promise<FacilityReport>;
  /** The supervisor bundle checked as a trusted helper (default: this package's dist/supervisor-bundle/supervisor.mjs). */
  readonly supervisorEntry?: string;
  /** The supervisors' Node (default: the pinned runtime). */
  readonly supervisorRuntime?: string | undefined;
  /** How this node contains jobs (default: the default settings over a fresh facility probe). */
  readonly containment?: () => Promise<NodeContainment>;
  /** CancelJob belongs to the job runner; when absent the method answers UNIMPLEMENTED. */
  readonly cancelJob?: ServiceImpl<typeof ExecutorService>["cancelJob"];
  /** ReadJobOutput belongs to the job runner; when absent the method answers UNIMPLEMENTED. */
  readonly readJobOutput?: ServiceImpl<typeof ExecutorService>["readJobOutput"];
  /**
   * The executor process's one runtime-digest cache (stat stamp: device, inode, size, mtime,
   * ctime), shared with staging: Inspect and CheckPrerequisites re-hash the runtime only when its
   * stamp changed. Absent: a cache private to this service instance.
   */
  readonly runtimeDigests?: RuntimeDigestCache;
  /**
   * The executor process's one cache of repository file digests by stat stamp, shared with
   * staging: Inspect (at approval) reads again only the files whose stamp changed since they were
   * last read. Absent: every Inspect reads every file.
   */
  readonly fileDigests?: FileDigestCache;
  /**
   * The users this node's commands run as, one per slot (empty when they run as the executor's
   * own user). CheckPrerequisites asks the kernel, as each, whether it can execute the runtime:
   * the supervisor starts the runtime before the switch takes effect, but what the runtime starts
   * by its own path (`node --test`'s per-file processes) needs the job user's access. Absent: no check.
   */
  readonly jobUsers?: () => Promise<readonly SlotJobUser[]>;
}

/** One slot's job user, as CheckPrerequisites checks it. */
export interface SlotJobUser {
  readonly slot: number;
  readonly uid: number;
  readonly gid: number;
  readonly name: string;
}

/** What every RPC module of the executor service shares: its deps with their defaults resolved. */
export interface ExecutorServiceContext {
  readonly deps: ExecutorServiceDeps;
  readonly roots: readonly string[];
  readonly readFacilities: () => Promise<FacilityReport>;
  readonly containment: () => Promise<NodeContainment>;
  readonly digestCache: RuntimeDigestCache;
}
