// (b) Cleanup of a 1,000-process tree with setsid escapees, to ECHILD, against a baseline that
// only kills the process group (what it leaves alive is reported, then cleaned up by pid through
// identity-checked pidfds).
//   node bench/supervisor-cleanup.mjs [--runs N] [--procs 1000] [--escapees 50]
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { argNum, fmt, importDist, machine, median, percentile, runDir, sleep, tagged, treeScript, waitTagged } from "./supervisor-common.mjs";

const { create } = await import("@bufbuild/protobuf");
const { SupervisorSpecSchema } = await import("@seraph/proto/seraph/supervisor/v1/supervisor_pb.js");
const client = await importDist("supervisor-client/index.js");
const native = await importDist("native/index.js");
const { signalVerified } = await importDist("supervisor/signaller.js");

const runs = argNum("--runs", 7);
const procs = argNum("--procs", 1000);
const escapees = argNum("--escapees", 50);
const inGroup = procs - escapees - 1; // the direct sh counts as one
// The direct sh starts the tree, then waits (so the tree is complete before the kill).
const script = treeScript(inGroup, escapees);


async function supervisorRun() {
  const tag = `sxb${randomBytes(6).toString("hex")}`;
  const spec = create(SupervisorSpecSchema, {
    jobId: `bench-${tag}`,
    attempt: 1,
    fence: 1n,
    commands: [{ name: "tree", argv: ["/bin/sh", "-c", script], cwd: "/tmp" }],
    env: { PATH: "/usr/bin:/bin", SERAPH_BENCH: tag },
    deadlineUnixMs: BigInt(Date.now() + 120_000),
    cleanupReserveMs: 10_000,
    graceMs: 2000,
    runDir: runDir(),
    startBarrier: true,
  });
  const handle = await client.launchSupervisor(spec);
  const conn = await handle.connect();
  await conn.go();
  await waitTagged(tag, procs);
  const t0 = performance.now();
  await conn.cancel("bench");
  const receipt = await conn.receipt(true);
  const t1 = performance.now();
  await conn.close();
  await handle.waitGone(5000);
  const left = tagged(tag).length;
  if (!receipt.echildObserved || left !== 0) throw new Error(`supervisor left ${left}, echild ${receipt.echildObserved}`);
  return { cleanupMs: receipt.cleanup.cleanupMs, cancelToReceiptMs: t1 - t0, found: receipt.cleanup.descendantsFound, reaped: receipt.cleanup.reaped, rounds: receipt.cleanup.rounds };
}

async function baselineRun(nat, proc) {
  const tag = `sxb${randomBytes(6).toString("hex")}`;
  const child = spawn("/bin/sh", ["-c", script], { detached: true, stdio: "ignore", env: { PATH: "/usr/bin:/bin", SERAPH_BENCH: tag } });
  const exited = new Promise((r) => child.once("exit", r));
  await waitTagged(tag, procs);
  const t0 = performance.now();
  process.kill(-child.pid, "SIGKILL"); // the whole baseline: one kill(-pgid)
  // Until the group's processes are dead (zombies count as dead: init reaps them).
  for (;;) {
    if (!tagged(tag).some((p) => p.pgrp === child.pid)) break;
    await sleep(1);
  }
  const t1 = performance.now();
  await exited;
  const survivors = tagged(tag);
  // Clean up what the baseline left, by pid, but only through identity-checked pidfds.
  for (const p of survivors) signalVerified(nat, proc, p, [native.Signal.SIGKILL]);
  for (let i = 0; i < 500 && tagged(tag).length > 0; i++) await sleep(10);
  return { killMs: t1 - t0, survivors: survivors.length, stillAlive: tagged(tag).length };
}

const nat = native.createNativeSystem();
const proc = native.createProcFs();
const sup = [];
const base = [];
for (let i = 0; i < runs; i++) {
  sup.push(await supervisorRun());
  base.push(await baselineRun(nat, proc));
}
const cleanupMs = sup.map((r) => r.cleanupMs);
const cancelMs = sup.map((r) => r.cancelToReceiptMs);
const killMs = base.map((r) => r.killMs);
const lines = [
  `### (b) Cleanup of a ${procs}-process tree (${escapees} setsid escapees)`,
  ``,
  `Machine: ${machine()}. ${runs} runs each; load average at the end ${(await import("node:os")).loadavg().map((x) => x.toFixed(1)).join(" ")}.`,
  ``,
  `| measurement | median ms | p90 ms | left alive |`,
  `| --- | ---: | ---: | ---: |`,
  `| baseline: \`kill(-pgid, SIGKILL)\` until the group is dead | ${fmt(median(killMs))} | ${fmt(percentile(killMs, 90))} | ${median(base.map((r) => r.survivors))} (the setsid escapees) |`,
  `| supervisor: cleanup start → ECHILD (receipt cleanup_ms) | ${fmt(median(cleanupMs))} | ${fmt(percentile(cleanupMs, 90))} | 0 |`,
  `| supervisor: cancel sent → receipt received (controller view) | ${fmt(median(cancelMs))} | ${fmt(percentile(cancelMs, 90))} | 0 |`,
  ``,
  `Ratio supervisor cleanup / baseline kill: ${fmt(median(cleanupMs) / median(killMs), 2)}. The supervisor found ${median(sup.map((r) => r.found))} descendants and reaped ${median(sup.map((r) => r.reaped))} (median) in ${median(sup.map((r) => r.rounds))} round(s); the baseline left ${median(base.map((r) => r.survivors))} escapees alive each run (cleaned up by pid afterwards through pidfds; ${Math.max(...base.map((r) => r.stillAlive))} remained).`,
  ``,
  `Target: 1,000-process cleanup to ECHILD ≤ 250 ms median → ${median(cleanupMs) <= 250 ? "met" : "MISSED"} (${fmt(median(cleanupMs))} ms).`,
];
process.stdout.write(`${lines.join("\n")}\n`);
