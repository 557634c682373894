import { startPollLoop, type Logger, type OpenStreams, type Signals } from "@seraph/kit";
import type { Kysely } from "kysely";
import type { ApiDatabase } from "../db/schema.js";

/** The signal every API replica hears when a token is revoked: `seraph.tokens.<token id>.revoked`, empty body. */
export const TOKEN_REVOKED_SUBJECTS = "seraph.tokens.*.revoked";

/** The revocation signal of one token. */
export function tokenRevokedSubject(tokenId: string): string {
  return `seraph.tokens.${tokenId}.revoked`;
}

/** The message a stream ended by revocation carries (UNAUTHENTICATED). */
export const REVOKED_MESSAGE = "the bearer token was revoked";

/** How often each replica re-checks the tokens of its open streams against the token table (a lost signal's bound). */
export const DEFAULT_REVOCATION_RECHECK_MS = 5000;

/** What revocation needs. */
export interface RevocationDeps {
  readonly db: Kysely<ApiDatabase>;
  readonly signals: Signals;
  readonly streams: OpenStreams;
  readonly log: Logger;
  readonly recheckMs?: number;
}

/** Ends revoked tokens' streams on every replica. */
export interface Revocation {
  /** Called after a revocation committed: ends this replica's streams of `tokenIds` and signals the others. */
  revoked(tokenIds: readonly string[]): void;
  /** Stops hearing signals and re-checking. */
  stop(): Promise<void>;
}

/**
 * Revocation is immediate on every replica: the replica that revoked ends its own streams of the
 * token at once and publishes `seraph.tokens.<id>.revoked`; every replica (itself included) ends
 * its streams of that token when it hears it. A lost signal delays the end by at most one
 * re-check: every `recheckMs` each replica looks up the tokens of its open streams and ends those
 * no longer live. There is no authentication cache: every RPC and NATS request reads the token
 * table, so a revoked token's next call is refused anyway.
 */
export function startRevocation(deps: RevocationDeps): Revocation {
  const { streams, log } = deps;
  const end = (tokenIds: readonly string[], why: string) => {
    const n = streams.end({ tokenIds }, REVOKED_MESSAGE);
    if (n > 0) log.info({ tokenIds, streams: n, why }, "ended the open streams of revoked tokens");
  };
  const off = deps.signals.subscribe(TOKEN_REVOKED_SUBJECTS, (m) => {
    const id = m.subject.split(".")[2];
    if (id) end([id], "signal");
  });
  const recheck = startPollLoop({
    pollMs: deps.recheckMs ?? DEFAULT_REVOCATION_RECHECK_MS,
    pass: async () => {
      const ids = streams.tokenIds();
      if (ids.length === 0) return;
      const live = await deps.db.selectFrom("api_tokens").select("id").where("id", "in", ids).where("revoked_at", "is", null).execute();
      const liveIds = new Set(live.map((r) => r.id));
      const gone = ids.filter((id) => !liveIds.has(id));
      if (gone.length > 0) end(gone, "recheck");
    },
    onError: (err, n) => {
      if (n === 1 || n % 10 === 0) log.warn({ err, consecutiveFailures: n }, "could not re-check the tokens of open streams");
    },
  });
  return {
    revoked(tokenIds) {
      end(tokenIds, "revoked here");
      for (const id of tokenIds) deps.signals.publish(tokenRevokedSubject(id), new Uint8Array());
    },
    async stop() {
      off();
      await recheck.stop();
    },
  };
}
