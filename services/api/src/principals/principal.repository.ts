import { sql, type Kysely, type Transaction } from "kysely";
import { hashToken, newId, newTokenSecret, type AuthenticatedPrincipal } from "@seraph/kit";
import type { ApiDatabase } from "../db/schema.js";

type Db = Kysely<ApiDatabase> | Transaction<ApiDatabase>;

/** The principal holding an unrevoked token with this secret, or undefined. */
export async function findPrincipalByToken(db: Db, secret: string): Promise<AuthenticatedPrincipal | undefined> {
  const row = await db
    .selectFrom("api_tokens")
    .innerJoin("principals", "principals.id", "api_tokens.principal_id")
    .select(["principals.id", "principals.name", "principals.root_id", "api_tokens.id as token_id"])
    .where("api_tokens.token_sha256", "=", hashToken(secret))
    .where("api_tokens.revoked_at", "is", null)
    .executeTakeFirst();
  return row ? { id: row.id, name: row.name, rootId: row.root_id, tokenId: row.token_id } : undefined;
}

/** Creates a token for `principalId`; returns its row and the secret (shown once). */
export async function insertToken(db: Db, principalId: string, name: string) {
  const secret = newTokenSecret();
  const row = await db
    .insertInto("api_tokens")
    .values({ id: newId(), principal_id: principalId, name, token_sha256: hashToken(secret), prefix: secret.slice(0, 10), revoked_at: null })
    .returningAll()
    .executeTakeFirstOrThrow();
  return { row, secret };
}

/** Creates a principal (its own root unless `rootId` is given). */
export async function insertPrincipal(db: Db, name: string, rootId?: string, instanceOperator = false) {
  const id = newId();
  return db
    .insertInto("principals")
    .values({ id, name, root_id: rootId ?? id, instance_operator: instanceOperator })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/**
 * Creates the operator principal and its first token when no principal exists yet, in one
 * transaction under an advisory lock (two API replicas starting together create one operator).
 * Returns the secret when it created one, otherwise undefined.
 */
export async function ensureOperator(db: Kysely<ApiDatabase>): Promise<{ principalId: string; secret: string } | undefined> {
  return db.transaction().execute(async (trx) => {
    await sql`select pg_advisory_xact_lock(740001)`.execute(trx);
    const existing = await trx.selectFrom("principals").select("id").limit(1).executeTakeFirst();
    if (existing) return undefined;
    const p = await insertPrincipal(trx, "operator", undefined, true);
    const { secret } = await insertToken(trx, p.id, "operator (first start)");
    return { principalId: p.id, secret };
  });
}

/** Whether `principalId` is the instance operator (the root created on first start). */
export async function isInstanceOperator(db: Db, principalId: string): Promise<boolean> {
  const row = await db.selectFrom("principals").select("instance_operator").where("id", "=", principalId).executeTakeFirst();
  return row?.instance_operator === true;
}

/** How many principals and unrevoked tokens one root (and one of its principals) has. */
export interface RootCounts {
  readonly principals: number;
  readonly rootTokens: number;
  readonly principalTokens: number;
}

/**
 * Locks the root's principal row, so creations in one root are counted one at a time (two
 * concurrent CreateToken calls cannot both see room for one more), then counts the root's
 * principals and unrevoked tokens, and `principalId`'s unrevoked tokens (0 when undefined).
 */
export async function lockRootCounts(trx: Transaction<ApiDatabase>, rootId: string, principalId?: string): Promise<RootCounts> {
  await trx.selectFrom("principals").select("id").where("id", "=", rootId).forUpdate().executeTakeFirst();
  const principals = await trx.selectFrom("principals").select((eb) => eb.fn.countAll<string>().as("n")).where("root_id", "=", rootId).executeTakeFirstOrThrow();
  const rootTokens = await trx
    .selectFrom("api_tokens")
    .innerJoin("principals", "principals.id", "api_tokens.principal_id")
    .select((eb) => eb.fn.countAll<string>().as("n"))
    .where("principals.root_id", "=", rootId)
    .where("api_tokens.revoked_at", "is", null)
    .executeTakeFirstOrThrow();
  const mine =
    principalId === undefined
      ? { n: "0" }
      : await trx
          .selectFrom("api_tokens")
          .select((eb) => eb.fn.countAll<string>().as("n"))
          .where("principal_id", "=", principalId)
          .where("revoked_at", "is", null)
          .executeTakeFirstOrThrow();
  return { principals: Number(principals.n), rootTokens: Number(rootTokens.n), principalTokens: Number(mine.n) };
}
