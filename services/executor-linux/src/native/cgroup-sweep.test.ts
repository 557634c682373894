// The sweep of a lost supervisor's job cgroup: against fake roots laid out like a pure cgroup v2
// host and like a hybrid host (the kernel's part simulated: a killed member leaves cgroup.procs,
// cgroup.events turns to populated 0), and against this host's real v1 pids hierarchy with a
// shell that keeps forking (the pid-by-pid path with pidfds). The v2 cgroup.kill path on the
// real kernel is exercised by test/execution-cgroup-proof.test.ts.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, rmdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, test } from "vitest";
import { detectCgroupLayout } from "./cgroup.js";
import { cgroupProcs, jobCgroupPlaces, pidfdKiller, sweepJobCgroup } from "./cgroup-sweep.js";
import { createNativeSystem } from "./libc.js";

const roots: string[] = [];
afterEach(() => {
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

function fakeRoot(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), "cgsweep-"));
  roots.push(root);
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(join(root, rel, ".."), { recursive: true });
    writeFileSync(join(root, rel), content);
  }
  return root;
}

const JOB = "seraph/job-x-a1-f2";
const pureV2 = (job: Record<string, string>) =>
  fakeRoot({ "cgroup.controllers": "cpu memory pids\n", "cgroup.procs": "", ...Object.fromEntries(Object.entries(job).map(([k, v]) => [`${JOB}/${k}`, v])) });

/** The kernel's side for a fake directory: a killed pid leaves cgroup.procs; an empty one is `populated 0`. */
function fakeKernel(dir: string): (pid: number) => boolean {
  return (pid) => {
    const left = cgroupProcs(dir).filter((p) => p !== pid);
    writeFileSync(join(dir, "cgroup.procs"), left.map((p) => `${p}\n`).join(""));
    if (existsSync(join(dir, "cgroup.events"))) writeFileSync(join(dir, "cgroup.events"), `populated ${left.length > 0 ? 1 : 0}\nfrozen 0\n`);
    return true;
  };
}

describe("jobCgroupPlaces", () => {
  test("pure v2: one directory; hybrid: the v2 one and one per v1 controller hierarchy; an invisible parent: none", () => {
    const v2 = pureV2({ "cgroup.events": "populated 0\n" });
    expect(jobCgroupPlaces(detectCgroupLayout(v2)!, "/seraph", "job-x-a1-f2")).toEqual([{ version: 2, dir: join(v2, JOB) }]);
    const hybrid = fakeRoot({ "unified/cgroup.controllers": "", "unified/seraph/.keep": "", "memory/cgroup.procs": "", "pids/cgroup.procs": "", "cpu,cpuacct/cgroup.procs": "" });
    expect(jobCgroupPlaces(detectCgroupLayout(hybrid)!, "/seraph", "job-x-a1-f2")).toEqual([
      { version: 2, dir: join(hybrid, "unified", JOB) },
      { version: 1, dir: join(hybrid, "cpu,cpuacct", JOB) },
      { version: 1, dir: join(hybrid, "memory", JOB) },
      { version: 1, dir: join(hybrid, "pids", JOB) },
    ]);
    expect(jobCgroupPlaces(detectCgroupLayout(v2)!, "/elsewhere", "job-x-a1-f2")).toBeUndefined();
  });
});

