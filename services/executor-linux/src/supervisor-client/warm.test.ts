// Warm supervisors (`supervisor.mjs --warm`): started before any job, they take exactly one
// spec over warm.sock and then are exactly a freshly launched supervisor of it; every bad request
// is refused with a code and changes nothing.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, rmdirSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { afterAll, describe, expect, test } from "vitest";
import { Outcome, Phase, SupervisorSpecSchema, WarmMarkerSchema, WarmRequestSchema, WarmResponseSchema, type WarmResponse } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { supervisorSourceOf } from "../executor-service/supervisor-source.js";
import { createProcFs } from "../native/proc-fs.js";
import { encodeFrame, FrameDecoder } from "../supervisor/framing.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { defaultSupervisorEntry } from "./paths.js";
import { facilityGate, newTag, removeScenarioRunDirs, scenarioSpec, waitFor } from "../../testing/supervisor-test-kit.js";
import { handOverSpec, moveWarmSupervisor, retireWarmSupervisor, sendWarmRequest, startWarmSupervisor } from "./warm.js";

const skipReason = await facilityGate();

/** Sends raw frame bytes to warm.sock and decodes the one answer. */
async function raw(runDir: string, bytes: Buffer): Promise<WarmResponse> {
  const socket = connect(join(runDir, RunDirFiles.warmSocket));
  const decoder = new FrameDecoder();
  return new Promise((resolve, reject) => {
    socket.once("connect", () => socket.write(bytes));
    socket.on("data", (chunk: Buffer) => {
      const first = decoder.push(chunk)[0];
      if (first !== undefined) resolve(fromBinary(WarmResponseSchema, first));
    });
    socket.once("error", reject);
  });
}

const alive = (pid: number) => {
  const st = createProcFs("/proc").readStat(pid);
  return st !== undefined && st.state !== "Z";
};

/** The job files a warm supervisor without a spec must not have. */
const jobFiles = (runDir: string) => [RunDirFiles.spec, RunDirFiles.marker, RunDirFiles.socket, RunDirFiles.token].filter((f) => existsSync(join(runDir, f)));

