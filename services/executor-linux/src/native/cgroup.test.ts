// Layout detection and cgroup file writes against fake filesystem roots laid out like a pure
// cgroup v2 host and like a hybrid host (the real hierarchies are exercised by
// supervisor-client/containment-scenarios.test.ts).
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, test } from "vitest";
import { JobCgroup, detectCgroupLayout, parseProcCgroup } from "./cgroup.js";
import { probeContainment } from "./containment-probe.js";
import { findTrustedSetpriv, setprivArgv } from "./setpriv.js";

const roots: string[] = [];
afterEach(() => {
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

function fakeRoot(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), "cgfake-"));
  roots.push(root);
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(join(root, rel, ".."), { recursive: true });
    writeFileSync(join(root, rel), content);
  }
  return root;
}

const pureV2 = (controllers = "cpuset cpu io memory hugetlb pids rdma misc"): Record<string, string> => ({
  "cgroup.controllers": `${controllers}\n`,
  "cgroup.subtree_control": "",
  "cgroup.procs": "",
});

describe("detectCgroupLayout", () => {
  test("a pure v2 host: every controller in the one hierarchy", () => {
    const root = fakeRoot(pureV2());
    const layout = detectCgroupLayout(root);
    expect(layout?.kind).toBe("v2");
    expect(layout?.v2Mount).toBe(root);
    expect([...(layout?.controllers.entries() ?? [])]).toEqual([
      ["cpu", { version: 2, mount: root }],
      ["memory", { version: 2, mount: root }],
      ["pids", { version: 2, mount: root }],
    ]);
    expect(layout?.notes).toEqual([]);
  });

  test("a pure v2 host without the memory controller says so and offers only the rest", () => {
    const root = fakeRoot(pureV2("cpu pids"));
    const layout = detectCgroupLayout(root);
    expect([...(layout?.controllers.keys() ?? [])]).toEqual(["cpu", "pids"]);
    expect(layout?.notes.join(" ")).toMatch(/memory controller is not in/);
  });

  test("a hybrid host: v2 at unified/, controllers from their v1 hierarchies", () => {
    const root = fakeRoot({
      "unified/cgroup.controllers": "hugetlb\n",
      "unified/cgroup.procs": "",
      "memory/cgroup.procs": "",
      "pids/cgroup.procs": "",
      "cpu,cpuacct/cgroup.procs": "",
    });
    const layout = detectCgroupLayout(root);
    expect(layout?.kind).toBe("hybrid");
    expect(layout?.v2Mount).toBe(join(root, "unified"));
    expect(layout?.controllers.get("memory")).toEqual({ version: 1, mount: join(root, "memory") });
    expect(layout?.controllers.get("pids")).toEqual({ version: 1, mount: join(root, "pids") });
    expect(layout?.controllers.get("cpu")).toEqual({ version: 1, mount: join(root, "cpu,cpuacct") });
  });

  test("v1 only (no v2 mount anywhere): no layout, per-job cgroups are unavailable", () => {
    const root = fakeRoot({ "memory/cgroup.procs": "", "pids/cgroup.procs": "" });
    expect(detectCgroupLayout(root)).toBeUndefined();
    const probe = probeContainment({ cgroupFsRoot: root, euid: 0, selfCgroup: "0::/\n", networkProbe: () => undefined });
    expect(probe.cgroupLayout).toBe("");
    expect(probe.controllers).toEqual([]);
    expect(probe.notes.join(" ")).toMatch(/No cgroup v2 hierarchy/);
  });
});

describe("parseProcCgroup", () => {
  test("splits the v2 line from the v1 ones, including combined controllers", () => {
    const parsed = parseProcCgroup("9:name=systemd:/\n4:memory:/process_api/abc\n3:cpu,cpuacct:/x\n0::/jobs/y\n");
    expect(parsed.v2).toBe("/jobs/y");
    expect(parsed.v1.get("memory")).toBe("/process_api/abc");
    expect(parsed.v1.get("cpu")).toBe("/x");
    expect(parsed.v1.get("cpuacct")).toBe("/x");
    expect(parsed.v1.get("name=systemd")).toBe("/");
  });
});

