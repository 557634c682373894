import type { Kysely, Migration } from "kysely";
import { migrateToLatest, type Logger } from "@seraph/kit";
import { initial } from "./migrations/2026-11-30-0001-initial.js";
import { repairJourney } from "./migrations/2026-11-30-0002-repair-journey.js";
import { supervisorSource } from "./migrations/2026-11-30-0003-supervisor-source.js";
import { instanceOperator } from "./migrations/2026-11-30-0004-instance-operator.js";
import { nodeContainment } from "./migrations/2026-12-01-0101-node-containment.js";
import { repositoryTenancy } from "./migrations/2026-12-01-0201-repository-tenancy.js";
import { baselineRuns } from "./migrations/2026-12-01-0301-baseline-runs.js";
import { jobsAuthorityViews } from "./migrations/2026-12-02-0101-jobs-authority-views.js";
import { repositoryHost } from "./migrations/2026-12-04-0101-repository-host.js";
import { repairAttempts } from "./migrations/2026-12-06-0101-repair-attempts.js";
import type { ApiDatabase } from "./schema.js";

/** Every API migration, by dated name. Append only; never edit one that has shipped. */
export const API_MIGRATIONS: Record<string, Migration> = {
  "2026-11-30-0001-initial": initial,
  "2026-11-30-0002-repair-journey": repairJourney,
  "2026-11-30-0003-supervisor-source": supervisorSource,
  "2026-11-30-0004-instance-operator": instanceOperator,
  "2026-12-01-0101-node-containment": nodeContainment,
  "2026-12-01-0201-repository-tenancy": repositoryTenancy,
  "2026-12-01-0301-baseline-runs": baselineRuns,
  "2026-12-02-0101-jobs-authority-views": jobsAuthorityViews,
  "2026-12-04-0101-repository-host": repositoryHost,
  "2026-12-06-0101-repair-attempts": repairAttempts,
};

/** Brings the API tables to the latest schema under Kysely's migration lock. */
export function migrateApi(db: Kysely<ApiDatabase>, log: Logger): Promise<void> {
  return migrateToLatest(db, API_MIGRATIONS, "api_migrations", log);
}
