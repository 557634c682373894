// Real supervisors whose run directory is a small tmpfs, full at each point of a job: before it
// starts, during its output, at receipt time. The supervisor must never die on ENOSPC: output
// beyond what fits is counted and hashed but not kept, the receipt always fits (its space is
// reserved before GO), and the job ends with a precise outcome and a receipt on disk.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { afterAll, describe, expect, test } from "vitest";
import { Outcome, ReceiptSchema, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { readVerifiedJournal } from "./journals.js";
import { launchSupervisor, SupervisorLaunchError } from "./launch.js";
import { facilityGate, newTag, processesTagged, removeScenarioRunDirs, scenarioSpec } from "../../testing/supervisor-test-kit.js";
import { smallFsGate, smallFsPool, type SmallFs } from "../../testing/small-fs.js";

const skipReason = (await facilityGate()) ?? smallFsGate();
const KiB = 1024;
const MiB = 1024 * KiB;

/** A scenario spec whose run directory (and the commands' cwd) is on `fs`. */
function specOn(fs: SmallFs, name: string, o: Parameters<typeof scenarioSpec>[0]): SupervisorSpec {
  const spec = scenarioSpec(o);
  const runDir = join(fs.dir, name);
  mkdirSync(runDir, { mode: 0o700 });
  spec.runDir = runDir;
  for (const c of spec.commands) c.cwd = runDir;
  return spec;
}

/** Launches, releases GO, waits for the receipt; the supervisor must then exit. */
async function goToReceipt(spec: SupervisorSpec) {
  const handle = await launchSupervisor(spec);
  const conn = await handle.connect();
  await conn.go();
  const receipt = await conn.receipt(true);
  await conn.close();
  expect(await handle.waitGone(5000)).toBe(true);
  return receipt;
}

/** The receipt the supervisor left on disk (it must decode and equal what it served). */
function receiptOnDisk(runDir: string) {
  return fromBinary(ReceiptSchema, readFileSync(join(runDir, RunDirFiles.receipt)));
}

describe.skipIf(skipReason !== undefined)("a supervisor on a full disk", () => {
  const { mount, unmountAll } = smallFsPool();
  afterAll(() => {
    unmountAll();
    removeScenarioRunDirs();
  });

  test("full during output (256 KiB free): output beyond what fits is counted and hashed, not kept; the receipt is written", async () => {
    const fs = mount(8 * MiB);
    const tag = newTag();
    const spec = specOn(fs, "r", { tag, commands: [{ script: "head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2" }] });
    fs.fill(256 * KiB);
    const receipt = await goToReceipt(spec);
    expect(receipt?.outcome, receipt?.message).toBe(Outcome.SUCCEEDED);
    const out = receipt?.commands[0]?.stdout;
    expect(out?.bytes).toBe(3000000n);
    expect(out?.producedSha256).toBe(createHash("sha256").update(Buffer.alloc(3000000, "a")).digest("hex"));
    expect(out?.storageError).toBe("ENOSPC");
    expect(out?.keptBytes).toBeLessThan(256n * 1024n);
    expect(out?.tailBytes).toBe(0n);
    expect(out?.elidedBytes).toBe(3000000n - (out?.keptBytes ?? 0n));
    // The journal holds exactly what the receipt says was kept: the controller's check passes.
    const journal = await readVerifiedJournal(spec.runDir, 0, "stdout", out);
    expect(journal.data.equals(Buffer.alloc(journal.data.length, "a"))).toBe(true);
    expect(receipt?.storageErrors.some((e) => e.startsWith("cmd-0.stdout: ENOSPC"))).toBe(true);
    expect(receiptOnDisk(spec.runDir)).toEqual(receipt);
    expect(existsSync(join(spec.runDir, RunDirFiles.receiptJson))).toBe(true);
    expect(processesTagged(tag)).toEqual([]);
  });

  test("full at receipt time (the command fills the disk to 0 bytes free): the reserved receipt is still written", async () => {
    const fs = mount(4 * MiB);
    const tag = newTag();
    // Exits 0 only when the disk was full (0 bytes free) as it ended; its last output meets the full disk too.
    const spec = specOn(fs, "r", {
      tag,
      commands: [{ script: `echo before; head -c 8000000 /dev/zero > "$PWD/fill" 2>/dev/null; [ "$(stat -f -c %a .)" = 0 ] || exit 3; head -c 9000 /dev/zero | tr '\\0' b; echo err >&2` }],
    });
    const receipt = await goToReceipt(spec);
    expect(receipt?.outcome, receipt?.message).toBe(Outcome.SUCCEEDED);
    // 9000 bytes need pages the full disk does not have; stderr's journal had none at all.
    expect(receipt?.commands[0]?.stdout).toMatchObject({ storageError: "ENOSPC", bytes: 9007n });
    expect(receipt?.commands[0]?.stderr).toMatchObject({ storageError: "ENOSPC", bytes: 4n, keptBytes: 0n });
    expect(receiptOnDisk(spec.runDir)).toEqual(receipt);
    const json = JSON.parse(readFileSync(join(spec.runDir, RunDirFiles.receiptJson), "utf8")) as { outcome: string };
    expect(json.outcome).toBe("succeeded");
    // Nothing of the reserve is left behind.
    expect(readdirSync(spec.runDir).filter((f) => f.includes("reserve"))).toEqual([]);
    const out = receipt?.commands[0]?.stdout;
    await expect(readVerifiedJournal(spec.runDir, 0, "stdout", out)).resolves.toBeDefined();
    await expect(readVerifiedJournal(spec.runDir, 0, "stderr", receipt?.commands[0]?.stderr)).resolves.toBeDefined();
  });

  test("full before start: the supervisor cannot reserve its receipt and exits before its marker (nothing started), saying why", async () => {
    const fs = mount(1 * MiB);
    const tag = newTag();
    const spec = specOn(fs, "r", { tag, commands: [{ script: 'touch "$PWD/started"' }] });
    // Room for the spec the launcher writes, not for the marker and the receipt reserve.
    fs.fill(8 * KiB);
    const launched = launchSupervisor(spec);
    await expect(launched).rejects.toBeInstanceOf(SupervisorLaunchError);
    await expect(launched).rejects.toThrow(/status 73.*no space/);
    await expect(launched).rejects.toMatchObject({ noSpace: true });
    expect(existsSync(join(spec.runDir, RunDirFiles.marker))).toBe(false);
    expect(existsSync(join(spec.runDir, "started"))).toBe(false);
    expect(processesTagged(tag)).toEqual([]);
  });

  test("full before the launch (0 bytes free): the spec cannot be written, a noSpace launch error, no supervisor started", async () => {
    const fs = mount(1 * MiB);
    const tag = newTag();
    const spec = specOn(fs, "r", { tag, commands: [{ script: "true" }] });
    fs.fill(0);
    const launched = launchSupervisor(spec);
    await expect(launched).rejects.toThrow(`no space in ${spec.runDir} for the supervisor's spec: ENOSPC`);
    await expect(launched).rejects.toMatchObject({ noSpace: true });
    expect(readdirSync(spec.runDir)).toEqual([]);
    expect(processesTagged(tag)).toEqual([]);
  });
});
