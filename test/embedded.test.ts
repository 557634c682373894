import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startEmbedded, type Embedded } from "@seraph/embedded";
import { createRootLogger } from "@seraph/kit";
import { parsePromText, promSample } from "@seraph/kit/testing";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, type FixtureRepo } from "@seraph/executor-linux/testing";
import { runFixRepair } from "./harness/embedded-repair.js";
import { freeEmbeddedPortBase } from "./harness/ports.js";

// `npm start`'s own shape: the embedded composition on the PostgreSQL server it starts and owns
// under its data directory (every other journey runs on the suite's shared server). Also the
// embedded opt-out of job users: SERAPH_JOB_USER=none reaches the node.
const uidTest = ['import test from "node:test";', 'import assert from "node:assert/strict";', 'import { add } from "../src/math.js";', 'test("add adds", () => { console.log(`uid=${process.getuid()}`); assert.equal(add(2, 3), 5); });', ""].join("\n");

describe("embedded on its own PostgreSQL (npm start)", () => {
  let embedded: Embedded;
  let dataDir: string;
  let root: string;
  let repo: FixtureRepo;
  let portBase: number;
  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "seraph-embedded-"));
    root = await realpath(await mkdtemp(join(tmpdir(), "seraph-embedded-repos-")));
    repo = await createJsTestProject({ parent: root, failing: true, extraFiles: { "test/math.test.js": uidTest } });
    portBase = await freeEmbeddedPortBase();
    embedded = await startEmbedded({ dataDir, portBase, host: "127.0.0.1", repositoryRoots: [root], nodeId: "embedded-node", log: createRootLogger({ name: "embedded-test", level: "warn" }), jobUser: { kind: "none" } });
  }, 60_000);
  afterAll(async () => {
    await embedded?.stop();
    await repo?.cleanup();
    await rm(dataDir, { recursive: true, force: true });
    await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("approves a manual patch and runs it to SUCCEEDED; with jobUser none the node claims no job user and the command runs as this process's uid", async () => {
    const { repairs, repairId, document, job } = await runFixRepair(`http://127.0.0.1:${portBase}`, embedded.operatorTokenCreated!, root, repo);
    expect(document.isolationClaim).toBe("none");
    expect([JobState[job?.state ?? 0], job?.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    // Where its time went: contiguous phases from creation to the last before completion.
    const phases = job!.phases;
    expect(phases.map((p) => p.name)).toEqual(expect.arrayContaining(["queue and claim", "admit", "stage", "patch", "launch supervisor", "owner marker", "go", "command and cleanup", "store evidence"]));
    expect(phases[0]!.name).toBe("queue and claim");
    expect(phases[0]!.startUnixMs).toBe(job!.createdUnixMs);
    for (let i = 0; i < phases.length; i++) {
      expect(phases[i]!.endUnixMs, phases[i]!.name).toBeGreaterThanOrEqual(phases[i]!.startUnixMs);
      if (i > 0) expect(phases[i]!.startUnixMs, phases[i]!.name).toBe(phases[i - 1]!.endUnixMs);
    }
    expect(phases.at(-1)!.endUnixMs).toBeLessThanOrEqual(job!.updatedUnixMs);
    const stdout = job!.artifacts.find((a) => a.name === "test.stdout")!;
    const out = Buffer.from((await repairs.readArtifact({ repairId, artifactId: stdout.id })).content).toString();
    expect(out).toContain(`uid=${process.getuid?.()}`);
  }, 120_000);

  it("serves Prometheus metrics of all four services on one port, and the example Grafana dashboard asks only for names it exports", async () => {
    expect(embedded.metricsUrl).toBe(`http://127.0.0.1:${portBase + 9}/metrics`);
    const text = await (await fetch(embedded.metricsUrl)).text();
    // The job above: its transitions, its slot back, its RPCs on the internal and public planes.
    expect(promSample(text, "seraph_jobs", { state: "succeeded" })).toBe(1);
    expect(promSample(text, "seraph_jobs_finished_total", { state: "succeeded" })).toBe(1);
    expect(promSample(text, "seraph_job_approve_to_start_seconds_count")).toBe(1);
    expect(promSample(text, "seraph_job_verdict_seconds_count")).toBe(1);
    expect(promSample(text, "seraph_supervisor_cleanup_seconds_count")).toBe(1);
    expect(promSample(text, "seraph_job_phase_seconds_count", { phase: "stage" })).toBe(1);
    expect(promSample(text, "seraph_job_phase_seconds_count", { phase: "command and cleanup" })).toBe(1);
    expect(promSample(text, "seraph_slots", { node: "embedded-node", state: "free" })).toBe(1);
    expect(promSample(text, "seraph_slots", { node: "embedded-node", state: "unknown" })).toBe(0);
    expect(promSample(text, "seraph_jobs_unknown_waiting")).toBe(0);
    // The instance's own PostgreSQL pool.
    expect(promSample(text, "seraph_db_pool_connections", { state: "total" })).toBeGreaterThanOrEqual(1);
    expect(promSample(text, "grpc_server_handled_total", { grpc_service: "seraph.jobs.v1.JobsService", grpc_method: "ClaimJob", grpc_code: "OK" })).toBeGreaterThanOrEqual(1);
    expect(promSample(text, "grpc_server_handled_total", { grpc_service: "seraph.api.v1.RepairService", grpc_method: "Approve", grpc_code: "OK" })).toBe(1);
    // Bounded labels: no sample is labelled with an id.
    expect(parsePromText(text).flatMap((x) => Object.keys(x.labels)).filter((k) => /id$/.test(k))).toEqual([]);

    const exported = new Set<string>();
    for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
      exported.add(m[1]!);
      if (m[2] === "histogram") for (const suffix of ["_bucket", "_sum", "_count"]) exported.add(`${m[1]}${suffix}`);
    }
    const dashboard = JSON.parse(readFileSync(fileURLToPath(new URL("../deploy/grafana/seraph-dashboard.json", import.meta.url)), "utf8")) as { panels: { title: string; targets: { expr: string }[] }[] };
    const asked = dashboard.panels.flatMap((panel) => panel.targets.flatMap((t) => [...t.expr.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)[{[]/g)].map((m) => `${panel.title}: ${m[1]}`)));
    expect(asked.length).toBeGreaterThanOrEqual(dashboard.panels.length);
    expect(asked.filter((a) => !exported.has(a.split(": ")[1]!))).toEqual([]);
  });

  it("stops with nothing of its own left running: no supervisor (warm or not) outlives the stop", async () => {
    await embedded.stop();
    embedded = undefined as unknown as Embedded;
    const mine = readdirSync("/proc").filter((p) => /^\d+$/.test(p)).filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(dataDir);
      } catch {
        return false;
      }
    });
    expect(mine).toEqual([]);
  }, 60_000);
});
