import { Code } from "@connectrpc/connect";
import { hashToken } from "@seraph/kit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectRefused, startApiHarness, type ApiHarness } from "../../testing/api-harness.js";

describe("PrincipalService (in-memory transport, real PostgreSQL)", () => {
  let h: ApiHarness;
  beforeAll(async () => {
    h = await startApiHarness();
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("refuses every RPC without a token, with a malformed one and with an unknown one (UNAUTHENTICATED), changing nothing", async () => {
    const before = await h.rows("principals", "api_tokens");
    for (const c of [h.clients(undefined), h.clients("short"), h.clients(`sk_${"x".repeat(40)}`)]) {
      await expectRefused(c.principals.whoAmI({}), Code.Unauthenticated, "unauthenticated");
      await expectRefused(c.principals.createToken({ name: "t" }), Code.Unauthenticated, "unauthenticated");
      await expectRefused(c.principals.listTokens({}), Code.Unauthenticated, "unauthenticated");
      await expectRefused(c.principals.revokeToken({ tokenId: "00000000-0000-4000-8000-000000000000" }), Code.Unauthenticated, "unauthenticated");
      await expectRefused(c.principals.createPrincipal({ name: "p" }), Code.Unauthenticated, "unauthenticated");
    }
    expect(await h.rows("principals", "api_tokens")).toEqual(before);
  });

  it("WhoAmI names the caller and its operator root", async () => {
    expect((await h.operator.c.principals.whoAmI({})).principal).toMatchObject({ id: h.operator.id, name: "operator", rootId: h.operator.id });
    const member = await h.principal("member-who");
    expect((await member.c.principals.whoAmI({})).principal).toMatchObject({ id: member.id, name: "member-who", rootId: h.operator.id });
  });

  it("CreateToken refuses a bad name naming the field, stores only the SHA-256 of the secret, and the secret authenticates", async () => {
    const before = await h.rows("api_tokens");
    await expectRefused(h.operator.c.principals.createToken({ name: "" }), Code.InvalidArgument, undefined, "name");
    await expectRefused(h.operator.c.principals.createToken({ name: "x".repeat(101) }), Code.InvalidArgument, undefined, "name");
    await expectRefused(h.operator.c.principals.createToken({ name: "a\u0000b" }), Code.InvalidArgument, "string_contains_nul", "name");
    expect(await h.rows("api_tokens")).toEqual(before);

    const created = await h.operator.c.principals.createToken({ name: "ci" });
    expect(created.secret).toMatch(/^sk_[A-Za-z0-9_-]{50,}$/);
    expect(created.token).toMatchObject({ name: "ci", principalId: h.operator.id, prefix: created.secret.slice(0, 10), revokedUnixMs: 0n });
    const row = await h.db.selectFrom("api_tokens").selectAll().where("id", "=", created.token!.id).executeTakeFirstOrThrow();
    expect(row.token_sha256).toBe(hashToken(created.secret));
    expect(JSON.stringify(await h.rows("api_tokens"))).not.toContain(created.secret);
    expect((await h.clients(created.secret).principals.whoAmI({})).principal?.id).toBe(h.operator.id);
  });

  it("ListTokens lists only the caller's own tokens", async () => {
    const a = await h.principal("lister-a");
    const b = await h.principal("lister-b");
    await a.c.principals.createToken({ name: "a-second" });
    const mine = (await a.c.principals.listTokens({})).tokens;
    expect(mine.map((t) => t.name).sort()).toEqual(["a-second", "lister-a (created by operator)"]);
    expect(mine.every((t) => t.principalId === a.id)).toBe(true);
    expect((await b.c.principals.listTokens({})).tokens.map((t) => t.principalId)).toEqual([b.id]);
  });

  it("RevokeToken: another's token is NOT_FOUND, the last live one is FAILED_PRECONDITION last_token, neither changes a row", async () => {
    const a = await h.principal("revoker-a");
    const b = await h.principal("revoker-b");
    const bToken = (await b.c.principals.listTokens({})).tokens[0]!;
    const aToken = (await a.c.principals.listTokens({})).tokens[0]!;
    const before = await h.rows("api_tokens");
    await expectRefused(a.c.principals.revokeToken({ tokenId: bToken.id }), Code.NotFound, "not_found");
    await expectRefused(a.c.principals.revokeToken({ tokenId: aToken.id }), Code.FailedPrecondition, "last_token", "token_id");
    await expectRefused(a.c.principals.revokeToken({ tokenId: "not-a-uuid" }), Code.InvalidArgument, undefined, "token_id");
    expect(await h.rows("api_tokens")).toEqual(before);
    expect((await b.c.principals.whoAmI({})).principal?.id).toBe(b.id);
  });

  it("RevokeToken revokes once (a repeat keeps the first time) and the revoked secret no longer authenticates", async () => {
    const a = await h.principal("revoker-c");
    const spare = await a.c.principals.createToken({ name: "spare" });
    const revoked = (await a.c.principals.revokeToken({ tokenId: spare.token!.id })).token!;
    expect(revoked.revokedUnixMs).toBeGreaterThan(0n);
    const row = await h.db.selectFrom("api_tokens").select("revoked_at").where("id", "=", spare.token!.id).executeTakeFirstOrThrow();
    expect(row.revoked_at?.getTime()).toBe(Number(revoked.revokedUnixMs));
    await expectRefused(h.clients(spare.secret).principals.whoAmI({}), Code.Unauthenticated, "unauthenticated");
    await new Promise((r) => setTimeout(r, 5));
    const again = (await a.c.principals.revokeToken({ tokenId: spare.token!.id })).token!;
    expect(again.revokedUnixMs).toBe(revoked.revokedUnixMs);
    // The revoked one does not count as live: the remaining token is the last.
    const live = (await a.c.principals.listTokens({})).tokens.filter((t) => t.revokedUnixMs === 0n);
    expect(live).toHaveLength(1);
    await expectRefused(a.c.principals.revokeToken({ tokenId: live[0]!.id }), Code.FailedPrecondition, "last_token");
    // The caller's own (revoked) secret cannot act at all.
    await expectRefused(h.clients(spare.secret).principals.revokeToken({ tokenId: live[0]!.id }), Code.Unauthenticated);
  });

  it("CreatePrincipal: only the instance operator creates a new root (PERMISSION_DENIED operator_required, nothing stored); members join the caller's root", async () => {
    const member = await h.principal("plain-member");
    const tenant = await h.principal("tenant-root", { newRoot: true });
    expect(tenant.rootId).toBe(tenant.id);
    expect(member.rootId).toBe(h.operator.id);
    const before = await h.rows("principals", "api_tokens");
    await expectRefused(member.c.principals.createPrincipal({ name: "escalate", newRoot: true }), Code.PermissionDenied, "operator_required");
    await expectRefused(tenant.c.principals.createPrincipal({ name: "sub-tenant", newRoot: true }), Code.PermissionDenied, "operator_required");
    await expectRefused(tenant.c.principals.createPrincipal({ name: "" }), Code.InvalidArgument, undefined, "name");
    expect(await h.rows("principals", "api_tokens")).toEqual(before);

    const joined = await tenant.c.principals.createPrincipal({ name: "tenant-member" });
    expect(joined.principal).toMatchObject({ name: "tenant-member", rootId: tenant.id });
    expect(joined.token).toMatchObject({ principalId: joined.principal!.id, name: "tenant-member (created by tenant-root)" });
    const stored = await h.db.selectFrom("principals").selectAll().where("id", "=", joined.principal!.id).executeTakeFirstOrThrow();
    expect(stored).toMatchObject({ root_id: tenant.id, instance_operator: false });
    expect((await h.clients(joined.secret).principals.whoAmI({})).principal?.rootId).toBe(tenant.id);
    const newRoot = await h.operator.c.principals.createPrincipal({ name: "second-tenant", newRoot: true });
    expect(newRoot.principal?.rootId).toBe(newRoot.principal?.id);
  });
});
