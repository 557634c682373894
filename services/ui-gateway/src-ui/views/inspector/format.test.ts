import { create } from "@bufbuild/protobuf";
import { RepairSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterEach, describe, expect, it, vi } from "vitest";
import { changedAt, elapsed, until } from "./format.js";
import { newerJob } from "./page.js";

describe("inspector formatting", () => {
  afterEach(() => vi.useRealTimers());

  it("elapsed: tenths of a second under ten seconds, then m:ss, then h:mm:ss", () => {
    expect(elapsed(-5)).toBe("0.0 s");
    expect(elapsed(4_249)).toBe("4.2 s");
    expect(elapsed(9_999)).toBe("10.0 s");
    expect(elapsed(10_000)).toBe("0:10");
    expect(elapsed(65_900)).toBe("1:05");
    expect(elapsed(3_725_000)).toBe("1:02:05");
  });

  it("until: unset, expired, or what is left", () => {
    vi.useFakeTimers();
    vi.setSystemTime(Date.UTC(2026, 0, 1, 10, 0, 0));
    expect(until(0n)).toBe("—");
    expect(until(BigInt(Date.UTC(2026, 0, 1, 9, 59, 0)))).toBe("2026-01-01 09:59:00 UTC — EXPIRED");
    expect(until(BigInt(Date.UTC(2026, 0, 1, 10, 4, 10)))).toBe("2026-01-01 10:04:10 UTC (in 4 min 10 s)");
  });

  it("changedAt: the later of the repair's and its job's last change", () => {
    expect(changedAt(create(RepairSchema, { updatedUnixMs: 5n }))).toBe(5n);
    expect(changedAt(create(RepairSchema, { updatedUnixMs: 5n, job: { updatedUnixMs: 9n } }))).toBe(9n);
    expect(changedAt(create(RepairSchema, { updatedUnixMs: 9n, job: { updatedUnixMs: 5n } }))).toBe(9n);
  });

  it("newerJob keeps the current view of the same job when the incoming one is an older revision", () => {
    const cur = create(JobSchema, { id: "a", revision: 3n });
    expect(newerJob(create(JobSchema, { id: "a", revision: 2n }), cur)).toBe(cur);
    const newer = create(JobSchema, { id: "a", revision: 4n });
    expect(newerJob(newer, cur)).toBe(newer);
    const other = create(JobSchema, { id: "b", revision: 1n });
    expect(newerJob(other, cur)).toBe(other);
    expect(newerJob(undefined, cur)).toBeUndefined();
  });
});
