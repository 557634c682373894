import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, get as httpGet, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { bootService, createRootLogger, type BootedService } from "@seraph/kit";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startGateway, type GatewayHandle } from "./start.js";
import { CONTENT_SECURITY_POLICY, createStaticHandler, IMMUTABLE_CACHE } from "./static-files.js";

const TOKEN = "sk_gateway-test-token-0123456789";
const REPAIR = "8f14e45f-ceea-4e7a-9f4b-7a1f1c3b9c2d";

// The gateway in front of a fake API: errors cross it as the API's code and message (whatever
// the browser's protocol), streams are forwarded, and the caller's token is what the API sees.
describe("gateway forwarding", () => {
  let api: BootedService;
  let gateway: GatewayHandle;
  const log = createRootLogger({ name: "gateway-test", level: "silent" });

  beforeAll(async () => {
    api = await bootService({
      name: "fake-api",
      log,
      host: "127.0.0.1",
      grpcPort: 0,
      httpPort: undefined,
      serviceNames: [GoalService.typeName, RepairService.typeName],
      routes: (router) => {
        router.service(GoalService, {}); // every method UNIMPLEMENTED
        router.service(RepairService, {
          async *watchRepair(req) {
            yield { repair: { id: req.repairId, revision: 1n } };
            throw new ConnectError("the repair moved on", Code.FailedPrecondition);
          },
        });
      },
      authenticate: async (token) => (token === TOKEN ? { id: "p", name: "operator", rootId: "p", tokenId: "t" } : undefined),
      prepare: async () => {},
    });
    gateway = await startGateway({ host: "127.0.0.1", grpcPort: 0, httpPort: 0, apiUrl: api.server.grpcUrl, log });
  });

  afterAll(async () => {
    await gateway?.stop();
    await api?.server.close();
  });

  const headers = { authorization: `Bearer ${TOKEN}` };
  const transports = () => ({
    "connect+proto": createConnectTransport({ baseUrl: gateway.server.httpUrl ?? "", httpVersion: "1.1", useBinaryFormat: true }),
    "connect+json": createConnectTransport({ baseUrl: gateway.server.httpUrl ?? "", httpVersion: "1.1" }),
    "grpc-web": createGrpcWebTransport({ baseUrl: gateway.server.httpUrl ?? "", httpVersion: "1.1" }),
  });

  it("passes UNIMPLEMENTED and INVALID_ARGUMENT through with the API's own message, in every browser protocol", async () => {
    for (const [name, transport] of Object.entries(transports())) {
      const goals = createClient(GoalService, transport);
      const unimplemented = await goals.createGoal({ title: "x" }, { headers }).catch((e: unknown) => ConnectError.from(e));
      expect(unimplemented, name).toBeInstanceOf(ConnectError);
      expect((unimplemented as ConnectError).code, name).toBe(Code.Unimplemented);
      expect((unimplemented as ConnectError).rawMessage, name).toBe("seraph.api.v1.GoalService.CreateGoal is not implemented");
      const invalid = await goals.createGoal({ title: "" }, { headers }).catch((e: unknown) => ConnectError.from(e));
      expect((invalid as ConnectError).code, name).toBe(Code.InvalidArgument);
      expect((invalid as ConnectError).rawMessage, name).toMatch(/^title: /);
    }
  });

  it("forwards the caller's token: a wrong one is the API's UNAUTHENTICATED", async () => {
    const goals = createClient(GoalService, transports()["connect+proto"]);
    const err = await goals.listGoals({}, { headers: { authorization: "Bearer sk_wrong-token-000000000000" } }).catch((e: unknown) => ConnectError.from(e));
    expect((err as ConnectError).code).toBe(Code.Unauthenticated);
  });

  it("an unknown token with an invalid request is the API's UNAUTHENTICATED, not this hop's INVALID_ARGUMENT", async () => {
    // The gateway cannot tell a good token from a bad one; it used to check the request's
    // fields first, so a caller with no valid token learned INVALID_ARGUMENT for them.
    for (const [name, transport] of Object.entries(transports())) {
      const goals = createClient(GoalService, transport);
      const err = await goals.createGoal({ title: "" }, { headers: { authorization: "Bearer sk_wrong-token-000000000000" } }).catch((e: unknown) => ConnectError.from(e));
      expect([(err as ConnectError).code, (err as ConnectError).rawMessage], name).toEqual([Code.Unauthenticated, "the bearer token is unknown or revoked (unauthenticated)"]);
    }
  });

  it("forwards a server stream and then its error", async () => {
    const repairs = createClient(RepairService, transports()["connect+proto"]);
    const seen: string[] = [];
    const err = await (async () => {
      for await (const res of repairs.watchRepair({ repairId: REPAIR }, { headers })) seen.push(res.repair?.id ?? "");
    })().catch((e: unknown) => ConnectError.from(e));
    expect(seen).toEqual([REPAIR]);
    expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
    expect((err as ConnectError).rawMessage).toBe("the repair moved on");
  });
});

