// `seraph-exec run --job-user / --memory-bytes` through the compiled bin, as root (CI is root).
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { detectCgroupLayout } from "../native/cgroup.js";

const BIN = fileURLToPath(new URL("../../bin/seraph-exec.js", import.meta.url));
const isRoot = process.geteuid?.() === 0;
if (process.env["CI"] === "true" && (!isRoot || detectCgroupLayout() === undefined)) throw new Error("these tests need root and cgroup v2 in CI");

function cli(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { timeout: 60_000, cwd: "/" }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      resolve({ code: typeof code === "number" ? code : 1, stdout, stderr });
    });
  });
}
const lastJson = (out: string): Record<string, any> => JSON.parse(out.trim().split("\n").at(-1)!) as Record<string, any>;

describe("seraph-exec run usage of the containment flags", () => {
  it("refuses a privileged or malformed --job-user as a usage error", async () => {
    for (const bad of ["0:0", "auto", "x y"]) {
      const r = await cli(["run", "--json", "--job-user", bad, "--", "/bin/true"]);
      expect(r.code, bad).toBe(2);
      expect(r.stderr).toMatch(/--job-user/);
    }
  });
});

describe.skipIf(!isRoot)("seraph-exec run under a job user and a memory ceiling (root)", () => {
  it("the command runs as the job user and cannot stop its supervisor", async () => {
    const r = await cli(["run", "--json", "--job-user", "64090:64091", "--", "/bin/sh", "-c", 'id -u; id -g; kill -STOP "$PPID" || echo refused']);
    expect(r.code, r.stderr).toBe(0);
    const j = lastJson(r.stdout);
    expect(j["outcome"]).toBe("succeeded");
    expect(j["containment"]["jobUser"]).toEqual({ uid: 64090, gid: 64091, name: "" });
  });

  it("allocating past --memory-bytes is OOM-killed and reported (exit 1, memory_limit_exceeded)", async () => {
    const hog = "const a=[];for(;;){a.push(Buffer.alloc(1<<20,1))}";
    const r = await cli(["run", "--json", "--job-user", "64092:64092", "--memory-bytes", String(96 * 1024 * 1024), "--", process.execPath, "-e", hog]);
    expect(r.code, r.stderr).toBe(1);
    const j = lastJson(r.stdout);
    expect(j).toMatchObject({ outcome: "failed", reason: "memory_limit_exceeded", signal: "SIGKILL", echildObserved: true });
    expect(j["containment"]["enforced"]).toEqual(["memory"]);
    expect(j["containment"]["oomKills"]).toBeGreaterThanOrEqual(1);
    expect(j["containment"]["populatedZeroObserved"]).toBe(true);
    expect(j["commands"][0]["oomKills"]).toBeGreaterThanOrEqual(1);
  });
});
