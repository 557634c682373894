import type { Kysely, Migration } from "kysely";
import { migrateToLatest, type Logger } from "@seraph/kit";
import { initial } from "./migrations/2026-11-30-0001-initial.js";
import { adoptionFences } from "./migrations/2026-11-30-0002-adoption-fences.js";
import { fairShareIndexes } from "./migrations/2026-12-01-0100-fair-share-indexes.js";
import { deadlinePreflight } from "./migrations/2026-12-01-0200-deadline-preflight.js";
import { runningStep } from "./migrations/2026-12-01-0300-running-step.js";
import { jobStateCheck } from "./migrations/2026-12-02-0100-job-state-check.js";
import { nodeFenceCordon } from "./migrations/2026-12-04-0100-node-fence-cordon.js";
import { jobPhases } from "./migrations/2026-12-06-0200-job-phases.js";
import { nodeCredentials } from "./migrations/2026-12-06-0300-node-credentials.js";
import type { JobsDatabase } from "./schema.js";

/** Every jobs migration, by dated name. Append only; never edit one that has shipped. */
export const JOBS_MIGRATIONS: Record<string, Migration> = {
  "2026-11-30-0001-initial": initial,
  "2026-11-30-0002-adoption-fences": adoptionFences,
  "2026-12-01-0100-fair-share-indexes": fairShareIndexes,
  "2026-12-01-0200-deadline-preflight": deadlinePreflight,
  "2026-12-01-0300-running-step": runningStep,
  "2026-12-02-0100-job-state-check": jobStateCheck,
  "2026-12-04-0100-node-fence-cordon": nodeFenceCordon,
  "2026-12-06-0200-job-phases": jobPhases,
  "2026-12-06-0300-node-credentials": nodeCredentials,
};

/** Brings the jobs tables to the latest schema under Kysely's migration lock. */
export function migrateJobs(db: Kysely<JobsDatabase>, log: Logger): Promise<void> {
  return migrateToLatest(db, JOBS_MIGRATIONS, "jobs_migrations", log);
}
