import { stat, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { createRootLogger } from "@seraph/kit";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { Health, HealthCheckResponse_ServingStatus } from "@seraph/proto/grpc/health/v1/health_pb.js";
import { afterAll, describe, expect, it } from "vitest";
import { startEmbedded } from "./compose.js";

// Embedded mode on PGlite: first start creates the operator once; a restart keeps it.
describe("embedded composition", () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it("starts four services on one PGlite, stores the operator token 0600, and keeps data across restarts", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "seraph-embedded-"));
    dirs.push(dataDir);
    // Below Linux's ephemeral range (32768 up), where other tests' port-0 binds land (one took 48310).
    const portBase = 20000 + Math.floor(Math.random() * 120) * 100;
    const log = createRootLogger({ name: "embedded-test", level: "warn" });
    const options = { dataDir, portBase, host: "127.0.0.1", repositoryRoots: [], nodeId: "test-node", log };

    const first = await startEmbedded(options);
    let principalId: string;
    try {
      expect(first.operatorTokenCreated).toMatch(/^sk_/);
      const mode = (await stat(first.operatorTokenFile)).mode & 0o777;
      expect(mode).toBe(0o600);
      expect((await stat(dataDir)).mode & 0o777).toBe(0o700);
      for (const port of [portBase, portBase + 10, portBase + 20, portBase + 30]) {
        const health = createClient(Health, createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}` }));
        expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      }
      const api = createClient(PrincipalService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${portBase}` }));
      const me = await api.whoAmI({}, { headers: { authorization: `Bearer ${first.operatorTokenCreated}` } });
      principalId = me.principal!.id;
    } finally {
      await first.stop();
    }

    const second = await startEmbedded(options);
    try {
      expect(second.operatorTokenCreated).toBeUndefined();
      const api = createClient(PrincipalService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${portBase}` }));
      const me = await api.whoAmI({}, { headers: { authorization: `Bearer ${first.operatorTokenCreated}` } });
      expect(me.principal!.id).toBe(principalId);
    } finally {
      await second.stop();
    }
  }, 60_000);
});
