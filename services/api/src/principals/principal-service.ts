import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { FailedPreconditionError, NotFoundError, PermissionDeniedError, requirePrincipal } from "@seraph/kit";
import { ApiTokenSchema, PrincipalSchema, PrincipalService, type ApiToken } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import type { Kysely } from "kysely";
import type { ApiDatabase } from "../db/schema.js";
import { insertPrincipal, insertToken, isInstanceOperator } from "./principal.repository.js";

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

/**
 * Principals and tokens: a caller manages only its own tokens (another's is NOT_FOUND); secrets
 * are returned once and stored as SHA-256; a principal's last live token cannot be revoked.
 */
export function createPrincipalService(deps: { db: Kysely<ApiDatabase> }): ServiceImpl<typeof PrincipalService> {
  const { db } = deps;
  return {
    async whoAmI(_req, ctx) {
      const p = requirePrincipal(ctx);
      const row = await db.selectFrom("principals").selectAll().where("id", "=", p.id).executeTakeFirstOrThrow();
      return { principal: create(PrincipalSchema, { id: row.id, name: row.name, rootId: row.root_id, createdUnixMs: BigInt(row.created_at.getTime()) }) };
    },
    async createToken(req, ctx) {
      const p = requirePrincipal(ctx);
      const { row, secret } = await insertToken(db, p.id, req.name);
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
      return { token: tokenMessage(row) };
    },
    async createPrincipal(req, ctx) {
      const p = requirePrincipal(ctx);
      // A new operator root is a new tenant: only the instance operator may create one. Any
      // root may add members to its own root.
      if (req.newRoot && !(p.id === p.rootId && (await isInstanceOperator(db, p.id)))) {
        throw new PermissionDeniedError("operator_required", "Only the instance operator may create a new operator root.");
      }
      return db.transaction().execute(async (trx) => {
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
