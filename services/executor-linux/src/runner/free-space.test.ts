import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { ExecutionBundleSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { InspectionSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { afterAll, describe, expect, it } from "vitest";
import { defaultLimits } from "../profile/index.js";
import { smallFsGate, smallFsPool } from "../../testing/small-fs.js";
import type { Ctx } from "./attempt.js";
import { spaceRefusal } from "./free-space.js";

const MiB = 1024 * 1024;
const noSmallFs = smallFsGate();

/** A two-step job (16 MiB output limit) on a node whose data directory is `dataDir`, staging under `jobRoot` when there is a job user. */
function ctxOf(dataDir: string, o: { jobRoot?: string; floor?: number } = {}): Pick<Ctx, "deps" | "bundle" | "jobUser"> {
  return {
    deps: {
      dataDir,
      minFreeBytes: o.floor ?? 16 * MiB,
      ...(o.jobRoot !== undefined ? { containment: { settings: { jobRoot: o.jobRoot }, facilities: undefined } } : {}),
    } as unknown as Ctx["deps"],
    bundle: create(ExecutionBundleSchema, { inspection: create(InspectionSchema, { admitted: true, limits: defaultLimits(), steps: [{ name: "build" }, { name: "test" }] }) }),
    jobUser: o.jobRoot !== undefined ? ({ uid: 64000, gid: 64000, name: "" } as Ctx["jobUser"]) : undefined,
  };
}

describe.skipIf(noSmallFs !== undefined)("the free-space floor (spaceRefusal) on small tmpfs mounts", () => {
  const { mount, unmountAll } = smallFsPool();
  afterAll(unmountAll);

  it("one filesystem for run directories and staging: the needs add up (16 MiB output + 2 × 1 MiB + the 16 MiB floor = 34 MiB)", async () => {
    const fs = mount(48 * MiB);
    const dataDir = join(fs.dir, "data");
    mkdirSync(dataDir);
    fs.fill(35 * MiB);
    expect(await spaceRefusal(ctxOf(dataDir))).toBeUndefined();
    fs.fill(33 * MiB);
    const r = await spaceRefusal(ctxOf(dataDir));
    expect(r?.outcome).toBe("rejected_insufficient_space");
    expect(r?.message).toContain(`${dataDir} has 33.0 MiB free; the job needs 34.0 MiB there`);
    expect(r?.message).toContain("the run directories (output limit 16.0 MiB + 2 × 1.0 MiB) + staging (SERAPH_MIN_FREE_BYTES 16.0 MiB)");
    expect(r?.reasons).toMatchObject([{ code: "insufficient_space", subject: dataDir }]);
  });

  it("with a job user, staging is the job root's filesystem (a directory not made yet is checked on its nearest existing parent), named on its own", async () => {
    const data = mount(32 * MiB);
    const jobs = mount(32 * MiB);
    const jobRoot = join(jobs.dir, "seraph-jobs", "not-yet");
    jobs.fill(10 * MiB);
    const r = await spaceRefusal(ctxOf(data.dir, { jobRoot }));
    expect(r?.reasons).toMatchObject([{ code: "insufficient_space", subject: jobRoot }]);
    expect(r?.message).toContain(`${jobRoot} has 10.0 MiB free; the job needs 16.0 MiB there: staging (SERAPH_MIN_FREE_BYTES 16.0 MiB)`);
    expect(r?.message).not.toContain(data.dir);
    // The run directories' filesystem short too: both are named.
    data.fill(17 * MiB);
    expect((await spaceRefusal(ctxOf(data.dir, { jobRoot })))?.reasons.map((x) => x.subject)).toEqual([data.dir, jobRoot]);
    expect(await spaceRefusal(ctxOf(data.dir, { jobRoot, floor: 8 * MiB }))).toMatchObject({ reasons: [{ subject: data.dir }] });
  });
});
