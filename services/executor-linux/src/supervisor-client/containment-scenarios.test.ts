// Real processes as root: commands under a job user (uid switch, no groups, no_new_privs) that
// attack their supervisor, and per-job cgroups (cgroup.kill, the populated-0 oracle, enforced
// memory and pids ceilings). CI runs as root; without root these tests fail there, never skip.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, describe, expect, test } from "vitest";
import { CgroupRequestSchema, JobUserSchema, Outcome, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { detectCgroupLayout } from "../native/cgroup.js";
import { readFacilityReport } from "./facility.js";
import { launchSupervisor } from "./launch.js";
import { runToReceipt } from "./run-to-receipt.js";
import { facilityGate, newTag, processesTagged, removeScenarioRunDirs, scenarioSpec, waitFor } from "../../testing/supervisor-test-kit.js";

const skipReason = await facilityGate();
const isRoot = process.geteuid?.() === 0;
if (!isRoot && process.env["CI"] === "true") throw new Error("the containment tests need root in CI (job users and cgroups)");
const layout = detectCgroupLayout();
if (layout === undefined && process.env["CI"] === "true") throw new Error("the containment tests need cgroup v2 (pure or a hybrid unified mount) in CI");
const skip = skipReason !== undefined || !isRoot || layout === undefined;

/** A uid/gid from a range nothing else on the host uses; one per test so tests do not share. */
let nextUid = 64_100 + Math.floor(Math.random() * 500);
function jobUser(): { uid: number; gid: number } {
  const uid = nextUid++;
  return { uid, gid: uid };
}

function withJobUser(spec: SupervisorSpec, u = jobUser()): SupervisorSpec {
  spec.jobUser = create(JobUserSchema, { uid: u.uid, gid: u.gid, name: "" });
  return spec;
}

function withCgroup(spec: SupervisorSpec, ceilings: { memoryBytes?: bigint; pids?: number; cpuMillicores?: number } = {}): SupervisorSpec {
  spec.cgroup = create(CgroupRequestSchema, { parent: "/seraph-test", ceilings });
  return spec;
}

const text = (b: Uint8Array | undefined): string => Buffer.from(b ?? new Uint8Array()).toString("utf8");

async function runAndRead(spec: SupervisorSpec): Promise<{ receipt: Awaited<ReturnType<typeof runToReceipt>>; stdout: string; stderr: string }> {
  const chunks = { stdout: [] as Uint8Array[], stderr: [] as Uint8Array[] };
  const receipt = await runToReceipt(spec, { onOutput: (c) => chunks[c.stream].push(c.data) });
  return { receipt, stdout: text(Buffer.concat(chunks.stdout)), stderr: text(Buffer.concat(chunks.stderr)) };
}

describe.skipIf(skip)("containment: job user", () => {
  afterAll(() => removeScenarioRunDirs());

  test.concurrent("the command runs with the job uid/gid, no supplementary groups, NoNewPrivs 1, no capabilities", async () => {
    const tag = newTag();
    const u = jobUser();
    const spec = withJobUser(scenarioSpec({ tag, commands: [{ script: 'id -u; id -g; grep -E "^(Groups|NoNewPrivs|CapEff|CapPrm|CapBnd):" /proc/self/status' }] }), u);
    const { receipt, stdout } = await runAndRead(spec);
    expect(receipt.outcome, receipt.message).toBe(Outcome.SUCCEEDED);
    const lines = stdout.trim().split("\n");
    expect(lines[0]).toBe(String(u.uid));
    expect(lines[1]).toBe(String(u.gid));
    expect(stdout).toMatch(/^Groups:\s*$/m);
    expect(lines).toContain("NoNewPrivs:\t1");
    expect(lines).toContain("CapEff:\t0000000000000000");
    expect(lines).toContain("CapPrm:\t0000000000000000");
    expect(lines).toContain("CapBnd:\t0000000000000000");
    expect(receipt.containment?.jobUser?.uid).toBe(u.uid);
    expect(processesTagged(tag)).toEqual([]);
  });

  test.concurrent("the command cannot stop, kill or ptrace-read its supervisor, read its token, open its journals through /proc, or connect to its socket", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: "" }] });
    const run = spec.runDir;
    // $PPID is the supervisor (setpriv execs the command in place, so the supervisor is the parent).
    const script = [
      'kill -STOP "$PPID" 2>/dev/null; echo "stop=$?"',
      'kill -TERM "$PPID" 2>/dev/null; echo "term=$?"',
      'kill -KILL "$PPID" 2>/dev/null; echo "kill=$?"',
      'cat "/proc/$PPID/mem" >/dev/null 2>&1; echo "mem=$?"',
      `cat ${run}/token >/dev/null 2>&1; echo "token=$?"`,
      'ls /proc/$PPID/fd >/dev/null 2>&1; echo "fdlist=$?"',
      'for n in 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do if echo forged 2>/dev/null >>"/proc/$PPID/fd/$n"; then echo "opened=$n"; fi; done',
      'cat "/proc/$PPID/environ" >/dev/null 2>&1; echo "environ=$?"',
      `${process.execPath} -e 'const s=require("net").connect(process.argv[1]);s.on("connect",()=>{console.log("connect=0");process.exit(0)});s.on("error",e=>{console.log("connect="+e.code);process.exit(0)})' ${run}/ctl.sock`,
      "echo done",
    ].join("\n");
    spec.commands[0]!.argv = ["/bin/sh", "-c", script, tag];
    withJobUser(spec);
    const { receipt, stdout } = await runAndRead(spec);
    expect(receipt.outcome, `${receipt.message}\n${stdout}`).toBe(Outcome.SUCCEEDED);
    expect(stdout).toContain("stop=1");
    expect(stdout).toContain("term=1");
    expect(stdout).toContain("kill=1");
    expect(stdout).toContain("mem=1");
    expect(stdout).toContain("token=1");
    expect(stdout).toContain("fdlist=2");
    expect(stdout).not.toContain("opened=");
    expect(stdout).toContain("environ=1");
    expect(stdout).toContain("connect=EACCES");
    expect(stdout).toContain("done");
    // The journals hold what the command wrote, nothing forged through /proc.
    expect(readFileSync(join(run, "cmd-0.stdout"), "utf8")).not.toContain("forged");
    expect(processesTagged(tag)).toEqual([]);
  });
});

