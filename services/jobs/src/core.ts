import type { Logger } from "@seraph/kit";
import type { Kysely } from "kysely";
import type { AuthorityReader } from "./admission/authority.js";
import type { JobsDatabase } from "./db/schema.js";
import type { EventPublisher } from "./events/publisher.js";

/** What every jobs operation depends on. */
export interface JobsCore {
  readonly db: Kysely<JobsDatabase>;
  readonly publisher: EventPublisher;
  readonly authority: AuthorityReader;
  readonly log: Logger;
  /** Wall clock in ms (injectable for tests of expiry). */
  readonly now: () => number;
  /** Heartbeat age beyond which a node gets no reservations (scheduling only; never releases a held slot). */
  readonly nodeStaleMs: number;
}
