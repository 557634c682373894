// The jobs service's checks of an executor's cgroup cleanup observation: it must bind exactly to
// the recorded owner marker (job, attempt, fence, supervisor, boot, spec, node, the attempt's
// cgroup name), show every swept directory empty (the v2 one among them) and every recorded pid
// gone, and come after the marker. Each forged or partial observation is refused with why.
import { create } from "@bufbuild/protobuf";
import { OwnerMarkerSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { describe, expect, test } from "vitest";
import { cgroupEvidenceProblem } from "./cgroup-proof.js";

const job = { id: "11111111-2222-4333-8444-555555555555", node_id: "node-a", attempt: 2 };
const marker = create(OwnerMarkerSchema, {
  supervisor: { pid: 4242, startTimeTicks: 987n, bootId: "boot-1" },
  jobId: job.id,
  attempt: 2,
  fence: 7n,
  specSha256: "a".repeat(64),
  writtenUnixMs: 1000n,
});
const name = `job-${job.id}-a2-f7`;
const good = () => ({
  jobId: job.id,
  attempt: 2,
  fence: "7",
  nodeId: "node-a",
  incarnationId: "i-1",
  bootId: "boot-1",
  supervisor: { pid: 4242, startTimeTicks: "987" },
  specSha256: "a".repeat(64),
  cgroupParent: "/seraph",
  cgroupName: name,
  layout: "hybrid",
  cgroups: [
    { version: 2, dir: `/sys/fs/cgroup/unified/seraph/${name}`, method: "cgroup.kill", empty: true, removed: true, signalled: 0 },
    { version: 1, dir: `/sys/fs/cgroup/pids/seraph/${name}`, method: "procs", empty: true, removed: true, signalled: 0 },
  ],
  rounds: 2,
  pids: [
    { role: "supervisor", pid: 4242, startTimeTicks: "987", gone: "absent" },
    { role: "command", pid: 4250, startTimeTicks: "990", gone: "reused" },
  ],
  observedUnixMs: 2000,
});

describe("cgroupEvidenceProblem", () => {
  test("an observation that binds to the marker passes", () => {
    expect(cgroupEvidenceProblem(good(), job, marker)).toBe("");
  });

  test.each<[string, (e: ReturnType<typeof good>) => unknown, RegExp]>([
    ["another fence", (e) => (e.fence = "6"), /another job, attempt or fence/],
    ["another attempt", (e) => (e.attempt = 1), /another job, attempt or fence/],
    ["another node", (e) => (e.nodeId = "node-b"), /observed on node node-b/],
    ["another supervisor start time", (e) => (e.supervisor.startTimeTicks = "988"), /another supervisor than the marker/],
    ["another boot", (e) => (e.bootId = "boot-2"), /another boot/],
    ["another spec", (e) => (e.specSha256 = "b".repeat(64)), /another supervisor spec/],
    ["another cgroup", (e) => (e.cgroupName = `job-${job.id}-a2-f8`), /not the attempt's/],
    ["a directory of another cgroup", (e) => (e.cgroups[1]!.dir = "/sys/fs/cgroup/pids/seraph/other"), /not a directory of/],
    ["a directory not seen empty", (e) => (e.cgroups[0]!.empty = false), /was not seen empty/],
    ["no v2 directory", (e) => (e.cgroups = e.cgroups.filter((d) => d.version === 1)), /no v2 cgroup directory/],
    ["a pid not shown gone", (e) => (e.pids[1]!.gone = "alive"), /recorded pid 4250 is not shown gone/],
    ["no supervisor pid", (e) => (e.pids = e.pids.filter((p) => p.role !== "supervisor")), /does not show the recorded supervisor gone/],
    ["observed before the marker", (e) => (e.observedUnixMs = 999), /not observed after the marker/],
  ])("refuses %s", (_what, change, why) => {
    const e = good();
    change(e);
    expect(cgroupEvidenceProblem(e as unknown as Record<string, unknown>, job, marker)).toMatch(why);
  });
});
