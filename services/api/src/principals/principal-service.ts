import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { FailedPreconditionError, NotFoundError, PermissionDeniedError, requirePrincipal } from "@seraph/kit";
import { ApiTokenSchema, PrincipalSchema, PrincipalService, type ApiToken } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import type { Kysely } from "kysely";
import type { ApiDatabase } from "../db/schema.js";
import { apiCountLimits, createApiLimiters, type ApiCountLimits, type ApiLimiters } from "../limits.js";
import { checkPrincipalRoom, checkTokenRoom } from "./principal-limits.js";
import { insertPrincipal, insertToken, isInstanceOperator, lockRootCounts } from "./principal.repository.js";
import type { Revocation } from "./revocation.js";

interface TokenRow {
  id: string;
  name: string;
  principal_id: string;
  prefix: string;
  created_at: Date;
  revoked_at: Date | null;
}

function tokenMessage(row: TokenRow): ApiToken {
  return create(ApiTokenSchema, {
    id: row.id,
    name: row.name,
    principalId: row.principal_id,
    prefix: row.prefix,
    createdUnixMs: BigInt(row.created_at.getTime()),
    revokedUnixMs: row.revoked_at ? BigInt(row.revoked_at.getTime()) : 0n,
  });
}

/** What the principal service needs. */
export interface PrincipalServiceDeps {
  readonly db: Kysely<ApiDatabase>;
  /** Ends a revoked token's open streams on every replica (see startRevocation). */
  readonly revocation?: Pick<Revocation, "revoked"> | undefined;
  /** CreatePrincipal and CreateToken rates (per principal and per root); default: the API's defaults. */
  readonly limiters?: Pick<ApiLimiters, "principals" | "tokens">;
  /** Bounds on principals and unrevoked tokens; default DEFAULT_API_COUNT_LIMITS. */
  readonly countLimits?: ApiCountLimits;
}

/**
 * Principals and tokens: a caller manages only its own tokens (another's is NOT_FOUND); secrets
 * are returned once and stored as SHA-256; a principal's last live token cannot be revoked; a
 * revoked token's open streams end at once with UNAUTHENTICATED, on every replica. Creating
 * principals and tokens is rate-limited and bounded in count, per principal and per operator
 * root (RESOURCE_EXHAUSTED naming the limit; a refusal stores nothing).
 */
export function createPrincipalService(deps: PrincipalServiceDeps): ServiceImpl<typeof PrincipalService> {
  const { db } = deps;
  const limiters = deps.limiters ?? createApiLimiters();
  const counts = deps.countLimits ?? apiCountLimits();
  return {
    async whoAmI(_req, ctx) {
      const p = requirePrincipal(ctx);
      const row = await db.selectFrom("principals").selectAll().where("id", "=", p.id).executeTakeFirstOrThrow();
      return { principal: create(PrincipalSchema, { id: row.id, name: row.name, rootId: row.root_id, createdUnixMs: BigInt(row.created_at.getTime()) }) };
    },
    async createToken(req, ctx) {
      const p = requirePrincipal(ctx);
      await limiters.tokens.consume(p);
      const { row, secret } = await db.transaction().execute(async (trx) => {
        checkTokenRoom(counts, await lockRootCounts(trx, p.rootId, p.id));
        return insertToken(trx, p.id, req.name);
      });
      return { token: tokenMessage(row), secret };
    },
    async listTokens(_req, ctx) {
      const p = requirePrincipal(ctx);
      const rows = await db.selectFrom("api_tokens").selectAll().where("principal_id", "=", p.id).orderBy("created_at").execute();
      return { tokens: rows.map(tokenMessage) };
    },
    async revokeToken(req, ctx) {
      const p = requirePrincipal(ctx);
      const row = await db.transaction().execute(async (trx) => {
        // Lock the principal's tokens so two revocations cannot both see "another one is left".
        const live = await trx.selectFrom("api_tokens").select(["id", "revoked_at"]).where("principal_id", "=", p.id).forUpdate().execute();
        const target = live.find((t) => t.id === req.tokenId);
        if (!target) throw new NotFoundError("token", req.tokenId);
        if (target.revoked_at === null && live.filter((t) => t.revoked_at === null).length === 1) {
          // An operator root without a live token could never recover its jobs' slots again.
          throw new FailedPreconditionError("last_token", "This is your last unrevoked token; create another one before revoking it.", { field: "token_id" });
        }
        return trx
          .updateTable("api_tokens")
          .set((eb) => ({ revoked_at: eb.fn.coalesce("revoked_at", eb.val(new Date())) }))
          .where("id", "=", req.tokenId)
          .returningAll()
          .executeTakeFirstOrThrow();
      });
      // After the commit: a stream ended now could otherwise re-authenticate against the old row.
      deps.revocation?.revoked([row.id]);
      return { token: tokenMessage(row) };
    },
    async createPrincipal(req, ctx) {
      const p = requirePrincipal(ctx);
      // A new operator root is a new tenant: only the instance operator may create one. Any
      // root may add members to its own root.
      if (req.newRoot && !(p.id === p.rootId && (await isInstanceOperator(db, p.id)))) {
        throw new PermissionDeniedError("operator_required", "Only the instance operator may create a new operator root.");
      }
      await limiters.principals.consume(p);
      return db.transaction().execute(async (trx) => {
        if (!req.newRoot) checkPrincipalRoom(counts, await lockRootCounts(trx, p.rootId));
        const row = await insertPrincipal(trx, req.name, req.newRoot ? undefined : p.rootId);
        const { row: token, secret } = await insertToken(trx, row.id, `${req.name} (created by ${p.name})`);
        return {
          principal: create(PrincipalSchema, { id: row.id, name: row.name, rootId: row.root_id, createdUnixMs: BigInt(row.created_at.getTime()) }),
          token: tokenMessage(token),
          secret,
        };
      });
    },
  };
}
