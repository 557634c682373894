import { request as httpRequest } from "node:http";
import http2 from "node:http2";
import { connect as netConnect, type Socket } from "node:net";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fieldOf, reasonOf, ResourceExhaustedError } from "./errors.js";
import { errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { trailerParse } from "@connectrpc/connect/protocol-grpc-web";
import { createPrincipalRateLimit } from "./limits.js";
import { bootService, type BootedService } from "./service.js";

const TOKENS: Record<string, string> = { sk_principal_a_000000000000: "a", sk_principal_b_000000000000: "b" };
const A = "sk_principal_a_000000000000";
const B = "sk_principal_b_000000000000";
const READ_MAX = 64 * 1024;

describe("listener limits", () => {
  let svc: BootedService;
  let handled = 0;

  beforeAll(async () => {
    svc = await bootService({
      name: "limits-test",
      log: pino({ level: "silent" }),
      host: "127.0.0.1",
      grpcPort: 0,
      httpPort: 0,
      serviceNames: [],
      authenticate: async (t) => (TOKENS[t] ? { id: TOKENS[t]!, name: TOKENS[t]!, rootId: TOKENS[t]!, tokenId: TOKENS[t]! } : undefined),
      prepare: async () => {},
      limits: { readMaxBytes: READ_MAX, headersTimeoutMs: 400, requestTimeoutMs: 800, idleTimeoutMs: 600, streamsPerPrincipal: 2 },
      routes: (router) => {
        router.service(GoalService, {
          createGoal(req) {
            handled += 1;
            // A downstream answer that did not decode, as a handler sees it: not the caller's body.
            if (req.title === "downstream-garbage") throw new ConnectError("parse binary: premature EOF", Code.Internal);
            return { goal: { title: req.title } };
          },
        });
        router.service(RepairService, {
          async *watchRepair(_req, ctx) {
            yield { repair: { id: "r" } };
            await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
          },
        });
      },
    });
  });
  afterAll(async () => {
    await svc?.server.close(1000);
  });

  it("refuses a Connect JSON body with a field the message does not have, naming it, before the handler", async () => {
    const post = (body: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = httpRequest(
          { host: "127.0.0.1", port: svc.server.httpPort, method: "POST", path: "/seraph.api.v1.GoalService/CreateGoal", headers: { "content-type": "application/json", authorization: `Bearer ${A}` } },
          (res) => {
            let data = "";
            res.on("data", (d: Buffer) => (data += d.toString()));
            res.on("end", () => resolve({ status: res.statusCode ?? 0, body: data }));
          },
        );
        req.on("error", reject);
        req.end(body);
      });
    const before = handled;
    const unknown = await post('{"title":"x","owner_id":"someone-else"}');
    expect(unknown.status).toBe(400);
    expect(JSON.parse(unknown.body)).toMatchObject({ code: "invalid_argument", message: expect.stringContaining('key "owner_id" is unknown') });
    expect(handled).toBe(before);
    expect((await post('{"title":"x"}')).status).toBe(200);
    handled = before;
  });

  it("a body that is not the method's message is INVALID_ARGUMENT malformed_payload in every protocol (connect-es says INTERNAL)", async () => {
    const garbage = Buffer.from([0xff, 0xff, 0xff]);
    const frame = (flags: number, payload: Buffer) => Buffer.concat([Buffer.from([flags, 0, 0, 0, payload.length]), payload]);
    const h1 = (path: string, contentType: string, body: Buffer) =>
      new Promise<{ status: number; body: Buffer }>((resolve, reject) => {
        const req = httpRequest({ host: "127.0.0.1", port: svc.server.httpPort, method: "POST", path, headers: { "content-type": contentType, authorization: `Bearer ${A}` } }, (res) => {
          const parts: Buffer[] = [];
          res.on("data", (d: Buffer) => parts.push(d));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts) }));
        });
        req.on("error", reject);
        req.end(body);
      });
    const before = handled;
    const expected = /^the request body is not a valid seraph\.api\.v1\.(CreateGoal|WatchRepair)Request in protobuf binary: .+ \(malformed_payload\)$/;
    // Connect unary
    const unary = await h1("/seraph.api.v1.GoalService/CreateGoal", "application/proto", garbage);
    expect(unary.status).toBe(400);
    const unaryError = JSON.parse(unary.body.toString()) as { code: string; message: string };
    expect(unaryError.code).toBe("invalid_argument");
    expect(unaryError.message).toMatch(expected);
    const fallback = new ConnectError("no error", Code.Unknown);
    expect(reasonOf(errorFromJsonBytes(unary.body, undefined, fallback))).toBe("malformed_payload");
    // Connect server streaming: the end-of-stream message
    const stream = await h1("/seraph.api.v1.RepairService/WatchRepair", "application/connect+proto", frame(0, garbage));
    const end = JSON.parse(stream.body.subarray(5).toString()) as { error: { code: string; message: string } };
    expect([stream.body[0], end.error.code]).toEqual([0x02, "invalid_argument"]);
    expect(end.error.message).toMatch(expected);
    expect(reasonOf(errorFromJsonBytes(new TextEncoder().encode(JSON.stringify(end.error)), undefined, fallback))).toBe("malformed_payload");
    // gRPC-Web: the trailer frame
    const web = await h1("/seraph.api.v1.GoalService/CreateGoal", "application/grpc-web+proto", frame(0, garbage));
    const trailer = web.body.subarray(web.body.lastIndexOf(0x80) + 5).toString();
    expect(trailer).toMatch(/grpc-status: 3\r\n/);
    expect(decodeURIComponent(/grpc-message: (.*)\r\n/.exec(trailer)![1]!)).toMatch(expected);
    expect(reasonOf(findTrailerError(trailerParse(web.body.subarray(web.body.lastIndexOf(0x80) + 5))))).toBe("malformed_payload");
    // gRPC over h2
    const grpcStatus = await new Promise<{ status: string; message: string }>((resolve) => {
      const session = http2.connect(svc.server.grpcUrl);
      const st = session.request({ ":method": "POST", ":path": "/seraph.api.v1.GoalService/CreateGoal", "content-type": "application/grpc", te: "trailers", authorization: `Bearer ${A}` });
      let status = "";
      let message = "";
      const take = (h: http2.IncomingHttpHeaders) => {
        if (h["grpc-status"] !== undefined) [status, message] = [String(h["grpc-status"]), decodeURIComponent(String(h["grpc-message"] ?? ""))];
      };
      st.on("response", take);
      st.on("trailers", take);
      st.on("data", () => undefined);
      st.on("close", () => {
        session.close();
        resolve({ status, message });
      });
      st.end(frame(0, garbage));
    });
    expect(grpcStatus.status).toBe(String(Code.InvalidArgument));
    expect(grpcStatus.message).toMatch(expected);
    expect(handled).toBe(before);
    const grpcClient = createClient(GoalService, createGrpcTransport({ baseUrl: svc.server.grpcUrl }));
    const downstream = await grpcClient.createGoal({ title: "downstream-garbage" }, { headers: { authorization: `Bearer ${A}` } }).catch((e: unknown) => ConnectError.from(e));
    // The rule is narrow: the same text from code that ran after decoding (a downstream answer) stays INTERNAL.
    expect([(downstream as ConnectError).code, (downstream as ConnectError).rawMessage, reasonOf(downstream), fieldOf(downstream)]).toEqual([Code.Internal, "parse binary: premature EOF", undefined, undefined]);
    handled = before;
  });

  function bigPost(chunked: boolean, total: number): Promise<{ status: number; sent: number; closed: boolean }> {
    return new Promise((resolve, reject) => {
      const chunk = Buffer.alloc(64 * 1024, 0x41);
      let sent = 0;
      let status = 0;
      const req = httpRequest({
        host: "127.0.0.1",
        port: svc.server.httpPort,
        method: "POST",
        path: "/seraph.api.v1.GoalService/CreateGoal",
        headers: { "content-type": "application/proto", ...(chunked ? {} : { "content-length": String(total) }) },
      });
      let settled = false;
      const done = (closed: boolean) => {
        if (settled) return;
        settled = true;
        req.destroy();
        resolve({ status, sent, closed });
      };
      req.on("response", (res) => {
        status = res.statusCode ?? 0;
        res.resume();
        res.on("end", () => done(res.headers.connection === "close"));
      });
      req.on("error", () => done(true));
      const pump = () => {
        while (!settled && sent < total) {
          sent += chunk.length;
          if (!req.write(chunk)) return void req.once("drain", pump);
        }
        if (!settled) req.end();
      };
      req.on("socket", () => pump());
      setTimeout(() => (settled ? undefined : reject(new Error("no answer"))), 20_000).unref();
    });
  }

  it("refuses an unauthenticated body over readMaxBytes while reading, and closes the connection instead of draining it", async () => {
    const total = 64 * 1024 * 1024;
    for (const chunked of [false, true]) {
      const r = await bigPost(chunked, total);
      // Connect's unary error for RESOURCE_EXHAUSTED, without a token: the body limit comes first.
      expect(r.status, `chunked=${chunked}`).toBe(429);
      expect(r.closed, `chunked=${chunked}`).toBe(true);
      // Refused early: far less than the body was sent (socket buffers absorb a few MiB at most).
      expect(r.sent, `chunked=${chunked}`).toBeLessThan(total / 4);
    }
    expect(handled).toBe(0);
  });

  it("reads at most readMaxBytes per message on both listeners, naming the limit", async () => {
    const big = "x".repeat(READ_MAX + 1);
    for (const transport of [
      createConnectTransport({ baseUrl: svc.server.httpUrl!, httpVersion: "1.1" }),
      createGrpcTransport({ baseUrl: svc.server.grpcUrl }),
    ]) {
      const goals = createClient(GoalService, transport);
      const err = await goals.createGoal({ title: big }, { headers: { authorization: `Bearer ${A}` } }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
      expect((err as ConnectError).rawMessage).toMatch(/readMaxBytes 65536/);
      // Under the limit passes (proto rules do not apply to this test route).
      const ok = await goals.createGoal({ title: "small" }, { headers: { authorization: `Bearer ${A}` } });
      expect(ok.goal?.title).toBe("small");
    }
  });

  it("caps concurrent server streams per principal with RESOURCE_EXHAUSTED naming the limit, and frees a slot when a stream ends", async () => {
    const repairs = createClient(RepairService, createGrpcTransport({ baseUrl: svc.server.grpcUrl }));
    const open = (token: string, ctl: AbortController) => {
      const it = repairs.watchRepair({ repairId: "00000000-0000-4000-8000-000000000001" }, { headers: { authorization: `Bearer ${token}` }, signal: ctl.signal })[Symbol.asyncIterator]();
      return it.next().then(() => it);
    };
    const c1 = new AbortController();
    const c2 = new AbortController();
    await open(A, c1);
    await open(A, c2);
    const third = await open(A, new AbortController()).catch((e: unknown) => e);
    expect(third).toBeInstanceOf(ConnectError);
    expect((third as ConnectError).code).toBe(Code.ResourceExhausted);
    expect((third as ConnectError).rawMessage).toMatch(/At most 2 concurrent streams per principal \(streams_per_principal=2\).*\(stream_limit\)/);
    // Another principal is not affected.
    const cb = new AbortController();
    await open(B, cb);
    // Ending one of A's streams frees its slot.
    c1.abort();
    let again: unknown;
    for (let i = 0; i < 50; i++) {
      again = await open(A, new AbortController()).catch((e: unknown) => e);
      if (!(again instanceof ConnectError)) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(again).not.toBeInstanceOf(ConnectError);
    c2.abort();
    cb.abort();
  });

  function closedWithin(socket: Socket, ms: number): Promise<{ closed: boolean; data: string }> {
    return new Promise((resolve) => {
      let data = "";
      socket.on("data", (d) => (data += d.toString("latin1")));
      const t = setTimeout(() => resolve({ closed: false, data }), ms);
      socket.on("close", () => {
        clearTimeout(t);
        resolve({ closed: true, data });
      });
      socket.on("error", () => {});
    });
  }

  it("closes an HTTP/1.1 connection whose headers do not arrive in time (slowloris)", async () => {
    const s = netConnect(svc.server.httpPort!, "127.0.0.1");
    await new Promise((r) => s.once("connect", r));
    s.write("POST /seraph.api.v1.GoalService/CreateGoal HTTP/1.1\r\nHost: x\r\n");
    const r = await closedWithin(s, 5000);
    expect(r.closed).toBe(true);
    expect(r.data).toMatch(/^HTTP\/1.1 408/);
  });

  it("closes an HTTP/1.1 request whose body does not arrive in time", async () => {
    const s = netConnect(svc.server.httpPort!, "127.0.0.1");
    await new Promise((r) => s.once("connect", r));
    s.write(`POST /seraph.api.v1.GoalService/CreateGoal HTTP/1.1\r\nHost: x\r\ncontent-type: application/proto\r\ncontent-length: 100\r\n\r\nab`);
    const r = await closedWithin(s, 5000);
    expect(r.closed).toBe(true);
  });

  it("closes an h2 connection that opens no stream in time, and cancels a stream whose request never completes", async () => {
    const raw = netConnect(svc.server.grpcPort, "127.0.0.1");
    await new Promise((r) => raw.once("connect", r));
    expect((await closedWithin(raw, 5000)).closed).toBe(true);

    const session = http2.connect(svc.server.grpcUrl);
    session.on("error", () => {});
    const stream = session.request({
      ":method": "POST",
      ":path": "/seraph.api.v1.GoalService/CreateGoal",
      "content-type": "application/grpc",
      te: "trailers",
      authorization: `Bearer ${A}`,
    });
    stream.on("error", () => {});
    stream.write(Buffer.from([0, 0, 0, 0, 10])); // an envelope announcing 10 bytes, never sent
    const code = await new Promise<number>((resolve) => {
      const t = setTimeout(() => resolve(-1), 5000);
      stream.on("close", () => {
        clearTimeout(t);
        resolve(stream.rstCode ?? -2);
      });
    });
    expect(code).toBe(http2.constants.NGHTTP2_CANCEL);
    session.destroy();
  });
});

