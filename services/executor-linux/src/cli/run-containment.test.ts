// `seraph-exec run --job-user / --memory-bytes` through the compiled bin, as root (CI is root).
import { execFile } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { createServer } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { detectCgroupLayout } from "../native/cgroup.js";

const BIN = fileURLToPath(new URL("../../bin/seraph-exec.js", import.meta.url));
const isRoot = process.geteuid?.() === 0;
if (process.env["CI"] === "true" && (!isRoot || detectCgroupLayout() === undefined)) throw new Error("these tests need root and cgroup v2 in CI");

function cli(args: readonly string[], o: { cwd?: string; env?: Record<string, string> } = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { timeout: 60_000, cwd: o.cwd ?? "/", env: { ...process.env, ...o.env } }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      resolve({ code: typeof code === "number" ? code : 1, stdout, stderr });
    });
  });
}
const lastJson = (out: string): Record<string, any> => JSON.parse(out.trim().split("\n").at(-1)!) as Record<string, any>;

describe("seraph-exec run usage of the containment flags", () => {
  it("refuses a privileged or malformed --job-user as a usage error", async () => {
    for (const bad of ["0:0", "x y", ""]) {
      const r = await cli(["run", "--json", "--job-user", bad, "--", "/bin/true"]);
      expect(r.code, bad).toBe(2);
      expect(r.stderr).toMatch(/--job-user/);
    }
  });
});

