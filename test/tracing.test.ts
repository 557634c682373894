import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { startEmbedded, type Embedded } from "@seraph/embedded";
import { setupTracing, type Tracing } from "@seraph/kit";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { SpanKind } from "@opentelemetry/api";
import { InMemorySpanExporter, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, type FixtureRepo } from "@seraph/executor-linux/testing";
import { runFixRepair } from "./harness/embedded-repair.js";
import { freeEmbeddedPortBase } from "./harness/ports.js";

// OpenTelemetry (issue 28 item 2): one job is one trace from Approve in the API to CompleteJob,
// carried through gRPC metadata, the work signal's headers and the job's own record, with the
// executor's phases and the supervisor's (from its receipt) as spans; log lines carry trace ids.
describe("tracing: one job, one trace", () => {
  const exporter = new InMemorySpanExporter();
  const lines: Record<string, unknown>[] = [];
  let tracing: Tracing;
  let embedded: Embedded;
  let dataDir: string;
  let root: string;
  let repo: FixtureRepo;
  let portBase: number;
  beforeAll(async () => {
    tracing = setupTracing("seraph-test", { exporter });
    dataDir = await mkdtemp(join(tmpdir(), "seraph-tracing-"));
    root = await realpath(await mkdtemp(join(tmpdir(), "seraph-tracing-repos-")));
    repo = await createJsTestProject({ parent: root, failing: true });
    portBase = await freeEmbeddedPortBase();
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const l of chunk.toString().split("\n")) if (l.trim() !== "") lines.push(JSON.parse(l) as Record<string, unknown>);
        done();
      },
    });
    // The root logger's own mixin (createRootLogger writes to stderr; this one to the test).
    const { logTraceFields } = await import("@seraph/kit");
    const log = pino({ level: "info", mixin: logTraceFields }, sink);
    embedded = await startEmbedded({ dataDir, portBase, host: "127.0.0.1", repositoryRoots: [root], nodeId: "traced-node", log, jobUser: { kind: "none" } });
  }, 60_000);
  afterAll(async () => {
    await embedded?.stop();
    await tracing?.shutdown();
    await repo?.cleanup();
    await rm(dataDir, { recursive: true, force: true });
    await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("links Approve, EnqueueJob, the claim, the executor's phases, the supervisor's command and cleanup and CompleteJob in one trace", async () => {
    const { job } = await runFixRepair(`http://127.0.0.1:${portBase}`, embedded.operatorTokenCreated!, root, repo);
    expect(JobState[job.state]).toBe("SUCCEEDED");
    expect(job.traceParent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    await expect.poll(() => exporter.getFinishedSpans().some((s) => s.name === "seraph.job"), { timeout: 10_000 }).toBe(true);
    const spans = exporter.getFinishedSpans();
    const approve = spans.find((s) => s.name === "seraph.api.v1.RepairService/Approve" && s.kind === SpanKind.SERVER)!;
    expect(approve).toBeDefined();
    const traceId = approve.spanContext().traceId;
    expect(job.traceParent.split("-")[1]).toBe(traceId);
    const inTrace = spans.filter((s) => s.spanContext().traceId === traceId);
    const byId = new Map(inTrace.map((s) => [s.spanContext().spanId, s]));
    const parent = (s: ReadableSpan) => byId.get(s.parentSpanContext?.spanId ?? "");
    const ancestors = (s: ReadableSpan) => {
      const out: string[] = [];
      for (let p = parent(s); p; p = parent(p)) out.push(p.name);
      return out;
    };
    const one = (name: string, kind?: SpanKind) => {
      const found = inTrace.filter((s) => s.name === name && (kind === undefined || s.kind === kind));
      expect(found.length, `${name} in the job's trace`).toBeGreaterThanOrEqual(1);
      return found[0]!;
    };
    // API → jobs over gRPC: the server span's parent is the API's client span under Approve.
    expect(ancestors(one("seraph.jobs.v1.JobsService/EnqueueJob", SpanKind.SERVER))).toEqual(["seraph.jobs.v1.JobsService/EnqueueJob", "seraph.api.v1.RepairService/Approve"]);
    // The executor's claim joined through the work signal's headers; its ClaimJob call is under it.
    expect(ancestors(one("seraph.jobs.v1.JobsService/ClaimJob", SpanKind.SERVER))).toContain("seraph.claim");
    // The job span hangs under EnqueueJob (the traceparent kept with the job), its phases under it.
    const jobSpan = one("seraph.job");
    expect(ancestors(jobSpan)[0]).toBe("seraph.jobs.v1.JobsService/EnqueueJob");
    expect(jobSpan.attributes["seraph.job_id"]).toBe(job.id);
    const children = inTrace.filter((s) => parent(s) === jobSpan).map((s) => s.name);
    expect(children).toEqual(expect.arrayContaining(["stage", "go", "command and cleanup", "store evidence", "supervisor command", "supervisor cleanup to ECHILD"]));
    expect(ancestors(one("seraph.jobs.v1.JobsService/CompleteJob", SpanKind.SERVER))).toContain("seraph.job");
    // The phases' spans keep their measured times, the same as Job.phases.
    const stage = inTrace.find((s) => s.name === "stage" && parent(s) === jobSpan)!;
    const recorded = job.phases.find((p) => p.name === "stage")!;
    expect(stage.startTime[0] * 1000 + Math.round(stage.startTime[1] / 1e6)).toBe(Number(recorded.startUnixMs));
    // Log lines written inside the job's trace carry its trace id next to the job id.
    expect(lines.some((l) => l["jobId"] === job.id && l["trace_id"] === traceId)).toBe(true);
  }, 120_000);
});
