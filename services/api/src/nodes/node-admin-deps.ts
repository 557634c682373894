import type { Client } from "@connectrpc/connect";
import { PermissionDeniedError, type AuthenticatedPrincipal, type Logger } from "@seraph/kit";
import type { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import type { ApiDatabase } from "../db/schema.js";
import { isInstanceOperator } from "../principals/principal.repository.js";

/** What the node administration RPCs depend on. */
export interface NodeAdminDeps {
  readonly db: Kysely<ApiDatabase>;
  readonly log: Logger;
  /** The jobs service, which records cordons and fences and refuses a fenced node's calls. */
  readonly jobs: Client<typeof JobsService>;
}

/** The bound on one jobs-service call of node administration. */
export const NODE_ADMIN_TIMEOUT_MS = 15_000;

/**
 * Refuses anyone but the instance operator (a root principal recorded as instance operator):
 * PERMISSION_DENIED `operator_required`, before anything is read from or sent to the jobs service.
 */
export async function requireInstanceOperator(deps: NodeAdminDeps, p: AuthenticatedPrincipal, what: string): Promise<void> {
  if (p.id !== p.rootId || !(await isInstanceOperator(deps.db, p.id))) {
    throw new PermissionDeniedError("operator_required", `Only the instance operator may ${what}.`);
  }
}