describe("rate limits per principal and per operator root", () => {
  it("allows `points` per window and then refuses with RESOURCE_EXHAUSTED naming the limit and its setting", async () => {
    const limit = createPrincipalRateLimit({ what: "goals", setting: "SERAPH_RATE_GOALS_PER_MINUTE", points: 3, durationSeconds: 60 });
    const a = { id: "a", rootId: "a" };
    for (let i = 0; i < 3; i++) await limit.consume(a);
    const err = await limit.consume(a).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ResourceExhaustedError);
    expect((err as ResourceExhaustedError).reason).toBe("rate_limited");
    expect((err as ResourceExhaustedError).message).toMatch(/^At most 3 goals per 60 s per principal \(SERAPH_RATE_GOALS_PER_MINUTE=3\); retry in \d+ s\.$/);
    expect((err as ResourceExhaustedError).metadata).toMatchObject({ limit: "SERAPH_RATE_GOALS_PER_MINUTE", scope: "principal" });
    await limit.consume({ id: "b", rootId: "b" });
  });

  it("a root's members share its bound: a member it creates cannot continue past it", async () => {
    const limit = createPrincipalRateLimit({ what: "goals", setting: "SERAPH_RATE_GOALS_PER_MINUTE", points: 3, durationSeconds: 60 });
    await limit.consume({ id: "root", rootId: "root" });
    await limit.consume({ id: "root", rootId: "root" });
    await limit.consume({ id: "member-1", rootId: "root" });
    const err = await limit.consume({ id: "member-2", rootId: "root" }).catch((e: unknown) => e);
    expect((err as ResourceExhaustedError).metadata).toMatchObject({ scope: "root" });
    // Another root is not affected.
    await limit.consume({ id: "other", rootId: "other" });
  });

  it("a principal's own bound is checked before its root's, and named as per principal", async () => {
    const limit = createPrincipalRateLimit({ what: "tokens", setting: "SERAPH_RATE_TOKENS_PER_MINUTE", points: 2, durationSeconds: 60 });
    await limit.consume({ id: "m1", rootId: "r" });
    await limit.consume({ id: "m1", rootId: "r" });
    const err = await limit.consume({ id: "m1", rootId: "r" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ResourceExhaustedError);
    expect((err as ResourceExhaustedError).message).toMatch(/^At most 2 tokens per 60 s per principal \(SERAPH_RATE_TOKENS_PER_MINUTE=2\)/);
    expect((err as ResourceExhaustedError).metadata).toMatchObject({ limit: "SERAPH_RATE_TOKENS_PER_MINUTE", scope: "principal" });
  });
});