describe.skipIf(skipReason !== undefined)("warm supervisor", () => {
  afterAll(() => removeScenarioRunDirs());

  test("refuses every bad request without changing anything, then takes one spec and is a fresh launch of it", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: "echo warm-ok" }] });
    // Started in a directory of its own, then moved to where the job's run directory belongs.
    rmdirSync(spec.runDir);
    const home = `${spec.runDir}-warm`;
    const started = await startWarmSupervisor(home);
    const warm = await moveWarmSupervisor(started, spec.runDir);
    expect(existsSync(home)).toBe(false);
    expect(warm.marker.supervisor?.pid).toBe(warm.pid);
    expect(warm.marker.supervisorSourceSha256).toBe(supervisorSourceOf(defaultSupervisorEntry()));
    expect(jobFiles(spec.runDir)).toEqual([]);
    const token = readFileSync(join(spec.runDir, RunDirFiles.warmToken), "utf8");
    const request = (body: Parameters<typeof create<typeof WarmRequestSchema>>[1]) => encodeFrame(toBinary(WarmRequestSchema, create(WarmRequestSchema, body)));
    const specBytes = (patch: Partial<typeof spec>) => toBinary(SupervisorSpecSchema, create(SupervisorSpecSchema, { ...spec, ...patch }));

    const refusals: Array<[string, Buffer]> = [
      ["malformed_request", encodeFrame(Buffer.from([0xff, 0xff, 0xff]))],
      ["bad_token", request({ token: "0".repeat(64), body: { case: "spec", value: specBytes({}) } })],
      ["malformed_request", request({ token, body: { case: undefined } })],
      ["malformed_spec", request({ token, body: { case: "spec", value: Buffer.from([0x0a, 0xff]) } })],
      ["invalid_spec", request({ token, body: { case: "spec", value: specBytes({ commands: [] }) } })],
      ["invalid_spec", request({ token, body: { case: "spec", value: specBytes({ runDir: "/tmp" }) } })],
      ["invalid_spec", request({ token, body: { case: "spec", value: specBytes({ runDir: home }) } })],
      ["invalid_spec", request({ token, body: { case: "spec", value: specBytes({ runDir: join(spec.runDir, "elsewhere") }) } })],
      ["boot_id_source_mismatch", request({ token, body: { case: "spec", value: specBytes({ testBootIdFile: "/tmp/other-boot-id" }) } })],
    ];
    for (const [code, bytes] of refusals) {
      const answer = await raw(spec.runDir, bytes);
      expect(answer, code).toMatchObject({ accepted: false, errorCode: code });
      expect(jobFiles(spec.runDir), code).toEqual([]);
      expect(alive(warm.pid), code).toBe(true);
    }
    // An oversized frame is refused before it is read.
    const huge = Buffer.alloc(8);
    huge.writeUInt32BE(5 * 1024 * 1024, 0);
    expect(await raw(spec.runDir, huge)).toMatchObject({ accepted: false, errorCode: "frame_too_large" });
    // A spec the client-side check already refuses never reaches it.
    await expect(handOverSpec(warm, create(SupervisorSpecSchema, { ...spec, runDir: "/tmp" }))).rejects.toThrow(/is not the warm supervisor's/);

    const handle = await handOverSpec(warm, spec);
    // Same process, and a marker exactly as a fresh launch writes it.
    expect(handle.pid).toBe(warm.pid);
    expect(handle.marker.supervisor?.startTimeTicks).toBe(warm.marker.supervisor?.startTimeTicks);
    expect(handle.marker.supervisor?.bootId).toBe(warm.marker.supervisor?.bootId);
    expect(handle.marker.supervisorSourceSha256).toBe(warm.marker.supervisorSourceSha256);
    expect(handle.marker.runDir).toBe(spec.runDir);
    expect(handle.marker.jobId).toBe(spec.jobId);
    const written = readFileSync(join(spec.runDir, RunDirFiles.spec));
    expect(handle.marker.specSha256).toBe(createHash("sha256").update(written).digest("hex"));
    // Owning a job, it takes no other spec and does not retire; nothing it holds changes.
    for (const body of [{ case: "spec", value: specBytes({}) }, { case: "retire", value: {} }] as const) {
      const answer = await sendWarmRequest(spec.runDir, body);
      expect(answer).toMatchObject({ accepted: false, errorCode: "already_owns_job" });
    }
    expect(readFileSync(join(spec.runDir, RunDirFiles.spec)).equals(written)).toBe(true);
    const conn = await handle.connect();
    expect(conn.phase).toBe(Phase.WAITING_FOR_GO);
    await conn.go();
    const receipt = await conn.receipt(true);
    await conn.close();
    expect(receipt?.outcome).toBe(Outcome.SUCCEEDED);
    expect(receipt?.echildObserved).toBe(true);
    expect(await handle.waitGone(5000)).toBe(true);
  });

  test("one that owns nothing retires on request, and exits by itself once its launcher is gone", async () => {
    const a = scenarioSpec({ tag: newTag(), commands: [{ argv: ["/bin/true"] }] });
    const warm = await startWarmSupervisor(a.runDir);
    expect(await retireWarmSupervisor(a.runDir)).toBe(true);
    await warm.exited;
    expect(jobFiles(a.runDir)).toEqual([]);
    await expect(handOverSpec(warm, a)).rejects.toThrow(/is gone|is reused/);

    // A launcher process that starts a warm supervisor and exits at once.
    const b = scenarioSpec({ tag: newTag(), commands: [{ argv: ["/bin/true"] }] });
    const client = new URL("../../dist/supervisor-client/warm.js", import.meta.url).pathname;
    execFileSync(process.execPath, ["--input-type=module", "-e", `const m = await import(${JSON.stringify(client)}); await m.startWarmSupervisor(${JSON.stringify(b.runDir)}); process.exit(0);`], { timeout: 20_000 });
    const orphan = fromBinary(WarmMarkerSchema, readFileSync(join(b.runDir, RunDirFiles.warmMarker))).supervisor!.pid;
    expect(await waitFor(() => !alive(orphan), 5000)).toBe(true);
    expect(jobFiles(b.runDir)).toEqual([]);
  });
});
