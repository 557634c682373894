import { Code, ConnectError } from "@connectrpc/connect";
import { errorInfo, reasonOf } from "@seraph/kit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_API_RATE_LIMITS } from "../limits.js";
import { expectRefused, startApiHarness, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { createPendingRepair } from "../../testing/journey.js";

// Issue 24 item 4: per-principal limits were per principal, and principals were free. After a
// tenant hit its creation rate it went on through a member it created itself; 4 members held 80
// WatchRepair streams for one root; 200 CreateToken calls were all accepted.

/** A member of `owner`'s root, created by `owner` itself. */
async function memberOf(h: ApiHarness, owner: TestPrincipal, name: string): Promise<TestPrincipal> {
  const res = await owner.c.principals.createPrincipal({ name });
  return { id: res.principal!.id, rootId: res.principal!.rootId, secret: res.secret, c: h.clients(res.secret) };
}

describe("limits per operator root, at the API's defaults for streams, tokens and principals (in-memory transport, real PostgreSQL)", () => {
  let h: ApiHarness;
  beforeAll(async () => {
    h = await startApiHarness({ rateLimits: { goalsPerMinute: 5, tokensPerMinute: DEFAULT_API_RATE_LIMITS.tokensPerMinute, principalsPerMinute: DEFAULT_API_RATE_LIMITS.principalsPerMinute } });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("a member the tenant created cannot continue past the root's creation rate (RESOURCE_EXHAUSTED rate_limited, scope root), storing nothing", async () => {
    const tenant = await h.principal("tenant-rate", { newRoot: true });
    for (let i = 0; i < 5; i++) await tenant.c.goals.createGoal({ title: `g${i}` });
    await expectRefused(tenant.c.goals.createGoal({ title: "sixth" }), Code.ResourceExhausted, "rate_limited");
    const member = await memberOf(h, tenant, "sock-puppet");
    const err = await expectRefused(member.c.goals.createGoal({ title: "through a member" }), Code.ResourceExhausted, "rate_limited");
    expect(err.rawMessage).toMatch(/^At most 5 goals per 60 s per operator root, all its principals together \(SERAPH_RATE_GOALS_PER_MINUTE=5\); retry in \d+ s\./);
    expect(errorInfo(err)?.metadata).toMatchObject({ limit: "SERAPH_RATE_GOALS_PER_MINUTE", scope: "root" });
    const goals = await h.db.selectFrom("goals").innerJoin("principals", "principals.id", "goals.owner_id").select("goals.id").where("principals.root_id", "=", tenant.id).execute();
    expect(goals).toHaveLength(5);
    // Another root's budget is its own.
    const other = await h.principal("tenant-other", { newRoot: true });
    expect((await other.c.goals.createGoal({ title: "fine" })).goal?.ownerId).toBe(other.id);
  });

  it("4 members hold at most the root's 32 streams together (16 each): the 33rd is RESOURCE_EXHAUSTED stream_limit naming streams_per_root", async () => {
    const tenant = await h.principal("tenant-streams", { newRoot: true });
    const members = [];
    for (let i = 0; i < 4; i++) members.push(await memberOf(h, tenant, `watcher-${i}`));
    const ctl = new AbortController();
    const open = async (m: TestPrincipal, repairId: string) => {
      const it = m.c.repairs.watchRepair({ repairId }, { signal: ctl.signal })[Symbol.asyncIterator]();
      await it.next();
    };
    try {
      const repairs = [];
      for (const m of members) repairs.push((await createPendingRepair(h, m)).repair.id);
      for (let i = 0; i < 16; i++) await open(members[0]!, repairs[0]!);
      for (let i = 0; i < 16; i++) await open(members[1]!, repairs[1]!);
      expect(h.streams.size).toBe(32);
      for (const k of [2, 3]) {
        const err = await open(members[k]!, repairs[k]!).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(ConnectError);
        expect([(err as ConnectError).code, reasonOf(err)]).toEqual([Code.ResourceExhausted, "stream_limit"]);
        expect(errorInfo(err)?.metadata).toMatchObject({ limit: "streams_per_root", scope: "root" });
      }
      expect(h.streams.size).toBe(32);
    } finally {
      ctl.abort();
    }
  });

  it("200 CreateToken calls in a burst: the 20th is refused by the count bound and the rest by the rate, storing only 19 tokens", async () => {
    const tenant = await h.principal("tenant-tokens", { newRoot: true });
    const reasons: string[] = [];
    let accepted = 0;
    for (let i = 0; i < 200; i++) {
      try {
        await tenant.c.principals.createToken({ name: `t${i}` });
        accepted += 1;
      } catch (err) {
        expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
        reasons.push(`${reasonOf(err)} ${errorInfo(err)?.metadata["limit"]}`);
      }
    }
    expect(accepted).toBe(19);
    // The principal's first token and 19 more make the 20 a principal may hold (SERAPH_MAX_TOKENS_PER_PRINCIPAL).
    expect(reasons[0]).toBe("token_limit SERAPH_MAX_TOKENS_PER_PRINCIPAL");
    expect(new Set(reasons.slice(1))).toEqual(new Set(["rate_limited SERAPH_RATE_TOKENS_PER_MINUTE"]));
    expect(reasons).toHaveLength(181);
    expect(await h.db.selectFrom("api_tokens").select("id").where("principal_id", "=", tenant.id).execute()).toHaveLength(20);
  });

  it("CreatePrincipal is rate-limited per root: the 11th member in a minute is refused, and not created", async () => {
    const tenant = await h.principal("tenant-members", { newRoot: true });
    for (let i = 0; i < 10; i++) await memberOf(h, tenant, `m${i}`);
    const before = await h.rows("principals", "api_tokens");
    const err = await expectRefused(tenant.c.principals.createPrincipal({ name: "m10" }), Code.ResourceExhausted, "rate_limited");
    expect(errorInfo(err)?.metadata).toMatchObject({ limit: "SERAPH_RATE_PRINCIPALS_PER_MINUTE" });
    expect(await h.rows("principals", "api_tokens")).toEqual(before);
  });
});

describe("count bounds per operator root (in-memory transport, real PostgreSQL)", () => {
  let h: ApiHarness;
  beforeAll(async () => {
    h = await startApiHarness({ countLimits: { principalsPerRoot: 3, tokensPerRoot: 5 } });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("a root holds at most SERAPH_MAX_PRINCIPALS_PER_ROOT principals and SERAPH_MAX_TOKENS_PER_ROOT unrevoked tokens over all of them", async () => {
    const tenant = await h.principal("tenant", { newRoot: true });
    const m1 = await memberOf(h, tenant, "m1");
    await memberOf(h, tenant, "m2");
    let before = await h.rows("principals", "api_tokens");
    const p = await expectRefused(tenant.c.principals.createPrincipal({ name: "m3" }), Code.ResourceExhausted, "principal_limit");
    expect(p.rawMessage).toBe("At most 3 principals per operator root (SERAPH_MAX_PRINCIPALS_PER_ROOT=3); 3 exist. Revoke or remove one first. (principal_limit)");
    expect(await h.rows("principals", "api_tokens")).toEqual(before);
    // Three principals, one token each: two more tokens fill the root, from any member.
    await tenant.c.principals.createToken({ name: "x" });
    await m1.c.principals.createToken({ name: "y" });
    before = await h.rows("principals", "api_tokens");
    for (const who of [tenant, m1]) {
      const t = await expectRefused(who.c.principals.createToken({ name: "z" }), Code.ResourceExhausted, "token_limit");
      expect(errorInfo(t)?.metadata).toMatchObject({ limit: "SERAPH_MAX_TOKENS_PER_ROOT" });
    }
    expect(await h.rows("principals", "api_tokens")).toEqual(before);
    // A revoked token frees its place.
    const x = (await tenant.c.principals.listTokens({})).tokens.find((t) => t.name === "x")!;
    await tenant.c.principals.revokeToken({ tokenId: x.id });
    expect((await m1.c.principals.createToken({ name: "z" })).token?.name).toBe("z");
  });
});