describe("seraph-exec run --no-network", () => {
  it("without a job user it is a usage error: a command running as root could leave its namespace", async () => {
    const r = await cli(["run", "--json", "--no-network", "--job-user", "none", "--", "/bin/true"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--no-network needs a job user");
  });

  it.skipIf(!isRoot)("as root: the command reaches no port of the host, its own loopback works, and the receipt names its namespace", async () => {
    // The probe destroys its socket once connected: a reset on this side is expected, not an error.
    const server = createServer((c) => c.on("error", () => undefined).end("service"));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    const probe = `const net=require("net");const c=net.connect(${port},"127.0.0.1");c.on("connect",()=>{console.log("host=connected");c.destroy();own()});c.on("error",e=>{console.log("host="+e.code);own()});
function own(){const s=net.createServer(k=>k.end("pong")).listen(0,"127.0.0.1",()=>{net.connect(s.address().port,"127.0.0.1").on("data",d=>{console.log("own="+d);s.close()})})}`;
    try {
      const open = await cli(["run", "--job-user", "64093:64093", "--", process.execPath, "-e", probe]);
      expect(open.stdout).toContain("host=connected");
      const r = await cli(["run", "--no-network", "--job-user", "64093:64093", "--", process.execPath, "-e", probe]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain("host=ECONNREFUSED");
      expect(r.stdout).toContain("own=pong");
      expect(r.stderr).toMatch(/; without the network \(own namespace net:\[\d+\], only lo\)/);
      const j = lastJson((await cli(["run", "--json", "--no-network", "--job-user", "64093:64093", "--", "/bin/true"])).stdout);
      expect(j["containment"]).toMatchObject({ networkIsolated: true, networkInterfaces: ["lo"] });
      expect(j["containment"]["networkNamespace"]).toMatch(/^net:\[\d+\]$/);
    } finally {
      await new Promise((r) => server.close(r));
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

// Issue 10: as root the default is a job user (uid = gid = SERAPH_JOB_UID_BASE + 64), so a
// command can no longer signal, stop or ptrace its supervisor; --job-user none opts out.
describe.skipIf(!isRoot)("seraph-exec run as root: a job user by default", () => {
  // A private TMPDIR (0700, root-owned, as mkdtemp makes it): run dirs are created inside it.
  const scratch = mkdtempSync(join(tmpdir(), "sxj-"));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));
  // SERAPH_JOB_UID_BASE empty: the default base (64000), whatever the caller exports.
  const env = { TMPDIR: scratch, SERAPH_JOB_UID_BASE: "" };
  const runDirs = (): string[] => readdirSync(scratch).filter((n) => n.startsWith("seraph-exec-"));

  it("without --job-user the command runs as uid = gid = 64064 (SERAPH_JOB_UID_BASE 64000 + 64) with no groups; SERAPH_JOB_UID_BASE moves it", async () => {
    const check = 'test "$(id -u):$(id -g):$(id -G)" = "$EXPECT:$EXPECT:$EXPECT"';
    const r = await cli(["run", "--json", "--", "/bin/sh", "-c", check], { env: { ...env, EXPECT: "64064" } });
    expect(r.code, r.stderr).toBe(0);
    expect(lastJson(r.stdout)["containment"]["jobUser"]).toEqual({ uid: 64064, gid: 64064, name: "" });
    const moved = await cli(["run", "--json", "--", "/bin/sh", "-c", check], { env: { ...env, EXPECT: "70064", SERAPH_JOB_UID_BASE: "70000" } });
    expect(moved.code, moved.stderr).toBe(0);
    expect(lastJson(moved.stdout)["containment"]["jobUser"]).toEqual({ uid: 70064, gid: 70064, name: "" });
    const bad = await cli(["run", "--json", "--", "/bin/true"], { env: { ...env, SERAPH_JOB_UID_BASE: "12" } });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("SERAPH_JOB_UID_BASE must be an integer between 1000 and");
  });

  it("a working directory the job user cannot enter (a 0700 mkdtemp dir) is refused before anything starts: exit 126, one JSON object naming the path and --job-user none", async () => {
    const dir = mkdtempSync(join(scratch, "private-"));
    const before = runDirs();
    const r = await cli(["run", "--json", "--", "/bin/true"], { cwd: dir, env });
    expect(r.code, r.stderr).toBe(126);
    const j = lastJson(r.stdout);
    expect(j).toMatchObject({ outcome: "failed", reason: "job_user_cannot_enter_cwd", echildObserved: false, commands: [{ started: false }] });
    // The first component it cannot search is the private TMPDIR itself.
    expect(j["message"]).toContain(`no search permission on ${scratch} (mode 0700, owner 0:0)`);
    expect(j["message"]).toContain("--job-user none");
    expect(runDirs()).toEqual(before);
    // The opt-out runs it as root, as before.
    const asRoot = await cli(["run", "--json", "--job-user", "none", "--", "/bin/sh", "-c", 'test "$(id -u)" = 0'], { cwd: dir, env });
    expect(asRoot.code, asRoot.stderr).toBe(0);
    expect(lastJson(asRoot.stdout)["containment"]).toBeNull();
  });

  it("a command the job user cannot execute is refused (exit 126, job_user_cannot_execute); a cwd it can enter but not write runs, with a note", async () => {
    const open = join(scratch, "open");
    mkdirSync(join(open, "bin"), { recursive: true });
    chmodSync(scratch, 0o711);
    try {
      chmodSync(open, 0o755);
      chmodSync(join(open, "bin"), 0o700);
      writeFileSync(join(open, "bin", "tool"), "#!/bin/sh\nexit 0\n", { mode: 0o755 });
      const r = await cli(["run", "--json", "--", join(open, "bin", "tool")], { cwd: open, env });
      expect(r.code, r.stderr).toBe(126);
      expect(lastJson(r.stdout)).toMatchObject({ reason: "job_user_cannot_execute", commands: [{ started: false }] });
      chmodSync(join(open, "bin"), 0o755);
      const ok = await cli(["run", "--json", "--", join(open, "bin", "tool")], { cwd: open, env });
      expect(ok.code, ok.stderr).toBe(0);
      expect(ok.stderr).toContain(`the job user 64064:64064 cannot write ${open}`);
    } finally {
      chmodSync(scratch, 0o700);
    }
  });
});
