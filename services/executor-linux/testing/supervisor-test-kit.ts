/**
 * Helpers for the supervisor's real-process tests (not part of the public API). Scenario
 * processes are tagged with SERAPH_SCENARIO=<tag> in their environment so that a /proc scan
 * finds every one of them afterwards, wherever it was reparented.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { SupervisorSpecSchema, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { createProcFs } from "../src/native/proc-fs.js";
import { isExited } from "../src/native/proc-fs.js";
import { readFacilityReport } from "../src/supervisor-client/facility.js";
import { defaultSupervisorEntry } from "../src/supervisor-client/paths.js";

/** Throws a clear error when the compiled supervisor is missing (tests spawn dist/). */
export function assertSupervisorBuilt(): void {
  const entry = defaultSupervisorEntry();
  if (!existsSync(entry)) {
    throw new Error(`${entry} is missing: build first with \`npm run build\` (tests spawn the supervisor bundle)`);
  }
}

/**
 * Resolves to a skip reason when the Linux facilities are missing, or undefined when they are
 * present. With CI=true a missing facility throws instead: in CI such a test fails, never skips.
 */
export async function facilityGate(): Promise<string | undefined> {
  assertSupervisorBuilt();
  const report = await readFacilityReport();
  if (report.ok) return undefined;
  const missing = report.items.filter((i) => !i.ok).map((i) => `${i.name}: ${i.code}: ${i.message}`).join("; ");
  if (process.env["CI"] === "true") throw new Error(`Linux supervision facilities missing in CI: ${missing}`);
  return missing;
}

/** A fresh tag for one scenario. */
export function newTag(): string {
  return `sx${randomBytes(6).toString("hex")}`;
}

/** Options of scenarioSpec. */
export interface ScenarioSpecOptions {
  readonly tag: string;
  /** Commands: each a /bin/sh script or an exact argv. */
  readonly commands: ReadonlyArray<{ readonly name?: string; readonly script?: string; readonly argv?: readonly string[] }>;
  readonly deadlineMs?: number;
  readonly graceMs?: number;
  readonly reserveMs?: number;
  readonly startBarrier?: boolean;
  readonly env?: Readonly<Record<string, string>>;
  readonly streamLimitBytes?: number;
  readonly outputLimitBytes?: number;
}

/** Run dirs made by scenarioSpec in this test process (removed by removeScenarioRunDirs). */
const createdRunDirs = new Set<string>();

/**
 * Removes every run dir scenarioSpec created in this process (call from afterAll, after every
 * supervisor is gone). Kept when SERAPH_KEEP_RUN_DIRS=1, for debugging.
 */
export function removeScenarioRunDirs(): void {
  if (process.env["SERAPH_KEEP_RUN_DIRS"] === "1") return;
  for (const dir of createdRunDirs) rmSync(dir, { recursive: true, force: true });
  createdRunDirs.clear();
}

/** A spec in a fresh short run dir, every command tagged through the environment. */
export function scenarioSpec(o: ScenarioSpecOptions): SupervisorSpec {
  const runDir = mkdtempSync(join(tmpdir(), "sxr-"));
  createdRunDirs.add(runDir);
  const graceMs = o.graceMs ?? 300;
  return create(SupervisorSpecSchema, {
    jobId: `test-${o.tag}`,
    attempt: 1,
    fence: 7n,
    commands: o.commands.map((c, i) => ({
      name: c.name ?? `step${i}`,
      argv: c.argv !== undefined ? [...c.argv] : ["/bin/sh", "-c", c.script ?? "true", o.tag],
      cwd: runDir,
    })),
    env: { PATH: "/usr/local/bin:/usr/bin:/bin", SERAPH_SCENARIO: o.tag, ...o.env },
    deadlineUnixMs: BigInt(Date.now() + (o.deadlineMs ?? 30_000)),
    cleanupReserveMs: o.reserveMs ?? graceMs + 2000,
    graceMs,
    streamLimitBytes: BigInt(o.streamLimitBytes ?? 0),
    outputLimitBytes: BigInt(o.outputLimitBytes ?? 0),
    runDir,
    startBarrier: o.startBarrier ?? true,
  });
}

/** A process found by tag. */
export interface TaggedProcess {
  readonly pid: number;
  readonly state: string;
  readonly threads: number;
  readonly comm: string;
}

/**
 * Every process on the host whose environment or argv carries `tag` (zombies have neither,
 * but a zombie of the tree would be the supervisor's child, which ECHILD already excludes).
 */
export function processesTagged(tag: string): TaggedProcess[] {
  const proc = createProcFs();
  const found: TaggedProcess[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid) continue;
    if (!taskCarries(pid, tag)) continue;
    const stat = proc.readStat(pid);
    if (stat === undefined) continue;
    found.push({ pid, state: stat.state, threads: stat.threads, comm: stat.comm });
  }
  return found;
}

/** The environment + argv of /proc/<path>, or "" when unreadable (gone, kernel thread, zombie). */
function environAndCmdline(path: string): string {
  try {
    return readFileSync(`${path}/environ`, "latin1") + readFileSync(`${path}/cmdline`, "latin1");
  } catch {
    return "";
  }
}

/**
 * Whether process `pid` carries `tag`. A thread-group leader that exited (SYS_exit) while other
 * threads run is a zombie whose own environ and cmdline read empty; its live threads still
 * show them under /proc/<pid>/task/<tid>/, so those are read too.
 */