describe.skipIf(skip)("containment: per-job cgroup", () => {
  afterAll(() => {
    removeScenarioRunDirs();
    // The test parent, in every hierarchy (empty by now: each job removed its own cgroup).
    for (const mount of new Set([layout!.v2Mount, ...[...layout!.controllers.values()].map((p) => p.mount)])) {
      try {
        rmdirSync(join(mount, "seraph-test"));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      }
    }
  });

  test("the facility probe reports this host's layout and enforceable ceilings", async () => {
    const report = await readFacilityReport();
    const c = report.containment;
    expect(c?.root).toBe(true);
    expect(c?.setprivPath).toMatch(/^\/(usr\/)?bin\/setpriv$/);
    expect(c?.cgroupLayout).toBe(layout?.kind);
    expect(c?.cgroupV2Mount).toBe(layout?.v2Mount);
    // Exactly the controllers the layout offers (the probe proved it can write their ceilings).
    expect([...(c?.controllers ?? [])].sort()).toEqual([...(layout?.controllers.keys() ?? [])].sort());
  });

  test.concurrent("the command is born in the job's cgroup; the supervisor is not in it; the cgroup is removed afterwards", async () => {
    const tag = newTag();
    const spec = withCgroup(withJobUser(scenarioSpec({ tag, commands: [{ script: 'cat /proc/self/cgroup; sleep 0.3; echo "sup:"; cat /proc/$PPID/cgroup' }] })), { pids: 128 });
    // The supervisor enters the cgroup only around the spawn (so the child is born inside) and
    // leaves right after it returns; the pause keeps a loaded host from reading it mid-leave.
    const { receipt, stdout } = await runAndRead(spec);
    expect(receipt.outcome, receipt.message).toBe(Outcome.SUCCEEDED);
    const [mine, sup] = stdout.split("sup:\n") as [string, string];
    const name = `job-test-${tag}-a1-f7`;
    expect(mine).toMatch(new RegExp(`^0::/seraph-test/${name}$`, "m"));
    expect(sup).not.toContain(name);
    const cg = receipt.containment;
    expect(cg?.cgroupPath).toBe(join(layout!.v2Mount, "seraph-test", name));
    expect(cg?.enforced).toEqual(["pids"]);
    expect(cg?.populatedZeroObserved).toBe(true);
    expect(cg?.cgroupsRemoved).toBe(true);
    expect(existsSync(cg!.cgroupPath)).toBe(false);
  });

  test.concurrent("cleanup writes cgroup.kill; ECHILD and populated 0 are both observed", async () => {
    const tag = newTag();
    const spec = withCgroup(
      withJobUser(scenarioSpec({ tag, graceMs: 0, reserveMs: 2000, commands: [{ script: "for i in 1 2 3 4 5; do setsid sleep 60 & done; sleep 0.2; exit 0" }] })),
    );
    const { receipt } = await runAndRead(spec);
    expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
    expect(receipt.echildObserved).toBe(true);
    expect(receipt.containment?.cgroupKillUsed).toBe(true);
    expect(receipt.containment?.populatedZeroObserved).toBe(true);
    expect(processesTagged(tag)).toEqual([]);
  });

  test.concurrent("a process moved into the job's cgroup from outside the tree keeps populated 1 after ECHILD: unknown, and it is killed", async () => {
    const tag = newTag();
    const spec = withCgroup(scenarioSpec({ tag, commands: [{ script: "echo ready; sleep 1" }] }));
    const outsider = spawn("/bin/sleep", ["60"], { stdio: "ignore", env: { SERAPH_SCENARIO: tag } });
    const gone = new Promise<number | null>((r) => outsider.once("exit", (_code, signal) => r(signal === "SIGKILL" ? 9 : 0)));
    const handle = await launchSupervisor(spec);
    const conn = await handle.connect();
    await conn.go();
    const dir = join(layout!.v2Mount, "seraph-test", `job-test-${tag}-a1-f7`);
    expect(await waitFor(() => existsSync(join(dir, "cgroup.procs")), 5000)).toBe(true);
    writeFileSync(join(dir, "cgroup.procs"), String(outsider.pid));
    const receipt = await conn.receipt(true);
    await conn.close();
    expect(receipt?.echildObserved).toBe(true);
    expect(receipt?.outcome).toBe(Outcome.UNKNOWN);
    expect(receipt?.reason).toBe("cgroup_populated_after_echild");
    expect(receipt?.containment?.cgroupKillUsed).toBe(true);
    expect(await gone).toBe(9);
    expect(await handle.waitGone(5000)).toBe(true);
  });

  test.concurrent("a command that allocates past its memory ceiling is OOM-killed and reported", async () => {
    const tag = newTag();
    expect(layout?.controllers.has("memory"), "a memory controller (v2 or v1)").toBe(true);
    const hog = "const a=[];for(;;){a.push(Buffer.alloc(1<<20,1))}";
    const spec = withCgroup(withJobUser(scenarioSpec({ tag, commands: [{ argv: [process.execPath, "-e", hog, tag] }] })), { memoryBytes: 96n * 1024n * 1024n });
    const { receipt } = await runAndRead(spec);
    expect(receipt.outcome).toBe(Outcome.FAILED);
    expect(receipt.reason).toBe("memory_limit_exceeded");
    expect(receipt.commands[0]?.signal).toBe("SIGKILL");
    expect(receipt.commands[0]?.oomKills).toBeGreaterThanOrEqual(1);
    expect(receipt.containment?.oomKills).toBeGreaterThanOrEqual(1);
    expect(receipt.containment?.enforced).toEqual(["memory"]);
    expect(receipt.containment?.memoryPeakBytes).toBeGreaterThan(0n);
    expect(receipt.echildObserved).toBe(true);
  });

  test.concurrent("forks past the pids ceiling are refused and reported", async () => {
    const tag = newTag();
    const spec = withCgroup(
      withJobUser(scenarioSpec({ tag, commands: [{ script: "i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done 2>/dev/null; exit 0" }] })),
      { pids: 64 },
    );
    expect(layout?.controllers.has("pids"), "a pids controller (v2 or v1)").toBe(true);
    const { receipt } = await runAndRead(spec);
    expect(receipt.containment?.pidLimitHits).toBeGreaterThanOrEqual(1);
    expect(receipt.commands[0]?.pidLimitHits).toBeGreaterThanOrEqual(1);
    expect(receipt.echildObserved).toBe(true);
    expect(processesTagged(tag)).toEqual([]);
  });

  test.concurrent("the cpu ceiling is written as a quota over a 100 ms period", async () => {
    const tag = newTag();
    const spec = withCgroup(scenarioSpec({ tag, commands: [{ script: "cat /proc/self/cgroup" }] }), { cpuMillicores: 500 });
    const handle = await launchSupervisor(spec);
    expect(layout?.controllers.has("cpu"), "a cpu controller (v2 or v1)").toBe(true);
    const place = layout!.controllers.get("cpu")!;
    const dir = join(place.mount, "seraph-test", `job-test-${tag}-a1-f7`);
    const quota = place.version === 2 ? readFileSync(join(dir, "cpu.max"), "utf8").trim() : readFileSync(join(dir, "cpu.cfs_quota_us"), "utf8").trim();
    expect(quota).toBe(place.version === 2 ? "50000 100000" : "50000");
    const conn = await handle.connect();
    await conn.go();
    const receipt = await conn.receipt(true);
    await conn.close();
    expect(receipt?.containment?.enforced).toEqual(["cpu"]);
    expect(existsSync(dir)).toBe(false);
  });
});
