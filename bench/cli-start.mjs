// CLI start: `seraph repair show ID` and `seraph repair list` against an embedded instance, from
// process start to exit, for the bundled CLI (bin/seraph.js → dist/seraph.mjs) against the
// compiled modules it is bundled from (dist/main.js) and against a bare `node -e 0`, interleaved
// in one run (medians). The instance holds BENCH_REPAIRS repairs (default 30), one of which ran.
//
//   node bench/cli-start.mjs [iterations=15]
//
// Needs: `npm run build` (the bundle), PostgreSQL (SERAPH_TEST_POSTGRES_URL, default 127.0.0.1:5432).
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { apiClients, fmt, importBuilt, importTesting, loadAverages, machine, median, oneJob, root } from "./jobs-common.mjs";

const N = Number(process.argv[2] ?? 15);
const REPAIRS = Number(process.env.BENCH_REPAIRS ?? 30);
const fixtures = await importTesting("services/executor-linux/testing/index.ts");
const { createTestDatabase } = await importTesting("packages/kit/testing/index.ts");
const { freeEmbeddedPortBase } = await importTesting("test/harness/ports.ts");
const { startEmbedded } = await importBuilt("packages/embedded/dist/index.js");
const { createRootLogger } = await import("@seraph/kit");
const node = await fixtures.pinnedNodeForTests({ CI: "true" });

const dataDir = await mkdtemp(join(tmpdir(), "seraph-bench-cli-"));
const parent = await realpath(await mkdtemp(join(tmpdir(), "seraph-bench-cli-repos-")));
const db = await createTestDatabase();
const portBase = await freeEmbeddedPortBase();
const embedded = await startEmbedded({ dataDir, portBase, host: "127.0.0.1", repositoryRoots: [parent], nodeId: "bench-cli", log: createRootLogger({ name: "bench-cli", level: "warn" }), databaseUrl: db.url, jobUser: { kind: "none" } });
try {
  const api = `http://127.0.0.1:${portBase}`;
  const token = embedded.operatorTokenCreated;
  const c = apiClients(api, token);
  await c.settings.updateSandboxSettings({ expectedRevision: 0n, settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: node, enabled: true, repositoryRoots: [parent] } });
  await oneJob(fixtures, c, parent, { name: "tiny", options: {} });
  const repo = await fixtures.createJsTestProject({ parent, failing: true, git: false });
  const { repository } = await c.repos.registerRepository({ path: repo.dir });
  const { goal } = await c.goals.createGoal({ title: "bench", objective: "add adds" });
  for (let i = 1; i < REPAIRS; i++) {
    await c.repairs.createRepair({ goalId: goal.id, goalRevision: 1, repositoryId: repository.id, sourcePaths: ["src", "test"], allowedPatchPaths: ["src"], acceptanceCriteria: "tests pass", selection: "npm test" });
  }
  const env = { ...process.env, SERAPH_TOKEN: token, SERAPH_API_URL: api, NO_COLOR: "1", SERAPH_CONFIG_DIR: dataDir };
  // Asynchronous: the instance answers from this very process, so its event loop must run.
  const run = promisify(execFile);
  const time = async (argv) => {
    const t = performance.now();
    await run(process.execPath, argv, { cwd: root, env, timeout: 30_000, maxBuffer: 16 * 1024 * 1024 });
    return performance.now() - t;
  };
  const bin = join(root, "packages/cli/bin/seraph.js");
  const compiled = (args) => ["--input-type=module", "-e", `const { main } = await import(${JSON.stringify(join(root, "packages/cli/dist/main.js"))}); process.exitCode = await main(${JSON.stringify(args)});`];
  const cases = {
    "node -e 0 (bare)": ["-e", "0"],
    "bundled: repair show": [bin, "repair", "show", (await c.repairs.listRepairs({ goalId: "" })).repairs.at(-1).id],
    "compiled: repair show": null,
    "bundled: repair list": [bin, "repair", "list"],
    "compiled: repair list": null,
  };
  const showId = cases["bundled: repair show"][3];
  cases["compiled: repair show"] = compiled(["repair", "show", showId]);
  cases["compiled: repair list"] = compiled(["repair", "list"]);
  const times = Object.fromEntries(Object.keys(cases).map((k) => [k, []]));
  for (const argv of Object.values(cases)) await time(argv); // warm the file cache
  for (let i = 0; i < N; i++) for (const [k, argv] of Object.entries(cases)) times[k].push(await time(argv));
  const bare = median(times["node -e 0 (bare)"]);
  const lines = [`CLI start, ${N} runs each (interleaved), ${REPAIRS} repairs in the instance`];
  for (const [k, t] of Object.entries(times)) lines.push(`  ${k.padEnd(24)} ${fmt(median(t))} ms  (${fmt(median(t) / bare, 2)}× bare node)`);
  lines.push(`  load ${loadAverages()}  ${machine()}`, "");
  process.stdout.write(lines.join("\n"));
  await repo.cleanup();
} finally {
  await embedded.stop();
  await db.drop();
  await rm(dataDir, { recursive: true, force: true });
  await rm(parent, { recursive: true, force: true });
}