function taskCarries(pid: number, tag: string): boolean {
  const own = environAndCmdline(`/proc/${pid}`);
  if (own.includes(tag)) return true;
  if (own.length > 0) return false;
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return false;
  }
  return tids.some((tid) => tid !== String(pid) && environAndCmdline(`/proc/${pid}/task/${tid}`).includes(tag));
}

/**
 * SIGKILLs every process carrying `tag`, by pid (each found by its tag, i.e. started by this
 * test), and waits up to `timeoutMs` until none is left alive. For a test's own cleanup after
 * a failure; a passing scenario leaves nothing to kill.
 */
export async function killTagged(tag: string, timeoutMs = 5000): Promise<void> {
  for (const p of processesTagged(tag)) {
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  await waitFor(() => liveTagged(tag).length === 0, timeoutMs);
}

/**
 * A test's own cleanup of a supervisor it launched: SIGTERM (a cancel: the supervisor reaps
 * its tree) through the launching handle, then SIGKILL if it is still there, then every
 * process carrying `tag`. Does nothing when the supervisor is already gone.
 */
export async function stopScenario(handle: { verify(): Promise<string>; signal(s: NodeJS.Signals): boolean; waitGone(ms?: number): Promise<boolean> } | undefined, tag: string): Promise<void> {
  if (handle !== undefined && (await handle.verify()) === "alive") {
    handle.signal("SIGTERM");
    if (!(await handle.waitGone(5000))) handle.signal("SIGKILL");
  }
  await killTagged(tag);
}

/**
 * Writes a scenario helper (python3; ctypes releases the GIL around the call) whose main thread
 * starts a worker thread and then ends with the raw SYS_exit syscall — what `pthread_exit` in
 * `main` does in C: the thread-group leader becomes a zombie (`Z` in /proc/<tgid>/stat) while
 * the worker runs on. The worker appends a line to the file in argv[1] every 50 ms, forever.
 * Returns the script's path (run it as `python3 <path> <heartbeat-file>`).
 */
export function writeZombieLeaderHelper(dir: string): string {
  const path = join(dir, "zombie-leader.py");
  writeFileSync(
    path,
    `import ctypes, sys, threading, time
heartbeat = sys.argv[1]
def worker():
    while True:
        with open(heartbeat, "a") as f:
            f.write("beat\\n")
        time.sleep(0.05)
threading.Thread(target=worker).start()
time.sleep(0.1)
sys.stdout.write("leader exiting\\n")
sys.stdout.flush()
ctypes.CDLL(None, use_errno=True).syscall(60, 0)  # SYS_exit: this thread only
`,
  );
  return path;
}

/** Tagged processes that have not exited (zombies excluded; zombie leaders with threads included). */
export function liveTagged(tag: string): TaggedProcess[] {
  return processesTagged(tag).filter((p) => !isExited(p));
}

/** A process the test started outside every supervisor tree; it must survive. */
export interface Bystander {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly startTimeTicks: bigint;
  /** Still the same live process? */
  alive(): boolean;
  /** Stops it (the test's own child, by its ChildProcess handle) and waits for its exit. */
  stop(): Promise<void>;
}

/** Starts `sleep 120` tagged with `tag` as a direct child of the test process. */
export async function startBystander(tag: string): Promise<Bystander> {
  const child = spawn("/bin/sleep", ["120"], { stdio: "ignore", env: { BYSTANDER: tag } });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const pid = child.pid;
  if (pid === undefined) throw new Error("bystander did not start");
  const proc = createProcFs();
  let stat = proc.readStat(pid);
  for (let i = 0; stat === undefined && i < 100; i++) {
    await new Promise((r) => setTimeout(r, 5));
    stat = proc.readStat(pid);
  }
  if (stat === undefined) throw new Error("bystander has no /proc entry");
  const startTimeTicks = stat.startTimeTicks;
  return {
    child,
    pid,
    startTimeTicks,
    alive() {
      const s = proc.readStat(pid);
      return s !== undefined && s.startTimeTicks === startTimeTicks && !isExited(s);
    },
    async stop() {
      child.kill("SIGKILL");
      await exited;
    },
  };
}

/**
 * Writes a small scenario helper into `dir` (python3 with ctypes, so koffi stays confined to
 * src/native/) that (a) moves itself to a new process group (`pgrp`), or (b) becomes a child
 * subreaper and adopts an orphan (`subreaper`), then idles until killed. Returns the argv
 * prefix to run it with (append the mode).
 */
export function writeNativeHelper(dir: string): string {
  const path = join(dir, "native-helper.py");
  writeFileSync(
    path,
    `import ctypes, os, signal, subprocess, sys
mode = sys.argv[1]
if mode == "pgrp":
    os.setpgid(0, 0)
elif mode == "subreaper":
    if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
        sys.exit(91)
    # The sh exits at once; its sleep is orphaned and reparents to THIS process, not the supervisor.
    subprocess.Popen(["/bin/sh", "-c", "sleep 120 & exit 0"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while True:
    signal.pause()
`,
  );
  return path;
}

/** Resolves after `ms`. */
export function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `predicate` every 10 ms until true or `timeoutMs` passes; returns the last value. */
export async function waitFor(predicate: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return true;
    if (Date.now() >= until) return false;
    await delay(10);
  }
}
