import type { Client } from "@connectrpc/connect";
import type { Logger, Signals } from "@seraph/kit";
import type { SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import type { ApiDatabase } from "../db/schema.js";
import type { ApiLimiters } from "../limits.js";
import type { ModelClientDeps } from "../model-route/model-client.js";
import type { NodeDirectory } from "../nodes/node-directory.js";

/** What the repair service depends on. */
export interface RepairServiceDeps {
  readonly db: Kysely<ApiDatabase>;
  readonly signals: Signals;
  readonly log: Logger;
  readonly nodes: NodeDirectory;
  readonly jobs: Client<typeof JobsService>;
  /** Settings before any save. */
  readonly defaults: () => SandboxSettings;
  /** Clock (ms); tests move it to expire documents. */
  readonly now?: () => number;
  /** Slow poll of WatchRepair, so a lost signal only delays (default 2 s). */
  readonly watchPollMs?: number;
  /** Per-principal creation rates (repairs, proposals). */
  readonly limiters: ApiLimiters;
  /** Model route transport overrides (tests). */
  readonly model?: Pick<ModelClientDeps, "fetch" | "sleep">;
}

/** What every repair RPC module takes: the service's dependencies with the clock and the watch poll resolved. */
export interface RepairDeps extends RepairServiceDeps {
  readonly now: () => number;
  readonly watchPollMs: number;
}

/** Resolves the defaults of `deps` (clock: Date.now; WatchRepair's slow poll: 2 s). */
export function createRepairDeps(deps: RepairServiceDeps): RepairDeps {
  return { ...deps, now: deps.now ?? Date.now, watchPollMs: deps.watchPollMs ?? 2000 };
}
