// The executor's cgroup proof for a lost supervisor, against a fake cgroup root laid out like a
// pure cgroup v2 host (this host is hybrid; its real hierarchies are exercised by
// test/execution-cgroup-proof.test.ts) and real processes for the recorded pids: what it refuses
// (and never sweeps) and what it proves.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { sha256Hex } from "@seraph/kit";
import { OwnerMarkerSchema, SupervisorSpecSchema, type OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterEach, describe, expect, test } from "vitest";
import { createProcFs } from "../native/proc-fs.js";
import { proveCgroupCleanup, type CgroupProofDeps } from "./cgroup-proof.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const temp = (prefix: string) => {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
};

const proc = createProcFs();
const bootId = proc.readBootId();
const startOf = (pid: number) => String(proc.readStat(pid)!.startTimeTicks);
const NAME = "job-j1-a1-f3";

/** A pid that was just used and is gone (a reaped child). */
async function deadPid(): Promise<number> {
  const c = spawn("/bin/true");
  await new Promise((r) => c.once("exit", r));
  return c.pid!;
}

/** A run directory with the spec (with or without a cgroup), a marker for `supervisorPid` and a supervisor log naming `commands`. */
function fixture(o: { supervisorPid: number; supervisorStart: string; cgroup?: boolean; commands?: { pid: number; start: string }[]; boot?: string }) {
  const runDir = temp("cgproof-run-");
  const spec = create(SupervisorSpecSchema, { jobId: "j1", attempt: 1, fence: 3n, runDir, ...(o.cgroup === false ? {} : { cgroup: { parent: "/seraph" } }) });
  const bytes = toBinary(SupervisorSpecSchema, spec);
  writeFileSync(join(runDir, "spec.binpb"), bytes);
  const log = (o.commands ?? []).map((c) => JSON.stringify({ level: 30, event: "spawned", command: 0, childPid: c.pid, childStartTimeTicks: c.start })).join("\n");
  writeFileSync(join(runDir, "supervisor.log"), `${log}\n{"level":30,"event":"spawned","childPid":`);
  const marker = create(OwnerMarkerSchema, {
    supervisor: { pid: o.supervisorPid, startTimeTicks: BigInt(o.supervisorStart), bootId: o.boot ?? bootId },
    jobId: "j1",
    attempt: 1,
    fence: 3n,
    runDir,
    specSha256: sha256Hex(bytes),
    writtenUnixMs: 1n,
  });
  return { runDir, marker };
}

/** A fake pure v2 root with the job's cgroup, `populated` as given. */
function v2Root(populated: 0 | 1): string {
  const root = temp("cgproof-fs-");
  mkdirSync(join(root, "seraph", NAME), { recursive: true });
  writeFileSync(join(root, "cgroup.controllers"), "cpu memory pids\n");
  writeFileSync(join(root, "seraph", NAME, "cgroup.events"), `populated ${populated}\nfrozen 0\n`);
  writeFileSync(join(root, "seraph", NAME, "cgroup.kill"), "");
  writeFileSync(join(root, "seraph", NAME, "cgroup.procs"), "");
  return root;
}

const noSignals = { pidfdOpen: () => expect.fail("nothing is signalled pid by pid here"), pidfdSendSignal: () => ({ ok: false }), close: () => undefined };
const deps = (cgroupFsRoot: string, over: Partial<CgroupProofDeps> = {}): CgroupProofDeps => ({
  identity: { nodeId: "node-a", bootId, incarnationId: "i-1" },
  proc,
  cgroupFsRoot,
  native: noSignals,
  budgetMs: 200,
  ...over,
});

describe("proveCgroupCleanup", () => {
  test("refuses, without touching any cgroup, when the spec is not the marker's, has no cgroup, is from another boot, or the supervisor still runs", async () => {
    const root = v2Root(1);
    const gone = await deadPid();
    const noCg = fixture({ supervisorPid: gone, supervisorStart: "1", cgroup: false });
    expect(await proveCgroupCleanup(deps(root), noCg.marker)).toMatchObject({ code: "no_cgroup" });
    const other = fixture({ supervisorPid: gone, supervisorStart: "1" });
    const tampered: OwnerMarker = { ...other.marker, specSha256: "f".repeat(64) };
    expect(await proveCgroupCleanup(deps(root), tampered)).toMatchObject({ code: "spec_unreadable", message: expect.stringMatching(/not the recorded f{64}/) });
    expect(await proveCgroupCleanup(deps(root), fixture({ supervisorPid: gone, supervisorStart: "1", boot: "other" }).marker)).toMatchObject({ code: "other_boot" });
    const alive = fixture({ supervisorPid: process.pid, supervisorStart: startOf(process.pid) });
    expect(await proveCgroupCleanup(deps(root), alive.marker)).toMatchObject({ code: "supervisor_alive" });
    expect(await proveCgroupCleanup(deps(temp("cgproof-empty-")), other.marker)).toMatchObject({ code: "cgroup_not_visible" });
    // None of the refusals wrote cgroup.kill.
    expect(readFileSync(join(root, "seraph", NAME, "cgroup.kill"), "utf8")).toBe("");
  });

  test("a cgroup that stays populated proves nothing", async () => {
    const root = v2Root(1);
    const f = fixture({ supervisorPid: await deadPid(), supervisorStart: "1" });
    const r = await proveCgroupCleanup(deps(root), f.marker);
    expect(r).toMatchObject({ code: "cgroup_populated", message: expect.stringMatching(/still held processes/) });
    expect(readFileSync(join(root, "seraph", NAME, "cgroup.kill"), "utf8")).toBe("1");
  });

  test("a recorded command pid that still runs with its recorded start time proves nothing; one reused by another process counts as gone", async () => {
    const root = v2Root(0);
    const sleeper = spawn("/bin/sleep", ["30"], { stdio: "ignore" });
    try {
      await new Promise((r) => setTimeout(r, 50));
      const supervisorPid = await deadPid();
      const running = fixture({ supervisorPid, supervisorStart: "1", commands: [{ pid: sleeper.pid!, start: startOf(sleeper.pid!) }] });
      expect(await proveCgroupCleanup(deps(root), running.marker)).toMatchObject({ code: "pid_alive", message: `recorded command pid ${sleeper.pid} (start ${startOf(sleeper.pid!)}) still runs` });
      const unknownStart = fixture({ supervisorPid, supervisorStart: "1", commands: [{ pid: sleeper.pid!, start: "" }] });
      expect(await proveCgroupCleanup(deps(root), unknownStart.marker)).toMatchObject({ code: "pid_alive" });
      const reused = fixture({ supervisorPid, supervisorStart: "1", commands: [{ pid: sleeper.pid!, start: "5" }] });
      const proof = await proveCgroupCleanup(deps(root, { now: () => 1234 }), reused.marker);
      expect(proof).toMatchObject({
        jobId: "j1",
        attempt: 1,
        fence: "3",
        nodeId: "node-a",
        bootId,
        cgroupParent: "/seraph",
        cgroupName: NAME,
        layout: "v2",
        cgroups: [{ version: 2, dir: join(root, "seraph", NAME), method: "cgroup.kill", empty: true }],
        pids: [
          { role: "supervisor", pid: supervisorPid, startTimeTicks: "1", gone: "absent" },
          { role: "command", pid: sleeper.pid, startTimeTicks: "5", gone: "reused" },
        ],
        observedUnixMs: 1234,
      });
    } finally {
      sleeper.kill("SIGKILL");
    }
  });
});