describe("sweepJobCgroup on a fake pure v2 root", () => {
  test("cgroup.kill is written and the sweep waits for populated 0", async () => {
    const root = pureV2({ "cgroup.events": "populated 1\nfrozen 0\n", "cgroup.kill": "", "cgroup.procs": "41\n42\n" });
    const dir = join(root, JOB);
    // The kernel empties the cgroup a little after cgroup.kill.
    const timer = setInterval(() => {
      if (readFileSync(join(dir, "cgroup.kill"), "utf8") === "1") writeFileSync(join(dir, "cgroup.events"), "populated 0\nfrozen 0\n");
    }, 20);
    try {
      const s = await sweepJobCgroup([{ version: 2, dir }], { killMember: () => expect.fail("no pid-by-pid kill with cgroup.kill"), deadlineMs: Date.now() + 2000 });
      expect(s).toMatchObject({ empty: true, problem: "" });
      // A fake directory holds regular files, so rmdir fails here (the kernel's cgroup dirs do not).
      expect(s.dirs).toEqual([{ version: 2, dir, method: "cgroup.kill", empty: true, removed: false, signalled: 0 }]);
      expect(s.rounds).toBeGreaterThan(1);
    } finally {
      clearInterval(timer);
    }
  });

  test("without cgroup.kill (a kernel before 5.14) it freezes the cgroup and kills pid by pid until populated 0", async () => {
    const root = pureV2({ "cgroup.events": "populated 1\n", "cgroup.freeze": "0", "cgroup.procs": "51\n52\n53\n" });
    const dir = join(root, JOB);
    const kernel = fakeKernel(dir);
    const killed: number[] = [];
    const s = await sweepJobCgroup([{ version: 2, dir }], { killMember: (pid, d) => (expect(d).toBe(dir), killed.push(pid), kernel(pid)), deadlineMs: Date.now() + 2000 });
    expect(readFileSync(join(dir, "cgroup.freeze"), "utf8")).toBe("1");
    expect(killed).toEqual([51, 52, 53]);
    expect(s).toMatchObject({ empty: true, problem: "", dirs: [{ method: "procs", empty: true, signalled: 3 }] });
  });

  test("a cgroup that stays populated past the budget proves nothing, and says which", async () => {
    const root = pureV2({ "cgroup.events": "populated 1\n", "cgroup.kill": "", "cgroup.procs": "61\n" });
    const dir = join(root, JOB);
    const s = await sweepJobCgroup([{ version: 2, dir }], { killMember: () => false, deadlineMs: Date.now() + 100 });
    expect(s.empty).toBe(false);
    expect(s.problem).toBe(`cgroup_populated: ${dir} still held processes when the cleanup budget ran out`);
    expect(s.dirs[0]).toMatchObject({ empty: false, removed: false });
  });

  test("an unreadable cgroup.events proves nothing", async () => {
    const root = pureV2({ "cgroup.events": "garbage\n", "cgroup.kill": "" });
    const s = await sweepJobCgroup([{ version: 2, dir: join(root, JOB) }], { killMember: () => false, deadlineMs: Date.now() + 100 });
    expect(s.empty).toBe(false);
    expect(s.problem).toMatch(/^cgroup_unreadable: .*cgroup\.events has no populated line/);
  });

  test("a directory that is gone is empty (a cgroup is removed only once empty and can never be entered again); only v1 places prove nothing", async () => {
    const root = pureV2({});
    const gone = join(root, "seraph", "job-y-a1-f1");
    const s = await sweepJobCgroup([{ version: 2, dir: gone }], { killMember: () => false, deadlineMs: Date.now() + 100 });
    expect(s).toMatchObject({ empty: true, dirs: [{ method: "absent", empty: true, removed: true }] });
    const v1only = await sweepJobCgroup([{ version: 1, dir: gone }], { killMember: () => false, deadlineMs: Date.now() + 100 });
    expect(v1only).toMatchObject({ empty: false, problem: "cgroup_v2_missing: no v2 directory was swept" });
  });
});

describe("pidfdKiller", () => {
  test("never signals a pid that is not listed in the directory", () => {
    const root = pureV2({ "cgroup.procs": "" });
    const sleeper = spawn("/bin/sleep", ["30"], { stdio: "ignore" });
    try {
      expect(pidfdKiller(createNativeSystem())(sleeper.pid!, join(root, JOB))).toBe(false);
      expect(sleeper.exitCode).toBeNull();
      expect(sleeper.signalCode).toBeNull();
    } finally {
      sleeper.kill("SIGKILL");
    }
  });
});

const isRoot = process.geteuid?.() === 0;
const pidsV1 = detectCgroupLayout()?.controllers.get("pids");
if (process.env["CI"] === "true" && isRoot && pidsV1 === undefined) throw new Error("this host has no pids controller");

describe.skipIf(!isRoot || pidsV1?.version !== 1)("sweepJobCgroup on this host's real v1 pids hierarchy", () => {
  test("a shell that keeps forking inside a v1 cgroup is killed pid by pid through pidfds until cgroup.procs is empty, and the directory is removed", async () => {
    const dir = join(pidsV1!.mount, "seraph-sweep-test", `job-${process.pid}`);
    mkdirSync(dir, { recursive: true });
    const shell = spawn("/bin/sh", ["-c", "while :; do /bin/sleep 100 & /bin/sleep 0.02; done"], { stdio: "ignore" });
    try {
      writeFileSync(join(dir, "cgroup.procs"), String(shell.pid));
      for (let i = 0; i < 100 && cgroupProcs(dir).length < 4; i++) await new Promise((r) => setTimeout(r, 20));
      const members = cgroupProcs(dir);
      expect(members.length).toBeGreaterThanOrEqual(4);
      const exited = new Promise<NodeJS.Signals | null>((r) => shell.once("exit", (_c, sig) => r(sig)));
      const s = await sweepJobCgroup([{ version: 1, dir }], { killMember: pidfdKiller(createNativeSystem()), deadlineMs: Date.now() + 5000 });
      // Only v1 directories: the sweep emptied them, but a proof needs the v2 one too.
      expect(s.problem).toBe("cgroup_v2_missing: no v2 directory was swept");
      expect(s.dirs[0]).toMatchObject({ method: "procs", empty: true, removed: true });
      expect(s.dirs[0]!.signalled).toBeGreaterThanOrEqual(members.length);
      expect(await exited).toBe("SIGKILL");
      for (const pid of members) expect(existsSync(`/proc/${pid}`) && !readFileSync(`/proc/${pid}/stat`, "utf8").includes(") Z")).toBe(false);
    } finally {
      if (shell.exitCode === null && shell.signalCode === null) shell.kill("SIGKILL");
      for (const pid of cgroupProcs(dir)) process.kill(pid, "SIGKILL");
      await new Promise((r) => setTimeout(r, 50));
      for (const d of [dir, join(dir, "..")]) {
        try {
          rmdirSync(d);
        } catch {
          // removed by the sweep, or still busy (reported by the assertions above)
        }
      }
    }
  });
});
