import { create } from "@bufbuild/protobuf";
import { OwnerMarkerSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { describe, expect, it } from "vitest";
import { sameMarkerIdentity } from "./marker-identity.js";

describe("sameMarkerIdentity: the one rule for 'is this the same supervisor?'", () => {
  const init = { supervisor: { pid: 7, startTimeTicks: 9n, bootId: "b" }, jobId: "j", attempt: 1, fence: 3n, supervisorSourceSha256: "s" };
  const m = create(OwnerMarkerSchema, init);
  it("ignores where the supervisor is reached (socket path, run directory)", () => {
    expect(sameMarkerIdentity(m, create(OwnerMarkerSchema, { ...init, socketPath: "/other", runDir: "/elsewhere" }))).toBe(true);
  });
  it("differs on pid, start time, boot id, job, attempt, fence or supervisor source hash", () => {
    const variants = [
      { supervisor: { pid: 8, startTimeTicks: 9n, bootId: "b" } },
      { supervisor: { pid: 7, startTimeTicks: 10n, bootId: "b" } },
      { supervisor: { pid: 7, startTimeTicks: 9n, bootId: "c" } },
      { jobId: "k" },
      { attempt: 2 },
      { fence: 4n },
      { supervisorSourceSha256: "t" },
    ];
    for (const v of variants) expect(sameMarkerIdentity(m, create(OwnerMarkerSchema, { ...init, ...v }))).toBe(false);
  });
  it("is false when either marker is absent", () => {
    expect(sameMarkerIdentity(m, undefined)).toBe(false);
    expect(sameMarkerIdentity(undefined, m)).toBe(false);
  });
});
