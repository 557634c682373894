import { createServer, type Server } from "node:http";
import { createRootLogger } from "@seraph/kit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ModelRouteError, requestPatch, type ModelRouteConfig } from "./model-client.js";
import { isNonPublicAddress } from "./public-only.js";

// A real model server on loopback: the opt-in public-only rule refuses it by IP literal and by a
// host name that resolves to it, before any byte of the prompt is sent.
const log = createRootLogger({ name: "public-only-test", level: "silent" });
const DIFF = "--- a/src/x.js\n+++ b/src/x.js\n@@ -1 +1 @@\n-a\n+b\n";
let server: Server;
let port = 0;
let requests = 0;

beforeAll(async () => {
  server = createServer((req, res) => {
    requests++;
    req.resume();
    req.on("end", () => {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ model: "m", choices: [{ message: { role: "assistant", content: DIFF } }] }));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  port = (server.address() as { port: number }).port;
});
afterAll(() => server.close());

const route = (host: string, publicOnly: boolean): ModelRouteConfig => ({ id: "local", baseUrl: `http://${host}:${port}/v1`, model: "m", apiKey: "", timeoutMs: 5000, maxAttempts: 1, publicOnly });
const ask = (r: ModelRouteConfig) => requestPatch(r, [{ role: "user", content: "fix it" }], { log });

describe("model_routes_public_only", () => {
  it("classifies addresses: loopback, private, link-local, CGNAT, ULA and mapped v4 are not public", () => {
    for (const a of ["127.0.0.1", "10.1.2.3", "172.20.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "::", "fd00::1", "fe80::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1"]) expect(isNonPublicAddress(a), a).toBe(true);
    for (const a of ["1.1.1.1", "8.8.8.8", "2606:4700:4700::1111", "::ffff:1.1.1.1"]) expect(isNonPublicAddress(a), a).toBe(false);
  });

  it("off: the loopback route answers", async () => {
    expect((await ask(route("127.0.0.1", false))).diff).toBe(DIFF);
  });

  it("on: an IP literal and a name resolving to loopback are refused (model_route_not_public), and the server sees no request", async () => {
    const before = requests;
    for (const host of ["127.0.0.1", "localhost"]) {
      const err = await ask(route(host, true)).then(() => undefined, (e: unknown) => e);
      expect(err, host).toBeInstanceOf(ModelRouteError);
      expect((err as ModelRouteError).reason).toBe("model_route_not_public");
      expect((err as ModelRouteError).message).toMatch(/not contacted: .*(127\.0\.0\.1|::1).*non-public/);
    }
    expect(requests).toBe(before);
  });
});