describe("JobCgroup on a fake pure v2 root", () => {
  test("enables the controllers down the parent chain, writes the ceilings, enters/leaves and reads counters", () => {
    const root = fakeRoot(pureV2());
    const layout = detectCgroupLayout(root);
    if (layout === undefined) throw new Error("no layout");
    const cg = JobCgroup.create({ layout, parent: "/seraph/jobs", name: "job-x", memoryBytes: 64 << 20, pids: 100, cpuMillicores: 1500, selfCgroup: "0::/svc\n" });
    const dir = join(root, "seraph", "jobs", "job-x");
    expect(cg.v2.dir).toBe(dir);
    expect(cg.dirs).toHaveLength(1);
    expect(cg.enforced).toEqual(["cpu", "memory", "pids"]);
    for (const at of [root, join(root, "seraph"), join(root, "seraph", "jobs")]) {
      expect(readFileSync(join(at, "cgroup.subtree_control"), "utf8")).toBe("+cpu +memory +pids");
    }
    expect(readFileSync(join(dir, "memory.max"), "utf8")).toBe(String(64 << 20));
    expect(readFileSync(join(dir, "pids.max"), "utf8")).toBe("100");
    expect(readFileSync(join(dir, "cpu.max"), "utf8")).toBe("150000 100000");
    mkdirSync(join(root, "svc"));
    cg.enter(4242);
    expect(cg.inside).toBe(true);
    expect(readFileSync(join(dir, "cgroup.procs"), "utf8")).toBe("4242");
    expect(() => cg.kill()).toThrow(/while the supervisor is inside/);
    cg.leave(4242);
    expect(cg.inside).toBe(false);
    expect(readFileSync(join(root, "svc", "cgroup.procs"), "utf8")).toBe("4242");
    writeFileSync(join(dir, "memory.events"), "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n");
    writeFileSync(join(dir, "pids.events"), "max 5\n");
    writeFileSync(join(dir, "memory.peak"), "1234\n");
    expect(cg.counters()).toEqual({ oomKills: 2, pidLimitHits: 5, memoryLimitHits: 0, memoryPeakBytes: 1234 });
    writeFileSync(join(dir, "cgroup.events"), "populated 1\nfrozen 0\n");
    expect(cg.populated()).toBe(true);
    writeFileSync(join(dir, "cgroup.events"), "populated 0\nfrozen 0\n");
    expect(cg.populated()).toBe(false);
    cg.kill();
    expect(readFileSync(join(dir, "cgroup.kill"), "utf8")).toBe("1");
  });

  test("a ceiling without its controller is refused before anything is created", () => {
    const root = fakeRoot(pureV2("cpu"));
    const layout = detectCgroupLayout(root);
    if (layout === undefined) throw new Error("no layout");
    expect(() => JobCgroup.create({ layout, parent: "/seraph", name: "job-y", memoryBytes: 64 << 20, selfCgroup: "0::/\n" })).toThrow(/no controller for memory/);
    expect(existsSync(join(root, "seraph", "job-y"))).toBe(false);
  });
});

describe("JobCgroup on a fake hybrid root", () => {
  test("a v2 cgroup for kill/events plus a v1 cgroup per controller, each returning to the supervisor's own", () => {
    const root = fakeRoot({
      "unified/cgroup.controllers": "\n",
      "memory/cgroup.procs": "",
      "pids/cgroup.procs": "",
      "cpu/cgroup.procs": "",
    });
    const layout = detectCgroupLayout(root);
    if (layout === undefined) throw new Error("no layout");
    const cg = JobCgroup.create({ layout, parent: "/seraph", name: "job-z", memoryBytes: 32 << 20, pids: 64, cpuMillicores: 250, selfCgroup: "4:memory:/sandbox/a\n1:cpu:/\n8:pids:/\n0::/\n" });
    expect(cg.dirs.map((d) => [d.version, d.dir, d.home])).toEqual([
      [2, join(root, "unified", "seraph", "job-z"), join(root, "unified")],
      [1, join(root, "cpu", "seraph", "job-z"), join(root, "cpu")],
      [1, join(root, "memory", "seraph", "job-z"), join(root, "memory", "sandbox", "a")],
      [1, join(root, "pids", "seraph", "job-z"), join(root, "pids")],
    ]);
    expect(readFileSync(join(root, "memory", "seraph", "job-z", "memory.limit_in_bytes"), "utf8")).toBe(String(32 << 20));
    expect(readFileSync(join(root, "cpu", "seraph", "job-z", "cpu.cfs_quota_us"), "utf8")).toBe("25000");
    expect(readFileSync(join(root, "cpu", "seraph", "job-z", "cpu.cfs_period_us"), "utf8")).toBe("100000");
    expect(readFileSync(join(root, "pids", "seraph", "job-z", "pids.max"), "utf8")).toBe("64");
    writeFileSync(join(root, "memory", "seraph", "job-z", "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
    writeFileSync(join(root, "memory", "seraph", "job-z", "memory.failcnt"), "17\n");
    expect(cg.counters()).toMatchObject({ oomKills: 3, memoryLimitHits: 17 });
  });
});

describe("setpriv", () => {
  test("only a root-owned, not group/other-writable setpriv is trusted", () => {
    const dir = mkdtempSync(join(tmpdir(), "setpriv-"));
    roots.push(dir);
    const fake = join(dir, "setpriv");
    writeFileSync(fake, "#!/bin/sh\n");
    chmodSync(fake, 0o777);
    const found = findTrustedSetpriv([fake]);
    expect(found.ok).toBe(false);
    expect(found.ok ? "" : found.reason).toMatch(/writable by group or others|not owned by root/);
    expect(findTrustedSetpriv([join(dir, "missing")])).toEqual({ ok: false, reason: expect.stringMatching(/does not exist/) });
  });

  test("the argv drops groups, sets gid then uid, clears capabilities and sets no_new_privs before the command", () => {
    expect(setprivArgv("/usr/bin/setpriv", 64001, 64002, ["/bin/echo", "--reuid=0"])).toEqual([
      "/usr/bin/setpriv",
      "--regid=64002",
      "--reuid=64001",
      "--clear-groups",
      "--inh-caps=-all",
      "--bounding-set=-all",
      "--no-new-privs",
      "--",
      "/bin/echo",
      "--reuid=0",
    ]);
  });
});
