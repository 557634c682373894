import { Code, ConnectError } from "@connectrpc/connect";
import { reasonOf } from "@seraph/kit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApiHarness, type ApiClients, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { createPendingRepair } from "../../testing/journey.js";

// Issue 24 item 3: a WatchRepair stream opened before `token revoke` stayed open and delivered
// a repair update to the revoked token. Now revoking ends the token's open streams within a
// second with UNAUTHENTICATED, on every replica, and the next call with it is refused.

/** Opens WatchRepair and reads its first message; `ended` resolves with what ended it and when. */
async function watch(c: ApiClients, repairId: string) {
  const it = c.repairs.watchRepair({ repairId })[Symbol.asyncIterator]();
  const first = await it.next();
  expect(first.done).toBe(false);
  const updates: unknown[] = [];
  const ended = (async () => {
    try {
      for (let r = await it.next(); !r.done; r = await it.next()) updates.push(r.value);
      return { err: undefined as unknown, at: Date.now() };
    } catch (err) {
      return { err, at: Date.now() };
    }
  })();
  return { ended, updates };
}

function expectRevoked(err: unknown): void {
  expect(err).toBeInstanceOf(ConnectError);
  expect([(err as ConnectError).code, reasonOf(err), (err as ConnectError).rawMessage]).toEqual([Code.Unauthenticated, "unauthenticated", "the bearer token was revoked (unauthenticated)"]);
}

describe("revocation ends open streams (in-memory transport, real PostgreSQL)", () => {
  let h: ApiHarness;
  let alice: TestPrincipal;
  beforeAll(async () => {
    // The re-check (the bound for a lost signal) is far slower than the second asserted here.
    h = await startApiHarness({ revocationRecheckMs: 60_000 });
    alice = await h.principal("alice", { newRoot: true });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("revoking a token ends its WatchRepair within 1 s with UNAUTHENTICATED; another token's stream stays open", async () => {
    const { repair } = await createPendingRepair(h, alice);
    const spare = await alice.c.principals.createToken({ name: "spare" });
    const spareClients = h.clients(spare.secret);
    const doomed = await watch(alice.c, repair.id);
    const kept = await watch(spareClients, repair.id);
    expect(h.streams.size).toBe(2);
    const first = (await alice.c.principals.listTokens({})).tokens.find((t) => t.name !== "spare")!;
    const t0 = Date.now();
    await spareClients.principals.revokeToken({ tokenId: first.id });
    const { err, at } = await doomed.ended;
    expectRevoked(err);
    expect(at - t0).toBeLessThan(1000);
    expect(doomed.updates).toEqual([]);
    expect(h.streams.size).toBe(1);
    // The revoked token authenticates nothing, and opens no new stream.
    await expect(alice.c.repairs.getRepair({ repairId: repair.id })).rejects.toMatchObject({ code: Code.Unauthenticated });
    await expect(watch(alice.c, repair.id)).rejects.toMatchObject({ code: Code.Unauthenticated });
    // The other token's stream still delivers: cancelling the repair ends it normally.
    await spareClients.repairs.cancelRepair({ repairId: repair.id, reason: "done" });
    expect((await kept.ended).err).toBeUndefined();
    expect(kept.updates).toHaveLength(1);
    expect(h.streams.size).toBe(0);
  });

  it("two replicas: a token revoked through one ends its stream on the other within 1 s (through the event bus)", async () => {
    const bob = await h.principal("bob", { newRoot: true });
    const { repair } = await createPendingRepair(h, bob);
    const spare = await bob.c.principals.createToken({ name: "spare" });
    const other = h.replica();
    const doomed = await watch(other.clients(bob.secret), repair.id);
    expect([h.streams.size, other.streams.size]).toEqual([0, 1]);
    const first = (await bob.c.principals.listTokens({})).tokens.find((t) => t.name !== "spare")!;
    const t0 = Date.now();
    await h.clients(spare.secret).principals.revokeToken({ tokenId: first.id });
    const { err, at } = await doomed.ended;
    expectRevoked(err);
    expect(at - t0).toBeLessThan(1000);
    expect(other.streams.size).toBe(0);
  });
});

describe("revocation when the signal is lost (in-memory transport, real PostgreSQL)", () => {
  let h: ApiHarness;
  beforeAll(async () => {
    h = await startApiHarness({ revocationRecheckMs: 200 });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("a token revoked without a signal (another replica's publish lost) ends its streams at the next re-check", async () => {
    const carol = await h.principal("carol", { newRoot: true });
    const { repair } = await createPendingRepair(h, carol);
    const doomed = await watch(carol.c, repair.id);
    // As if revoked by a replica whose signal never arrived: the row only.
    await h.db.updateTable("api_tokens").set({ revoked_at: new Date() }).where("principal_id", "=", carol.id).execute();
    const t0 = Date.now();
    const { err, at } = await doomed.ended;
    expectRevoked(err);
    expect(at - t0).toBeLessThan(1000);
  });
});
