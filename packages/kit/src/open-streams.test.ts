import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { describe, expect, it } from "vitest";
import { createAuthInterceptor, type AuthenticatedPrincipal } from "./auth.js";
import { reasonOf, errorInfo } from "./errors.js";
import { createOpenStreams } from "./open-streams.js";

// Token "sk_<principal>_<root>_<token>…": each principal of the table below.
const PRINCIPALS: Record<string, AuthenticatedPrincipal> = {
  sk_alice_token_one_0000: { id: "alice", name: "alice", rootId: "root-a", tokenId: "t-alice-1" },
  sk_alice_token_two_0000: { id: "alice", name: "alice", rootId: "root-a", tokenId: "t-alice-2" },
  sk_member1_token_00000: { id: "m1", name: "m1", rootId: "root-a", tokenId: "t-m1" },
  sk_member2_token_00000: { id: "m2", name: "m2", rootId: "root-a", tokenId: "t-m2" },
  sk_bob_token_000000000: { id: "bob", name: "bob", rootId: "root-b", tokenId: "t-bob" },
};

function setup(perPrincipal: number, perRoot: number) {
  const streams = createOpenStreams({ perPrincipal, perRoot });
  const handlerAborted: string[] = [];
  const transport = createRouterTransport(
    (router) =>
      router.service(RepairService, {
        async *watchRepair(req, ctx) {
          yield { repair: { id: req.repairId } };
          // A quiet stream: waits for its signal as WatchRepair's poll does.
          await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
          handlerAborted.push(req.repairId);
        },
      }),
    { router: { interceptors: [createAuthInterceptor(async (t) => PRINCIPALS[t]), streams.interceptor] } },
  );
  const client = createClient(RepairService, transport);
  /** Opens a stream and reads its first message; resolves with what ended it (undefined while open). */
  const open = async (token: string, repairId: string) => {
    const it = client.watchRepair({ repairId }, { headers: { authorization: `Bearer ${token}` } })[Symbol.asyncIterator]();
    await it.next();
    let ended: unknown;
    const done = it.next().then(
      () => (ended = "ended"),
      (e: unknown) => (ended = e),
    );
    return { ended: () => ended, done };
  };
  return { streams, open, handlerAborted };
}

describe("open streams", () => {
  it("ends a revoked token's streams at once with UNAUTHENTICATED, aborts their handlers, and leaves other tokens' streams open", async () => {
    const { streams, open, handlerAborted } = setup(16, 32);
    const one = await open("sk_alice_token_one_0000", "r1");
    const two = await open("sk_alice_token_two_0000", "r2");
    const bob = await open("sk_bob_token_000000000", "r3");
    expect(streams.size).toBe(3);
    expect(streams.tokenIds().sort()).toEqual(["t-alice-1", "t-alice-2", "t-bob"]);
    const t0 = Date.now();
    expect(streams.end({ tokenIds: ["t-alice-1"] }, "the bearer token was revoked")).toBe(1);
    await one.done;
    expect(Date.now() - t0).toBeLessThan(1000);
    const err = one.ended() as ConnectError;
    expect(err).toBeInstanceOf(ConnectError);
    expect([err.code, err.rawMessage, reasonOf(err)]).toEqual([Code.Unauthenticated, "the bearer token was revoked (unauthenticated)", "unauthenticated"]);
    await new Promise((r) => setTimeout(r, 20));
    expect(handlerAborted).toEqual(["r1"]);
    expect([two.ended(), bob.ended(), streams.size]).toEqual([undefined, undefined, 2]);
    // By principal (a deleted principal): every token of it.
    expect(streams.end({ principalIds: ["alice"] }, "gone")).toBe(1);
    await two.done;
    expect((two.ended() as ConnectError).code).toBe(Code.Unauthenticated);
    expect(bob.ended()).toBeUndefined();
    expect(streams.end({ tokenIds: ["t-bob"] }, "x")).toBe(1);
    await bob.done;
    expect(streams.size).toBe(0);
  });

  it("bounds the streams of an operator root over all its principals, naming the limit", async () => {
    const { streams, open } = setup(2, 4);
    await open("sk_alice_token_one_0000", "a1");
    await open("sk_alice_token_two_0000", "a2");
    const own = await open("sk_alice_token_one_0000", "a3").catch((e: unknown) => e);
    expect(reasonOf(own)).toBe("stream_limit");
    expect(errorInfo(own)?.metadata).toMatchObject({ limit: "streams_per_principal", scope: "principal" });
    await open("sk_member1_token_00000", "m1a");
    await open("sk_member1_token_00000", "m1b");
    // Root-a holds 4: a fresh member of it gets none, another root still does.
    const member = await open("sk_member2_token_00000", "m2a").catch((e: unknown) => e);
    expect(member).toBeInstanceOf(ConnectError);
    expect((member as ConnectError).code).toBe(Code.ResourceExhausted);
    expect((member as ConnectError).rawMessage).toMatch(/^At most 4 concurrent streams per operator root, all its principals together \(streams_per_root=4\); 4 are open\. Close one and retry\. \(stream_limit\)$/);
    expect(errorInfo(member)?.metadata).toMatchObject({ limit: "streams_per_root", scope: "root" });
    await open("sk_bob_token_000000000", "b1");
    expect(streams.size).toBe(5);
    streams.end({ principalIds: ["alice", "m1", "bob"] }, "done");
  });
});
