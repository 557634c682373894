// Shared helpers for the durable-execution benchmarks (plain node scripts; run `npx tsc -b` first).
import { spawn } from "node:child_process";
import { existsSync, realpathSync } from "node:fs";
import { join, resolve } from "node:path";
import { root } from "./supervisor-common.mjs";

import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";

export { fmt, loadAverages, machine, median, percentile, root, sleep } from "./supervisor-common.mjs";

/** Imports a compiled module under the repository root, failing clearly when it was not built. */
export async function importBuilt(rel) {
  const path = join(root, rel);
  if (!existsSync(path)) {
    process.stderr.write(`${path} is missing: run \`npx tsc -b\` first\n`);
    process.exit(2);
  }
  return import(path);
}

/**
 * Imports a test-only TypeScript module (a package's testing/ entry, test/harness/), which
 * `tsc -b` does not compile: esbuild bundles it into node_modules/.cache/seraph-bench/. Its
 * imports of a package's src/ load that package's built dist/ instead (the same modules the
 * benchmark uses), other packages stay external, and `@seraph/<name>/testing` is bundled in.
 */
export async function importTesting(rel) {
  const { build } = await import("esbuild");
  const outfile = join(root, "node_modules/.cache/seraph-bench", rel.replace(/\.ts$/, ".mjs"));
  const builtSources = {
    name: "seraph-built-sources",
    setup(b) {
      b.onResolve({ filter: /^@seraph\/[^/]+\/testing$/ }, (args) => ({ path: join(realpathSync(join(root, "node_modules", args.path.slice(0, -"/testing".length))), "testing/index.ts") }));
      b.onResolve({ filter: /^[^./]/ }, () => ({ external: true }));
      b.onResolve({ filter: /^\.\.?\// }, (args) => {
        const m = /^(.*)\/src\/(.*)\.js$/.exec(resolve(args.resolveDir, args.path));
        if (!m) return undefined;
        const built = `${m[1]}/dist/${m[2]}.js`;
        if (!existsSync(built)) {
          process.stderr.write(`${built} is missing: run \`npx tsc -b\` first\n`);
          process.exit(2);
        }
        return { path: built, external: true };
      });
    },
  };
  await build({ entryPoints: [join(root, rel)], outfile, bundle: true, platform: "node", format: "esm", target: "node20", plugins: [builtSources], logLevel: "error" });
  return import(outfile);
}

/** Runs argv in cwd with an empty environment (like a job) and resolves the wall time in ms. */
export function timeBare(argv, cwd, env) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(argv[0], argv.slice(1), { cwd, env, stdio: ["ignore", "ignore", "ignore"] });
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolve(performance.now() - t0) : reject(new Error(`bare run exited ${code}`))));
  });
}

/** Terminal job states (seraph.jobs.v1.JobState numbers). */
export const TERMINAL = new Set([6, 7, 8, 9, 10]);

/** A TCP port that was free a moment ago on 127.0.0.1. */
export async function freePort() {
  const { createServer } = await import("node:net");
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Starts `services/<service>/dist/main.js` with exactly `env` (plus PATH/HOME); logs to `<dir>/<name>.log`. */
export async function spawnService(name, service, env, dir, grpcPort) {
  const { createWriteStream } = await import("node:fs");
  const entry = join(root, "services", service, "dist", "main.js");
  if (!existsSync(entry)) throw new Error(`${entry} is missing: run \`npx tsc -b\` first`);
  const out = createWriteStream(join(dir, `${name}.log`));
  const child = spawn(process.execPath, [entry], {
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, LOG_LEVEL: "warn", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout.pipe(out);
  child.stderr.pipe(out);
  return { name, child, grpcUrl: `http://127.0.0.1:${grpcPort}` };
}

/** Waits until the service answers grpc.health.v1 SERVING. */
export async function waitServing(p, timeoutMs = 60_000) {
  const { createClient } = await import("@connectrpc/connect");
  const { createGrpcTransport } = await import("@connectrpc/connect-node");
  const { Health, HealthCheckResponse_ServingStatus } = await import("@seraph/proto/grpc/health/v1/health_pb.js");
  const client = createClient(Health, createGrpcTransport({ baseUrl: p.grpcUrl }));
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (p.child.exitCode !== null) break;
    try {
      if ((await client.check({ service: "" }, { timeoutMs: 1000 })).status === HealthCheckResponse_ServingStatus.SERVING) return;
    } catch {
      // not yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${p.name} did not become SERVING`);
}

/** SIGTERM by pid, SIGKILL after `graceMs`. */
export async function stopProcess(child, graceMs = 10_000) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  const t = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(t);
}

/** The public API clients of an instance, as `token`. */
export function apiClients(apiUrl, token) {
  const bearer = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport = createGrpcTransport({ baseUrl: apiUrl, interceptors: [bearer] });
  return {
    goals: createClient(GoalService, transport),
    repos: createClient(RepositoryService, transport),
    settings: createClient(SettingsService, transport),
    repairs: createClient(RepairService, transport),
  };
}

/** One approved repair through the API; resolves the timings of its job. */
export async function oneJob(fixtures, c, parent, suite, ahead) {
  const repo = ahead ?? (await fixtures.createJsTestProject({ parent, failing: true, git: false, ...suite.options }));
  const { goal } = await c.goals.createGoal({ title: "bench", objective: "add adds" });
  const { repository } = await c.repos.registerRepository({ path: repo.dir });
  const { repair } = await c.repairs.createRepair({
    goalId: goal.id,
    goalRevision: 1,
    repositoryId: repository.id,
    sourcePaths: ["src", "test"],
    allowedPatchPaths: ["src"],
    acceptanceCriteria: "tests pass",
    selection: "npm test",
  });
  const proposed = await c.repairs.proposePatch({ repairId: repair.id, route: { case: "manualDiff", value: fixtures.fixAddPatch("js") } });
  const { document } = await c.repairs.getApprovalDocument({ repairId: repair.id, proposalId: proposed.proposal.id });
  const t0 = Date.now();
  const p0 = performance.now();
  await c.repairs.approve({ repairId: repair.id, documentSha256: document.documentSha256 });
  const approvedAt = Date.now();
  let job;
  for (;;) {
    job = (await c.repairs.getRepair({ repairId: repair.id })).repair?.job;
    if (job && TERMINAL.has(job.state)) break;
    // Slow polling: the observer must not load the services it measures (SUCCEEDED is timed by
    // the job's own completion time, below, not by when this loop sees it).
    await new Promise((r) => setTimeout(r, 25));
  }
  const seen = performance.now() - p0;
  const done = Number(job.updatedUnixMs) - t0;
  if (job.state !== 6) throw new Error(`job ended ${job.state} ${job.outcome}: ${job.outcomeMessage}`);
  const started = Number(job.receipt?.commands?.[0]?.startedUnixMs ?? 0n);
  const ended = Number(job.receipt?.commands?.[0]?.endedUnixMs ?? 0n);
  await repo.cleanup();
  return { suite: suite.name, jobId: job.id, t0, approvedMs: approvedAt - t0, startMs: started - t0, exitMs: ended - t0, totalMs: done, seenMs: seen, commandMs: ended - started };
}

