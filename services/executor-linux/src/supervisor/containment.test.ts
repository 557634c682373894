import { create } from "@bufbuild/protobuf";
import pino from "pino";
import { describe, expect, test } from "vitest";
import { CgroupRequestSchema, JobUserSchema, SupervisorSpecSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { Containment, ContainmentUnavailableError, cgroupName, containmentProblems } from "./containment.js";

const log = pino({ level: "silent" });
const base = () =>
  create(SupervisorSpecSchema, { jobId: "j/1 x", attempt: 2, fence: 9n, commands: [{ name: "test", argv: ["/bin/true"], cwd: "/" }], runDir: "/tmp/x", deadlineUnixMs: 1n });

describe("containment spec rules", () => {
  test("uid/gid 0, a bad parent and too-small ceilings are refused with every reason", () => {
    const spec = base();
    spec.jobUser = create(JobUserSchema, { uid: 0, gid: 5 });
    spec.cgroup = create(CgroupRequestSchema, { parent: "/seraph/../x", ceilings: { pids: 3, memoryBytes: 1024n, cpuMillicores: 5 } });
    const problems = containmentProblems(spec);
    expect(problems).toEqual([
      "job_user uid and gid must not be 0",
      'cgroup.parent "/seraph/../x" must be an absolute path of plain names',
      "cgroup.ceilings.pids must be 0 or at least 64",
      "cgroup.ceilings.memory_bytes must be 0 or at least 16777216",
      "cgroup.ceilings.cpu_millicores must be 0 or at least 100",
    ]);
  });

  test("isolate_network needs a job user: a command running as root could setns back to the host's network", () => {
    const spec = base();
    spec.isolateNetwork = true;
    expect(containmentProblems(spec)).toEqual(["isolate_network needs job_user: a command running as root could leave its network namespace"]);
    spec.jobUser = create(JobUserSchema, { uid: 64000, gid: 64000 });
    expect(containmentProblems(spec)).toEqual([]);
  });

  test("the cgroup name is made of plain characters and binds job, attempt and fence", () => {
    expect(cgroupName(base())).toBe("job-j_1_x-a2-f9");
  });
});

describe("Containment refuses what it cannot give (the supervisor then exits 69 before its marker)", () => {
  test("a job user without root", () => {
    const spec = base();
    spec.jobUser = create(JobUserSchema, { uid: 64000, gid: 64000 });
    expect(() => new Containment({ spec, log, selfPid: 1, euid: 1000 })).toThrow(ContainmentUnavailableError);
    expect(() => new Containment({ spec, log, selfPid: 1, euid: 1000 })).toThrow(/^job_user_needs_root: /);
  });

  test("a job user without a trusted setpriv", () => {
    const spec = base();
    spec.jobUser = create(JobUserSchema, { uid: 64000, gid: 64000 });
    expect(() => new Containment({ spec, log, selfPid: 1, euid: 0, setprivCandidates: ["/nonexistent/setpriv"] })).toThrow(/^job_user_unavailable: no trusted setpriv/);
  });

  test("a network namespace without root, or one the kernel refuses: nothing is left behind", () => {
    const spec = base();
    spec.jobUser = create(JobUserSchema, { uid: 64000, gid: 64000 });
    spec.isolateNetwork = true;
    const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"];
    let unshares = 0;
    const refusing = () => ({ unshareNetwork: () => (unshares++, { ok: false as const, errno: 1 }), enterNetwork: () => ({ ok: true as const }), interfaceUp: () => ({ ok: true as const }) });
    expect(() => new Containment({ spec, log, selfPid: 1, euid: 1000, networkCalls: refusing })).toThrow(/^job_user_needs_root: /);
    expect(() => new Containment({ spec, log, selfPid: 1, euid: 0, setprivCandidates: setpriv, networkCalls: refusing })).toThrow(/^network_namespace_failed: unshare\(CLONE_NEWNET\) failed with errno 1$/);
    expect(unshares).toBe(1);
  });

  test("a cgroup without root, and without cgroup v2", () => {
    const spec = base();
    spec.cgroup = create(CgroupRequestSchema, { parent: "/seraph" });
    expect(() => new Containment({ spec, log, selfPid: 1, euid: 1000 })).toThrow(/^cgroup_needs_root: /);
    expect(() => new Containment({ spec, log, selfPid: 1, euid: 0, cgroupFsRoot: "/nonexistent-cgroup-root" })).toThrow(/^cgroup_v2_missing: /);
  });
});
