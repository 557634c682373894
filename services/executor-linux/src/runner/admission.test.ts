import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { createRootLogger } from "@seraph/kit";
import { ExecutionBundleSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { InspectionSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { ContainmentFacilitiesSchema, FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { describe, expect, it } from "vitest";
import { defaultContainmentSettings, nodeContainment, type ContainmentSettings } from "../supervisor-client/node-containment.js";
import { admissionRefusal, applyContainment, stepReserveMs, wallMsOf } from "./admission.js";
import type { Ctx } from "./attempt.js";

const ROOT = "/srv/seraph-admission-test";

function ctxOf(bundle: Omit<MessageInitShape<typeof ExecutionBundleSchema>, "$typeName"> = {}, facilitiesOk = true): Pick<Ctx, "deps" | "bundle"> {
  return {
    deps: {
      identity: { nodeId: "node-a", bootId: "b", incarnationId: "i" },
      log: createRootLogger({ name: "admission-test", level: "silent" }),
      facilities: () => create(FacilityReportSchema, { ok: facilitiesOk }),
      repositoryRoots: [ROOT],
    } as unknown as Ctx["deps"],
    bundle: create(ExecutionBundleSchema, {
      approvalExpiresUnixMs: BigInt(Date.now() + 60_000),
      repositoryPath: `${ROOT}/repo`,
      inspection: create(InspectionSchema, { admitted: true, nodePath: "/opt/node/bin/node" }),
      runtimePath: "/opt/node/bin/node",
      ...bundle,
    }),
  };
}

describe("admissionRefusal: the executor's fresh admission, in order", () => {
  it("admits an unexpired, admitted bundle under a node root with the inspected runtime", async () => {
    expect(await admissionRefusal(ctxOf())).toBeUndefined();
  });

  it("refuses an expired approval first, even when everything else is wrong too", async () => {
    const r = await admissionRefusal(ctxOf({ approvalExpiresUnixMs: BigInt(Date.now() - 1), repositoryPath: "/elsewhere" }, false));
    expect(r).toMatchObject({ outcome: "rejected_approval_expired", reasons: [{ code: "rejected_approval_expired", subject: "approval" }] });
  });

  it("refuses missing facilities naming the node, then a repository outside the roots naming the path", async () => {
    expect(await admissionRefusal(ctxOf({}, false))).toMatchObject({ outcome: "rejected_facilities", reasons: [{ code: "facilities_blocked", subject: "node-a" }] });
    expect(await admissionRefusal(ctxOf({ repositoryPath: "/elsewhere/repo" }))).toMatchObject({ outcome: "rejected_repository_root", reasons: [{ subject: "/elsewhere/repo" }] });
  });

  it("refuses an inspection that was not admitted, and a runtime path other than the inspected one", async () => {
    expect(await admissionRefusal(ctxOf({ inspection: create(InspectionSchema, { admitted: false }) }))).toMatchObject({ outcome: "rejected_not_admitted", reasons: [] });
    expect(await admissionRefusal(ctxOf({ runtimePath: "/other/node" }))).toMatchObject({ outcome: "rejected_runtime_changed", reasons: [{ code: "runtime_changed", subject: "/other/node" }] });
  });

  it("refuses a bundle that approved containment on a node that has none", async () => {
    const r = await admissionRefusal(ctxOf({ containment: { isolationClaim: "separate_job_uid" } as never }));
    expect(r?.outcome).toBe("rejected_containment_changed");
    expect(r?.message).toContain("this node has no containment settings");
  });
});

describe("the approved network claim against the node's", () => {
  const facilities = create(ContainmentFacilitiesSchema, { root: true, setprivPath: "/usr/bin/setpriv", networkNamespace: true });
  const withNode = (settings: ContainmentSettings, approved: ContainmentSettings) => {
    const ctx = ctxOf({ containment: nodeContainment(approved, facilities) });
    (ctx.deps as { containment?: unknown }).containment = { settings, facilities };
    return ctx;
  };
  const isolated = defaultContainmentSettings(1);
  const host = { ...isolated, network: "host" as const };

  it("an approval of own_loopback_only on a node now on the host's network is refused, and the reverse", async () => {
    const r = await admissionRefusal(withNode(host, isolated));
    expect(r?.outcome).toBe("rejected_containment_changed");
    expect(r?.message).toContain('network_claim: approved "own_loopback_only", node now "host_network"');
    expect((await admissionRefusal(withNode(isolated, host)))?.message).toContain('network_claim: approved "host_network", node now "own_loopback_only"');
  });

  it("the supervisors are asked for a network namespace exactly when the approval claimed one", async () => {
    for (const [settings, want] of [[isolated, true], [host, false]] as const) {
      const ctx = { ...withNode(settings, settings), active: { slotIndex: 0 }, slotIndex: 0 } as unknown as Ctx;
      expect(await admissionRefusal(ctx)).toBeUndefined();
      applyContainment(ctx);
      expect(ctx.jobUser?.uid).toBe(64000);
      expect(ctx.isolateNetwork).toBe(want);
    }
  });
});

describe("wall budget", () => {
  it("a bundle without limits has the 180 s default, and a step needs more than its cleanup and readback reserves", () => {
    const bundle = create(ExecutionBundleSchema, {});
    expect(wallMsOf(bundle)).toBe(180_000);
    expect(stepReserveMs({ bundle })).toBeGreaterThan(500);
  });
});
