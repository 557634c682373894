import { create } from "@bufbuild/protobuf";
import { RepairSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobSchema, JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { describe, expect, it } from "vitest";
import { repairText } from "./format.js";

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
