// Real processes: bounded output capture under a flood, and identity checks that refuse to
// signal a process whose pid no longer matches the recorded start time.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, describe, expect, test } from "vitest";
import { OutcomeSchema, Outcome, OwnerMarkerSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { createNativeSystem } from "../native/libc.js";
import { Signal } from "../native/native-system.js";
import { createProcFs, isExited } from "../native/proc-fs.js";
import { checkIdentity } from "../supervisor/identity.js";
import { journalFileName } from "../supervisor/run-dir.js";
import { signalVerified } from "../supervisor/signaller.js";
import { verifySupervisorIdentity } from "./identity.js";
import { launchSupervisor } from "./launch.js";
import { facilityGate, newTag, processesTagged, removeScenarioRunDirs, scenarioSpec, waitFor, writeZombieLeaderHelper } from "../../testing/supervisor-test-kit.js";

const skipReason = await facilityGate();
const MiB = 1024 * 1024;

function vmHwmKiB(pid: number): number {
  const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m?.[1] ?? Number.NaN);
}

describe.skipIf(skipReason !== undefined)("supervisor output and identity", () => {
  afterAll(() => removeScenarioRunDirs());

  test.concurrent("a 256 MB flood: counted exactly, 1 MiB kept per stream, memory flat, control stays responsive", async () => {
    const tag = newTag();
    const spec = scenarioSpec({
      tag,
      commands: [{ script: "head -c 268435456 /dev/zero; head -c 3000000 /dev/zero >&2; echo done >&2" }],
    });
    const handle = await launchSupervisor(spec);
    const conn = await handle.connect();
    await conn.go();
    let worst = 0;
    let sawFlowing = false;
    for (;;) {
      const t0 = performance.now();
      const st = await conn.status();
      worst = Math.max(worst, performance.now() - t0);
      if (st.stdoutBytes > 0n && st.stdoutBytes < 268435456n) sawFlowing = true;
      if (st.finished.length > 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const receipt = await conn.receipt(true);
    const hwm = vmHwmKiB(handle.pid); // the supervisor lingers until we close
    await conn.close();
    expect(receipt?.outcome, receipt?.message).toBe(Outcome.SUCCEEDED);
    const out = receipt?.commands[0]?.stdout;
    const err = receipt?.commands[0]?.stderr;
    expect(out?.bytes).toBe(268435456n);
    expect(out?.keptBytes).toBe(BigInt(MiB));
    expect(out?.truncated).toBe(true);
    expect(out?.sha256).toBe(createHash("sha256").update(Buffer.alloc(MiB)).digest("hex"));
    // Head and tail halves; the hash over everything produced still covers all 256 MiB.
    expect(out?.headBytes).toBe(BigInt(MiB / 2));
    expect(out?.tailBytes).toBe(BigInt(MiB / 2));
    expect(out?.elidedBytes).toBe(268435456n - BigInt(MiB));
    const all = createHash("sha256");
    const zeros = Buffer.alloc(MiB);
    for (let i = 0; i < 256; i++) all.update(zeros);
    expect(out?.producedSha256).toBe(all.digest("hex"));
    expect(err?.bytes).toBe(3000005n);
    expect(err?.keptBytes).toBe(BigInt(MiB));
    expect(err?.truncated).toBe(true);
    expect(readFileSync(join(spec.runDir, journalFileName(0, "stdout"))).length).toBe(MiB);
    expect(sawFlowing).toBe(true);
    expect(worst).toBeLessThan(500);
    // A 256 MiB flood must not show up in the supervisor's peak RSS.
    expect(hwm).toBeLessThan(200 * 1024);
    await handle.waitGone(5000);
    expect(processesTagged(tag)).toEqual([]);
  });

  test.concurrent("the job-wide output budget caps all streams together", async () => {
    const tag = newTag();
    const spec = scenarioSpec({
      tag,
      outputLimitBytes: 1.5 * MiB,
      commands: [{ script: "head -c 2000000 /dev/zero; head -c 2000000 /dev/zero >&2" }],
    });
    const handle = await launchSupervisor(spec);
    const conn = await handle.connect();
    await conn.go();
    const receipt = await conn.receipt(true);
    await conn.close();
    const c = receipt?.commands[0];
    expect((c?.stdout?.keptBytes ?? 0n) + (c?.stderr?.keptBytes ?? 0n)).toBe(BigInt(1.5 * MiB));
    expect(receipt?.outputKeptBytes).toBe(BigInt(1.5 * MiB));
    expect(c?.stdout?.bytes).toBe(2000000n);
    expect(c?.stderr?.bytes).toBe(2000000n);
    expect(c?.stderr?.truncated).toBe(true);
    await handle.waitGone(5000);
  });

  test("pid reuse: a pidfd opened on a pid whose start time does not match is refused, the process survives", async () => {
    const native = createNativeSystem();
    const proc = createProcFs();
    const tag = newTag();
    const child = spawn("/bin/sleep", ["60"], { stdio: "ignore", env: { SERAPH_SCENARIO: tag } });
    const exited = new Promise<string | null>((r) => child.once("exit", (_code, signal) => r(signal)));
    const pid = child.pid ?? -1;
    await waitFor(() => proc.readStat(pid) !== undefined, 2000);
    const real = proc.readStat(pid)?.startTimeTicks ?? 0n;

    // What a stale record looks like after the pid was reused: same pid, other start time.
    const refused = signalVerified(native, proc, { pid, startTimeTicks: real + 1n }, [Signal.SIGKILL]);
    expect(refused.kind).toBe("refused");
    await new Promise((r) => setTimeout(r, 100));
    expect(proc.readStat(pid)?.startTimeTicks).toBe(real);
    expect(processesTagged(tag).map((p) => p.pid)).toEqual([pid]);

    // The exact identity is signalled through its pidfd.
    expect(signalVerified(native, proc, { pid, startTimeTicks: real }, [Signal.SIGKILL]).kind).toBe("signalled");
    expect(await exited).toBe("SIGKILL");
    expect(signalVerified(native, proc, { pid, startTimeTicks: real }, [Signal.SIGKILL]).kind).toBe("gone");
  });

  test("a zombie leader (SYS_exit in main, thread running): alive by identity, refused on a wrong start time, killed through its pidfd", async () => {
    const native = createNativeSystem();
    const proc = createProcFs();
    const bootId = proc.readBootId();
    const dir = mkdtempSync(join(tmpdir(), "sxz-"));
    const tag = newTag();
    const child = spawn("/usr/bin/python3", [writeZombieLeaderHelper(dir), join(dir, "heartbeat")], { stdio: "ignore", env: { SERAPH_SCENARIO: tag } });
    const exited = new Promise<string | null>((r) => child.once("exit", (_code, signal) => r(signal)));
    const pid = child.pid ?? -1;
    try {
      expect(await waitFor(() => proc.readStat(pid)?.state === "Z", 5000)).toBe(true);
      const stat = proc.readStat(pid);
      expect(stat?.threads).toBe(2);
      expect(stat !== undefined && isExited(stat)).toBe(false);
      const start = stat?.startTimeTicks ?? 0n;
      // Its own environ reads empty; the live thread's still carries the tag.
      expect(processesTagged(tag).map((p) => [p.pid, p.state])).toEqual([[pid, "Z"]]);
      expect(checkIdentity(proc, { pid, startTimeTicks: start, bootId }, bootId)).toBe("alive");
      expect(checkIdentity(proc, { pid, startTimeTicks: start + 1n, bootId }, bootId)).toBe("reused");
      expect(signalVerified(native, proc, { pid, startTimeTicks: start + 1n }, [Signal.SIGKILL]).kind).toBe("refused");
      await new Promise((r) => setTimeout(r, 100));
      expect(proc.readStat(pid)?.threads).toBe(2);
      // SIGKILL to the leader's pidfd reaches the whole group.
      expect(signalVerified(native, proc, { pid, startTimeTicks: start }, [Signal.SIGKILL]).kind).toBe("signalled");
      expect(await exited).toBe("SIGKILL");
    } finally {
      child.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("verifySupervisorIdentity: alive, reused, other_boot, gone", async () => {
    const proc = createProcFs();
    const bootId = proc.readBootId();
    const child = spawn("/bin/sleep", ["60"], { stdio: "ignore", env: {} });
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    const pid = child.pid ?? -1;
    await waitFor(() => proc.readStat(pid) !== undefined, 2000);
    const start = proc.readStat(pid)?.startTimeTicks ?? 0n;
    const marker = (startTimeTicks: bigint, boot: string) =>
      create(OwnerMarkerSchema, { supervisor: { pid, startTimeTicks, bootId: boot } });
    expect(await verifySupervisorIdentity(marker(start, bootId))).toBe("alive");
    expect(await verifySupervisorIdentity(marker(start + 7n, bootId))).toBe("reused");
    expect(await verifySupervisorIdentity(marker(start, "00000000-0000-0000-0000-000000000000"))).toBe("other_boot");
    child.kill("SIGKILL");
    await exited;
    expect(await verifySupervisorIdentity(marker(start, bootId))).toBe("gone");
    expect(OutcomeSchema.values.length).toBeGreaterThan(0);
  });
});
