// `seraph-exec run`'s supervisor started ahead (run-prestart.ts) and how run gets its supervisor
// from it (run-launch.ts): handed the spec, or ended and replaced by a fresh launch when it took
// nothing; a discarded one leaves no process and no directory.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { afterAll, describe, expect, it } from "vitest";
import { Outcome, SupervisorSpecSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { createProcFs } from "../native/proc-fs.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { SupervisorLaunchError } from "../supervisor-client/launch-error.js";
import { waitExit } from "../supervisor-client/spawn.js";
import { ownWarmSupervisor } from "../supervisor-client/warm.js";
import { facilityGate, newTag, removeScenarioRunDirs, scenarioSpec } from "../../testing/supervisor-test-kit.js";
import { handOverOrLaunch } from "./run-launch.js";
import { prestartSupervisor, type Prestart } from "./run-prestart.js";

const skipReason = await facilityGate();

const alive = (pid: number): boolean => {
  const st = createProcFs("/proc").readStat(pid);
  return st !== undefined && st.state !== "Z";
};

/** Live processes whose command line names `dir` (a warm supervisor has `--warm <dir>`). */
function processesIn(dir: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, "latin1").split("\0").includes(dir) && alive(Number(name))) found.push(Number(name));
    } catch {
      // gone
    }
  }
  return found;
}

function started(p: Prestart | undefined): Prestart {
  expect(p, "the pinned runtime and the supervisor bundle are installed").toBeDefined();
  return p as Prestart;
}

/** The spec of one `echo` in the prestart's run directory (scenarioSpec's fields, its directory). */
function specIn(runDir: string, tag: string) {
  const base = scenarioSpec({ tag, commands: [{ script: `echo ${tag}` }] });
  return create(SupervisorSpecSchema, { ...base, runDir, commands: base.commands.map((c) => ({ ...c, cwd: runDir })) });
}

describe.skipIf(skipReason !== undefined)("seraph-exec run's supervisor started ahead", () => {
  afterAll(() => removeScenarioRunDirs());

  it("is warm in its 0700 run directory at once; discarded (before or after it is ready) it leaves no process and no directory", async () => {
    const p = started(prestartSupervisor());
    const { pid } = await p.ready;
    expect(alive(pid)).toBe(true);
    expect(existsSync(`${p.runDir}/${RunDirFiles.warmMarker}`)).toBe(true);
    await p.discard();
    expect(alive(pid)).toBe(false);
    expect(existsSync(p.runDir)).toBe(false);

    // Discarded while it still starts (a usage error found before it is ready).
    const early = started(prestartSupervisor());
    expect(processesIn(early.runDir)).toHaveLength(1);
    await early.discard();
    await expect(early.ready).rejects.toBeInstanceOf(SupervisorLaunchError);
    expect(processesIn(early.runDir)).toEqual([]);
    expect(existsSync(early.runDir)).toBe(false);
  });

  it("one that cannot start (the unbundled entry refuses, exit 64) rejects and leaves nothing: run then launches afresh", async () => {
    const entry = fileURLToPath(new URL("../../dist/supervisor/main.js", import.meta.url));
    const p = started(prestartSupervisor({ entry }));
    await expect(p.ready).rejects.toThrow(/exited with status 64 before it was ready/);
    expect(existsSync(p.runDir)).toBe(false);
  });

  it("is handed the spec (the same process runs it); one gone before the hand-over is replaced by a fresh launch in the same directory", async () => {
    for (const gone of [false, true]) {
      const tag = newTag();
      const p = started(prestartSupervisor());
      const { pid, exited } = await p.ready;
      const warm = ownWarmSupervisor(p.runDir, pid, exited);
      if (gone) {
        warm.signal("SIGKILL");
        expect(await waitExit(exited)).toBe(true);
      }
      const handle = await handOverOrLaunch(warm, specIn(p.runDir, tag));
      expect(handle.pid === pid, gone ? "a fresh supervisor" : "the warm one").toBe(!gone);
      const conn = await handle.connect();
      await conn.go();
      const receipt = await conn.receipt(true);
      await conn.close();
      expect(receipt?.outcome).toBe(Outcome.SUCCEEDED);
      expect(await handle.waitGone(5000)).toBe(true);
      expect(readFileSync(`${p.runDir}/cmd-0.stdout`, "utf8")).toBe(`${tag}\n`);
      await p.discard(); // removes the run directory (nothing is running there any more)
    }
  });
});
