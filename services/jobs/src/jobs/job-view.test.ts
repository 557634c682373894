import { create, toBinary } from "@bufbuild/protobuf";
import { ExecutionBundleSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentitySchema, InspectionSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { describe, expect, it } from "vitest";
import { bundleSummary, readBundle } from "./job-view.js";

describe("bundleSummary", () => {
  it("reads the supervisor source hash and the patch-changed tests exactly as decoding the bundle does", () => {
    const bundle = create(ExecutionBundleSchema, {
      repairId: "r",
      inspection: create(InspectionSchema, { identities: Array.from({ length: 50 }, (_, i) => create(IdentitySchema, { name: `src/f${i}.js`, sha256: "ab".repeat(32), size: 10n })) }),
      diff: "--- a\n+++ b\n",
      allowedPatchPaths: ["src"],
      supervisorSourceSha256: "cd".repeat(32),
      patchChangedTests: ["test/a.test.js", "test/b.test.js"],
      baseline: true,
    });
    const bytes = toBinary(ExecutionBundleSchema, bundle);
    const decoded = readBundle({ bundle: bytes } as never);
    expect(bundleSummary(bytes)).toEqual({ supervisorSourceSha256: decoded.supervisorSourceSha256, patchChangedTests: decoded.patchChangedTests });
    expect(bundleSummary(toBinary(ExecutionBundleSchema, create(ExecutionBundleSchema, {})))).toEqual({ supervisorSourceSha256: "", patchChangedTests: [] });
  });

  it("refuses bytes that are not a bundle, as decoding does", () => {
    const truncated = toBinary(ExecutionBundleSchema, create(ExecutionBundleSchema, { diff: "x".repeat(100), patchChangedTests: ["t"] })).subarray(0, 20);
    expect(() => readBundle({ bundle: truncated } as never)).toThrow();
    expect(() => bundleSummary(truncated)).toThrow();
  });
});
