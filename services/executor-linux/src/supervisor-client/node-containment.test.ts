import { create } from "@bufbuild/protobuf";
import { describe, expect, test } from "vitest";
import { ContainmentFacilitiesSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { loadExecutorConfig, containmentSettingsOf } from "../config.js";
import {
  cgroupRequestFor,
  containmentDifferences,
  defaultContainmentSettings,
  jobUserForSlot,
  networkIsolationActive,
  nodeContainment,
  parseJobUserSetting,
} from "./node-containment.js";

const rootHost = create(ContainmentFacilitiesSchema, { root: true, setprivPath: "/usr/bin/setpriv", cgroupLayout: "hybrid", cgroupV2Mount: "/sys/fs/cgroup/unified", controllers: ["cpu", "memory", "pids"] });
const userHost = create(ContainmentFacilitiesSchema, { root: false, setprivPath: "/usr/bin/setpriv", cgroupLayout: "hybrid", controllers: [] });

describe("nodeContainment: the exact claims", () => {
  test("not root: none and admission_and_wall_timeout_only, as before", () => {
    const c = nodeContainment({ ...defaultContainmentSettings(2), cgroups: true }, userHost);
    expect(c.isolationClaim).toBe("none");
    expect(c.resourceEnforcement).toBe("admission_and_wall_timeout_only");
    expect(c.unenforced).toEqual(["cpu", "memory", "pids"]);
    expect(c.protects).toEqual([]);
    expect(c.perJobCgroup).toBe(false);
    expect(jobUserForSlot(defaultContainmentSettings(2), userHost, 1)).toBeUndefined();
  });

  test("root, per-slot uids, cgroups off: separate_job_uid, ceilings unenforced; it says what is and is not protected", () => {
    const s = defaultContainmentSettings(3);
    const c = nodeContainment(s, rootHost);
    expect(c.isolationClaim).toBe("separate_job_uid");
    expect(c.resourceEnforcement).toBe("admission_and_wall_timeout_only");
    expect(c.jobUidRange).toBe("64000-64002");
    expect(c.protects.join("\n")).toMatch(/supervisor process.*signal, stop or ptrace/);
    expect(c.protects.join("\n")).toMatch(/token and control socket/);
    expect(c.protects.join("\n")).toMatch(/journals and receipt.*\/proc/);
    expect(c.protects.join("\n")).toMatch(/other jobs' staging/);
    expect(c.doesNotProtect.join("\n")).toMatch(/world-readable/);
    expect(c.doesNotProtect.join("\n")).toMatch(/network/);
    expect(c.doesNotProtect.join("\n")).toMatch(/resource use without a ceiling: cpu, memory, pids/);
    expect(jobUserForSlot(s, rootHost, 2)).toMatchObject({ uid: 64002, gid: 64002 });
  });

  test("root with cgroups on: the enforced ceilings are listed by name with their values", () => {
    const s = { ...defaultContainmentSettings(1), cgroups: true, cpuMillicores: 0 };
    const c = nodeContainment(s, rootHost);
    expect(c.resourceEnforcement).toBe("admission_wall_timeout_and_cgroup:memory,pids");
    expect(c.enforced).toEqual(["memory", "pids"]);
    expect(c.unenforced).toEqual(["cpu"]);
    expect(c.ceilings).toMatchObject({ memoryBytes: 2n ** 31n, pids: 512, cpuMillicores: 0 });
    expect(cgroupRequestFor(c, s)).toMatchObject({ parent: "/seraph", ceilings: { memoryBytes: 2n ** 31n, pids: 512, cpuMillicores: 0 } });
  });

  test("cgroups without a usable layout, or without a job user, enforce nothing", () => {
    const noCg = create(ContainmentFacilitiesSchema, { ...rootHost, cgroupLayout: "", controllers: [] });
    expect(nodeContainment({ ...defaultContainmentSettings(), cgroups: true }, noCg).resourceEnforcement).toBe("admission_and_wall_timeout_only");
    const noUser = nodeContainment({ ...defaultContainmentSettings(), cgroups: true, jobUser: { kind: "none" } }, rootHost);
    expect(noUser.isolationClaim).toBe("none");
    expect(noUser.perJobCgroup).toBe(false);
    expect(noUser.resourceEnforcement).toBe("admission_and_wall_timeout_only");
  });

  test("one configured user for several slots is shared_job_uid and says other jobs are not protected", () => {
    const c = nodeContainment({ ...defaultContainmentSettings(2), jobUser: { kind: "user", name: "seraphjob", uid: 1500, gid: 1500 } }, rootHost);
    expect(c.isolationClaim).toBe("shared_job_uid");
    expect(c.protects.join("\n")).not.toMatch(/other jobs' staging/);
    expect(c.doesNotProtect.join("\n")).toMatch(/other jobs running at the same time/);
  });

  test("containmentDifferences finds a changed claim or ceiling; the same is empty", () => {
    const s = { ...defaultContainmentSettings(1), cgroups: true };
    const a = nodeContainment(s, rootHost);
    expect(containmentDifferences(a, nodeContainment(s, rootHost))).toEqual([]);
    expect(containmentDifferences(a, nodeContainment({ ...s, pids: 256 }, rootHost))[0]).toMatch(/^ceilings: /);
    expect(containmentDifferences(undefined, a).map((d) => d.split(":")[0])).toContain("isolation_claim");
  });
});

describe("nodeContainment: the network claim (issue 24: an approved job read the token table through PostgreSQL on loopback)", () => {
  const netHost = create(ContainmentFacilitiesSchema, { ...rootHost, networkNamespace: true });

  test("reproduced: a root node without the namespace facility claims host_network and says a loopback database is reachable", () => {
    const c = nodeContainment(defaultContainmentSettings(1), rootHost);
    expect(c.networkClaim).toBe("host_network");
    expect(c.doesNotProtect.join("\n")).toMatch(/the network: the command has the host's network access \(this host could not make a network namespace\): every port on the host's loopback, such as a database/);
    expect(c.protects.join("\n")).not.toMatch(/network/);
  });

  test("by default, where the node can enforce it (root, a job user, the probe made one): own_loopback_only, listed as protected", () => {
    const s = defaultContainmentSettings(2);
    expect(s.network).toBe("auto");
    const c = nodeContainment(s, netHost);
    expect(networkIsolationActive(s, netHost)).toBe(true);
    expect(c.networkClaim).toBe("own_loopback_only");
    expect(c.protects.join("\n")).toMatch(/the network: each step's commands run in a network namespace of their own with only its loopback \(up\); they reach no port of the host \(its database, NATS, the API\)/);
    expect(c.doesNotProtect.join("\n")).not.toMatch(/host's network access/);
    // What it does not cover is said: Unix sockets in the filesystem are outside any network namespace.
    expect(c.doesNotProtect.join("\n")).toMatch(/services on Unix sockets in the filesystem: a network namespace does not cover them/);
  });

  test("SERAPH_JOB_NETWORK=host, no job user, or not root: host_network with the reason", () => {
    const off = nodeContainment({ ...defaultContainmentSettings(1), network: "host" }, netHost);
    expect(off.networkClaim).toBe("host_network");
    expect(off.doesNotProtect.join("\n")).toMatch(/host's network access \(SERAPH_JOB_NETWORK=host\)/);
    const noUser = nodeContainment({ ...defaultContainmentSettings(1), jobUser: { kind: "none" } }, netHost);
    expect(noUser.networkClaim).toBe("host_network");
    expect(noUser.doesNotProtect.join("\n")).toMatch(/\(no job user: a command running as the executor's user could leave a namespace\)/);
    const user = nodeContainment(defaultContainmentSettings(1), create(ContainmentFacilitiesSchema, { ...userHost, networkNamespace: true }));
    expect(user.networkClaim).toBe("host_network");
  });

  test("a changed network claim is a drift; an approval from before the claim ('') reads as host_network", () => {
    const isolated = nodeContainment(defaultContainmentSettings(1), netHost);
    const host = nodeContainment({ ...defaultContainmentSettings(1), network: "host" }, netHost);
    expect(containmentDifferences(host, isolated)).toEqual(['network_claim: approved "host_network", node now "own_loopback_only"']);
    expect(containmentDifferences(isolated, host)).toEqual(['network_claim: approved "own_loopback_only", node now "host_network"']);
    expect(containmentDifferences({ ...host, networkClaim: "" }, host)).toEqual([]);
  });
});

describe("configuration", () => {
  test("SERAPH_JOB_USER forms and bad values", () => {
    const passwd = () => "root:x:0:0::/root:/bin/sh\nbuild:x:1500:1600::/home/build:/bin/sh\n";
    expect(parseJobUserSetting("auto")).toEqual({ kind: "auto" });
    expect(parseJobUserSetting("none")).toEqual({ kind: "none" });
    expect(parseJobUserSetting("1234:5678")).toEqual({ kind: "user", name: "", uid: 1234, gid: 5678 });
    expect(parseJobUserSetting("build", passwd)).toEqual({ kind: "user", name: "build", uid: 1500, gid: 1600 });
    expect(parseJobUserSetting("root", passwd)).toMatch(/unprivileged/);
    expect(parseJobUserSetting("0:5")).toMatch(/between 1/);
    expect(parseJobUserSetting("nobody-here", passwd)).toMatch(/not in \/etc\/passwd/);
  });

  test("the executor's environment: defaults, and every bad containment variable named at once", () => {
    const base = { SERAPH_EXECUTOR_DATA_DIR: "/x", NATS_URL: "nats://127.0.0.1:1", NATS_USER: "u", NATS_PASSWORD: "p", SERAPH_EXECUTOR_TOKEN: "t" };
    const s = containmentSettingsOf(loadExecutorConfig(base));
    expect(s).toMatchObject({ jobUser: { kind: "auto" }, uidBase: 64000, cgroups: false, cgroupParent: "/seraph", pids: 512, network: "auto" });
    expect(containmentSettingsOf(loadExecutorConfig({ ...base, SERAPH_JOB_NETWORK: "host" })).network).toBe("host");
    expect(() => loadExecutorConfig({ ...base, SERAPH_JOB_NETWORK: "off" })).toThrow(/SERAPH_JOB_NETWORK/);
    expect(() =>
      loadExecutorConfig({ ...base, SERAPH_JOB_USER: "0:0", SERAPH_CGROUPS: "yes", SERAPH_CGROUP_PARENT: "/a/../b", SERAPH_JOB_PIDS: "10", SERAPH_JOB_ROOT: "rel" }),
    ).toThrow(/SERAPH_JOB_USER[\s\S]*SERAPH_JOB_ROOT[\s\S]*SERAPH_CGROUPS[\s\S]*SERAPH_CGROUP_PARENT[\s\S]*SERAPH_JOB_PIDS/);
  });
});