describe("static files", () => {
  let dir: string;
  let server: Server;
  let base: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "gateway-static-"));
    await writeFile(join(dir, "index.html"), "<!doctype html><title>x</title>");
    await writeFile(join(dir, "app.js"), "export {};");
    await mkdir(join(dir, "assets"));
    await writeFile(join(dir, "assets", "app-ABCD1234.js"), `export const big = ${JSON.stringify("x".repeat(20_000))};\n`);
    const handler = createStaticHandler(dir);
    server = createServer((req, res) => {
      if (!handler(req, res)) res.writeHead(404).end();
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const addr = server.address();
    base = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  });

  afterAll(async () => {
    await new Promise((r) => server.close(r));
    await rm(dir, { recursive: true, force: true });
  });

  it("serves files with a strict CSP (no inline script) and nosniff", async () => {
    const res = await fetch(`${base}/`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-security-policy")).toBe(CONTENT_SECURITY_POLICY);
    expect(CONTENT_SECURITY_POLICY).toMatch(/default-src 'self'/);
    expect(CONTENT_SECURITY_POLICY).not.toMatch(/unsafe-inline|unsafe-eval/);
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    expect((await fetch(`${base}/app.js`)).headers.get("content-type")).toBe("text/javascript; charset=utf-8");
  });

  it("sends a strong ETag and 304 on If-None-Match, compresses text when accepted, and caches hashed names for a year", async () => {
    const url = `${base}/assets/app-ABCD1234.js`;
    const raw = await request(url, { "accept-encoding": "identity" });
    expect(raw.status).toBe(200);
    expect(raw.headers["content-encoding"]).toBeUndefined();
    expect(raw.headers["cache-control"]).toBe(IMMUTABLE_CACHE);
    const etag = raw.headers["etag"] as string;
    expect(etag).toMatch(/^"[A-Za-z0-9_-]{32}"$/);
    const br = await request(url, { "accept-encoding": "gzip, br" });
    expect(br.headers["content-encoding"]).toBe("br");
    expect(br.headers["vary"]).toBe("accept-encoding");
    expect(br.body.length).toBeLessThan(raw.body.length / 10);
    expect(brotliDecompressSync(br.body).equals(raw.body)).toBe(true);
    const gz = await request(url, { "accept-encoding": "gzip" });
    expect(gz.headers["content-encoding"]).toBe("gzip");
    expect(gunzipSync(gz.body).equals(raw.body)).toBe(true);
    const again = await request(url, { "if-none-match": etag });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
    const index = await request(`${base}/`, {});
    expect(index.headers["cache-control"]).toBe("no-cache");
    expect(index.headers["etag"]).not.toBe(etag);
    expect((await request(`${base}/`, { "if-none-match": '"stale"' })).status).toBe(200);
  });

  it("never serves outside its root or malformed paths", async () => {
    expect((await fetch(`${base}/..%2f..%2fetc%2fpasswd`)).status).toBe(404);
    expect((await fetch(`${base}/%E0%A4%A`)).status).toBe(404);
    expect((await fetch(`${base}/missing.js`)).status).toBe(404);
  });
});

/** A raw HTTP GET (fetch would decompress and hide Content-Encoding). */
function request(url: string, headers: Record<string, string>): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    httpGet(url, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
    }).on("error", reject);
  });
}
