import type { ConnectRouter } from "@connectrpc/connect";
import type { Logger, Signals } from "@seraph/kit";
import { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import type { JobsDatabase } from "./db/schema.js";

/** What the jobs service's handlers depend on. */
export interface JobsDeps {
  readonly db: Kysely<JobsDatabase>;
  readonly signals: Signals;
  readonly log: Logger;
}

/** Registers the internal jobs API. Methods without an implementation answer UNIMPLEMENTED. */
export function createJobsRoutes(_deps: JobsDeps): (router: ConnectRouter) => void {
  return (router) => {
    router.service(JobsService, {});
  };
}
