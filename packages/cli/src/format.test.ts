import { create } from "@bufbuild/protobuf";
import { GetRepairResultsResponseSchema, RepairSchema, RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { TestStatus } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { PrerequisiteReportSchema } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { JobSchema, JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { describe, expect, it } from "vitest";
import { heartbeatLine } from "./commands/repair/watch.js";
import { prerequisitesText, repairLine, repairText, resultsText } from "./format.js";

describe("repair show", () => {
  it("prints the job's steps, artifacts with sha256 and readback, and the recovery record", () => {
    const job = create(JobSchema, {
      id: "j1",
      state: JobState.UNKNOWN,
      outcome: "unknown_external_effect",
      attempt: 1,
      steps: [{ name: "test", argv: ["/n/node", "--test", "t.test.js"], started: true, exitCode: 1, passed: false, durationMs: 12 }],
      artifacts: [{ id: "a1", kind: "test_output", name: "test.stdout", sha256: "b".repeat(64), size: 5n, readbackVerified: true }],
      recovery: { cleanupReceiptVerified: true, processCleanupReadbackSha256: "c".repeat(64), readbackScope: "process_cleanup_only", proof: "cleanup_receipt", recoveredBy: "p1", recoveredUnixMs: 1n },
    });
    const text = repairText(create(RepairSchema, { id: "r1", job }));
    expect(text).toContain("step test: not passed (exit 1, 12 ms)");
    expect(text).toContain(`test.stdout  5 B  sha256 ${"b".repeat(64)}  read back`);
    expect(text).toContain(`cleanup_receipt_verified=true process_cleanup_readback_sha256=${"c".repeat(64)} readback_scope=process_cleanup_only`);
    expect(text).toContain("the task outcome stays unknown_external_effect");
  });
});

describe("repair show: a slot released by a cgroup proof", () => {
  it("says cleanup proved by cgroup and results unknown, not RECOVERY NEEDED", () => {
    const recovery = { cleanupReceiptVerified: false, processCleanupReadbackSha256: "c".repeat(64), readbackScope: "process_cleanup_only", proof: "cleanup_proved_by_cgroup", recoveredBy: "executor:node-a", recoveredUnixMs: 1n };
    const released = create(JobSchema, { id: "j1", state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", attempt: 1, slotHeld: false, recovery });
    const text = repairText(create(RepairSchema, { id: "r1", job: released }));
    expect(text).not.toContain("RECOVERY NEEDED");
    expect(text).toContain("RECOVERED: slot released, cleanup proved by cgroup (its supervisor died without a receipt; the executor killed the job's own cgroup, saw it empty and every recorded pid gone); the job's outcome stays unknown (its results are not proven).");
    expect(text).toContain("recovery: physical slot released by executor:node-a at 1970-01-01T00:00:00.001Z (proof cleanup_proved_by_cgroup; the task outcome stays unknown_supervisor_lost)");
    expect(text).toContain("cleanup_receipt_verified=false");
    expect(text).toMatch(/cleanup proved by cgroup .*; results unknown/);
    const held = create(JobSchema, { id: "j2", state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", attempt: 1, slotHeld: true });
    expect(repairText(create(RepairSchema, { id: "r2", job: held }))).toContain("RECOVERY NEEDED");
  });
});

describe("repair show: the recorded job preflight", () => {
  const preflight = {
    nodeId: "node-a",
    bootId: "boot-1",
    repositoryPath: "/srv/repos/app",
    repositoryRoot: "/srv/repos",
    repositoryRootOk: true,
    runtimePath: "/opt/node/bin/node",
    runtimeVersion: "v24.15.0",
    runtimeSha256: "d".repeat(64),
    backend: "local",
    isolationClaim: "separate_job_uid",
    resourceEnforcement: "admission_and_wall_timeout_only",
    unenforced: ["cpu", "memory", "pids"],
    supervisorSourceSha256: "e".repeat(64),
    startedUnixMs: 1_000n,
    finishedUnixMs: 2_000n,
    deadlineUnixMs: 181_000n,
    driftChecked: true,
    limits: { wallMs: 180_000 },
    facilities: { ok: true, arch: "x64", kernel: "6.1.0", items: [{ name: "pidfd", ok: true, code: "ok", message: "" }] },
  };

  it("prints the evidence, labelled as such and not as a fresh readiness claim", () => {
    const job = create(JobSchema, { id: "j1", state: JobState.SUCCEEDED, outcome: "succeeded", attempt: 1, preflight });
    const text = repairText(create(RepairSchema, { id: "r1", job }));
    expect(text).toContain("recorded job preflight (evidence recorded when this job was prepared on its executor; not a fresh readiness claim");
    expect(text).toContain("preparation recorded at 1970-01-01T00:00:02.000Z");
    expect(text).toContain(`runtime /opt/node/bin/node v24.15.0  sha256 ${"d".repeat(64)}`);
    expect(text).toContain("repository /srv/repos/app  under root /srv/repos");
    expect(text).toContain("isolation_claim separate_job_uid  resource_enforcement admission_and_wall_timeout_only  unenforced cpu, memory, pids");
    expect(text).toContain(`supervisor source sha256 ${"e".repeat(64)}`);
    expect(text).toContain("deadline (whole attempt) 1970-01-01T00:03:01.000Z");
    expect(text).toContain("linux facilities ok (x64 6.1.0):");
    expect(text).toContain("wallMs=180000");
    expect(text).not.toContain("PREPARATION BLOCKED");
  });

  it("says PREPARATION BLOCKED with the recorded reasons and the failing facility; and with none recorded for a claimed job", () => {
    const blocked = create(JobSchema, {
      id: "j2",
      state: JobState.REJECTED,
      outcome: "rejected_facilities",
      preflight: {
        ...preflight,
        blocked: true,
        reasons: [{ code: "facilities_blocked", message: "pidfd is missing", subject: "" }],
        facilities: { ok: false, arch: "x64", kernel: "simulated", items: [{ name: "pidfd", ok: false, code: "pidfd_unavailable", message: "no pidfd_open" }] },
      },
    });
    const text = repairText(create(RepairSchema, { id: "r2", job: blocked }));
    expect(text).toContain("PREPARATION BLOCKED: the executor recorded that preparation stopped this job (rejected_facilities)");
    expect(text).toContain("- facilities_blocked: pidfd is missing");
    expect(text).toContain("FAIL pidfd pidfd_unavailable: no pidfd_open");
    const missing = repairText(create(RepairSchema, { id: "r3", job: create(JobSchema, { id: "j3", state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost" }) }));
    expect(missing).toContain("PREPARATION BLOCKED: no preparation evidence was recorded for this job (unknown_supervisor_lost)");
    const queued = repairText(create(RepairSchema, { id: "r4", job: create(JobSchema, { id: "j4", state: JobState.QUEUED }) }));
    expect(queued).toContain("not prepared yet: the job has not been claimed by its executor");
  });
});

describe("repair results: a baseline before the patched run", () => {
  const repairId = "d7f9ff0b-9498-42cf-820c-17ccd22fa8f3";
  const baseline = {
    jobId: "b5e92dda-0000-4000-8000-000000000000",
    jobState: JobState.FAILED,
    jobOutcome: "failed",
    availability: "stored",
    results: { state: "parsed", format: "node_test_tap", sourceName: "test.report.tap", sourceSha256: "4".repeat(64), counts: { total: 1, failed: 1 } },
  };

  it("says the comparison waits for the patched job, not that there is no baseline", () => {
    const text = resultsText(create(GetRepairResultsResponseSchema, { repairId, patched: { availability: "pending" }, baseline }));
    expect(text).not.toContain("no baseline");
    expect(text).toContain("summary  no comparison yet: the patched run has no approved job (seraph repair approve d7f9ff0b runs it");
    expect(text).toContain("baseline job b5e92dda FAILED (failed): 1 test: 0 passed, 1 failed");
  });

  it("still says no baseline when there is none, and counts tests in the plural", () => {
    const patched = { ...baseline, results: { ...baseline.results, counts: { total: 2, passed: 2 } } };
    const text = resultsText(create(GetRepairResultsResponseSchema, { repairId, patched }));
    expect(text).toContain("summary  no baseline (seraph repair baseline runs the unpatched snapshot to compare with)");
    expect(text).toContain("2 tests: 2 passed, 0 failed");
  });
});

describe("settings check", () => {
  it("aligns every item's message in one column, past the longest item name", () => {
    const report = create(PrerequisiteReportSchema, { nodeId: "vm", ok: true, runtimePath: "/n/node", runtimeVersion: "v24.15.0", runtimeSha256: "", items: [
      { name: "pidfd", ok: true, code: "ok", message: "pidfd works." },
      { name: "supervisor_runtime", ok: true, code: "ok", message: "Node v24.15.0." },
      { name: "repository_roots", ok: false, code: "roots_disjoint", message: "No root in common." },
    ] });
    const lines = prerequisitesText([report]).trimEnd().split("\n").slice(1);
    expect(lines).toEqual([
      "  ok   pidfd              pidfd works.",
      "  ok   supervisor_runtime Node v24.15.0.",
      "  FAIL repository_roots   roots_disjoint: No root in common.",
    ]);
  });
});

describe("repair show: the inspected runtime of each profile", () => {
  it("names the Python interpreter and framework for repo-python3-v1, and Node for repo-node24-npm-v1", () => {
    const python = repairText(create(RepairSchema, { id: "r1", inspection: { admitted: true, pythonPath: "/usr/bin/python3.11", pythonVersion: "3.11.2", framework: "unittest", frameworkVersion: "3.11.2", sourceFiles: 4, snapshotBytes: 165n, steps: [{ name: "test", argv: ["/usr/bin/python3.11", "-m", "unittest"] }] } }));
    expect(python).toContain("    python /usr/bin/python3.11 3.11.2, unittest 3.11.2; 4 source files, 0 dependency files, 165 bytes");
    expect(python).toContain("steps (script body → direct argv; pip and shells are never run):");
    expect(python).not.toMatch(/^ {4}node /m);
    const node = repairText(create(RepairSchema, { id: "r2", inspection: { admitted: true, nodePath: "/n/node", nodeVersion: "v24.15.0", sourceFiles: 3, steps: [{ name: "test", argv: ["/n/node", "--test"] }] } }));
    expect(node).toContain("    node /n/node v24.15.0; 3 source files, 0 dependency files, 0 bytes");
    expect(node).toContain("steps (script body → direct argv; npm, npx and shells are never run):");
  });
});

describe("repair results: long failure messages", () => {
  const repairId = "d7f9ff0b-9498-42cf-820c-17ccd22fa8f3";
  const message = Array.from({ length: 9 }, (_, i) => `line ${i + 1}${i === 8 ? ": IDNAError: Label too long" : ""}`).join("\n");
  const res = () =>
    create(GetRepairResultsResponseSchema, {
      repairId,
      patched: { jobId: "j", jobState: JobState.FAILED, jobOutcome: "failed", availability: "stored", results: { state: "parsed", format: "python_unittest", counts: { total: 1, failed: 1 }, tests: [{ name: "test_long", status: TestStatus.FAILED, message, key: "k" }] } },
    });

  it("cuts a message after 6 lines with a marker saying how many more and how to see them; --full shows every line", () => {
    const cut = resultsText(res());
    expect(cut).toContain("line 6\n              … 3 more lines (--full)");
    expect(cut).not.toContain("Label too long");
    const full = resultsText(res(), { full: true });
    expect(full).toContain("line 9: IDNAError: Label too long");
    expect(full).not.toContain("more line");
  });
});

describe("lists: a held UNKNOWN and a recovered one read differently", () => {
  it("says slot held, or recovered: slot released", () => {
    const held = create(JobSchema, { id: "j1", state: JobState.UNKNOWN, attempt: 1, slotHeld: true });
    const released = create(JobSchema, { id: "j2", state: JobState.UNKNOWN, attempt: 1, slotHeld: false, recovery: { proof: "host_rebooted" } });
    expect(repairLine(create(RepairSchema, { id: "r1", job: held }))).toContain("UNKNOWN attempt 1 (slot held)");
    expect(repairLine(create(RepairSchema, { id: "r2", job: released }))).toContain("UNKNOWN attempt 1 (recovered: slot released)");
  });
});

describe("repair watch: the heartbeat line", () => {
  it("names the running step and its own clock, or the job's state and for how long, or the repair waiting for you", () => {
    const now = Date.UTC(2026, 11, 6, 12, 0, 0);
    const running = create(RepairSchema, { id: "0123456789", job: { id: "j", state: JobState.RUNNING, runningStep: "test", runningStepStartedUnixMs: BigInt(now - 83_000), updatedUnixMs: BigInt(now - 90_000) } });
    expect(heartbeatLine(running, now)).toMatch(/^12:00:00 {2}01234567 {2}\[RUNNING\] +still step test running for 1:23; no change since the last line$/);
    const queued = create(RepairSchema, { id: "0123456789", job: { id: "j", state: JobState.QUEUED, updatedUnixMs: BigInt(now - 12_000) }, waitReason: "slot 0 of node-a is held by job 9" });
    expect(heartbeatLine(queued, now)).toContain("still job queued for 0:12 (waiting: slot 0 of node-a is held by job 9)");
    const proposed = create(RepairSchema, { id: "0123456789", state: RepairState.PROPOSED });
    expect(heartbeatLine(proposed, now)).toContain("still repair proposed, waiting for you");
  });
});
