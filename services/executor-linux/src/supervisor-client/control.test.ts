// Real supervisors driven over their control socket: start barrier, cancel before GO and
// during the run, a controller that disconnects and a new incarnation that re-adopts the job,
// and refusals (wrong token, garbage, oversized frames, HELLO not first, foreign uid).
import { spawn } from "node:child_process";
import { chmodSync, existsSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import {
  ClientFrameSchema,
  Outcome,
  Phase,
  ServerFrameSchema,
  Stream,
  type ServerFrame,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { encodeFrame, FrameDecoder } from "../supervisor/framing.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { SupervisorProtocolError, connectSupervisor } from "./connection.js";
import { launchSupervisor, SUPERVISOR_NODE_FLAGS } from "./launch.js";
import { defaultSupervisorEntry } from "./paths.js";
import {
  delay,
  facilityGate,
  liveTagged,
  newTag,
  processesTagged,
  removeScenarioRunDirs,
  scenarioSpec,
  startBystander,
  waitFor,
  type Bystander,
} from "../../testing/supervisor-test-kit.js";

const skipReason = await facilityGate();

/** Sends raw bytes on a fresh connection and collects ServerFrames until the supervisor closes it. */
async function rawExchange(socketPath: string, bytes: Buffer): Promise<ServerFrame[]> {
  const socket = connect(socketPath);
  const decoder = new FrameDecoder();
  const frames: ServerFrame[] = [];
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", () => socket.write(bytes));
    socket.on("data", (chunk: Buffer) => {
      for (const f of decoder.push(chunk)) frames.push(fromBinary(ServerFrameSchema, f));
    });
    socket.once("close", () => resolve());
    socket.once("error", reject);
  });
  return frames;
}

function errorCode(frames: ServerFrame[]): string | undefined {
  const last = frames.at(-1)?.body;
  return last?.case === "error" ? last.value.code : undefined;
}

describe.skipIf(skipReason !== undefined)("supervisor control socket", () => {
  let bystander: Bystander;
  const bystanderTag = newTag();

  beforeAll(async () => {
    bystander = await startBystander(bystanderTag);
  });

  afterAll(async () => {
    expect(bystander.alive()).toBe(true);
    await bystander.stop();
    expect(liveTagged(bystanderTag)).toEqual([]);
    removeScenarioRunDirs();
  });

  test.concurrent("cancel before GO: the command never starts and the receipt says so", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: 'touch "$MARK"' }], env: { MARK: "" } });
    const mark = join(spec.runDir, "started-mark");
    spec.env["MARK"] = mark;
    const handle = await launchSupervisor(spec);
    const conn = await handle.connect("incarnation-a");
    expect(conn.phase).toBe(Phase.WAITING_FOR_GO);
    expect(conn.marker.jobId).toBe(spec.jobId);
    // The launch line: the pinned node, the supervisor's V8 flags, the bundle, its spec.
    expect(readFileSync(`/proc/${handle.pid}/cmdline`, "utf8").split("\0").slice(1, -1)).toEqual([...SUPERVISOR_NODE_FLAGS, defaultSupervisorEntry(), "--spec", join(spec.runDir, RunDirFiles.spec)]);
    expect(SUPERVISOR_NODE_FLAGS).toContain("--max-semi-space-size=1");
    const ack = await conn.cancel("operator changed their mind");
    expect(ack.phase).toBe(Phase.WAITING_FOR_GO);
    const go = await conn.go();
    expect(go.started).toBe(false);
    expect(go.cancelledBeforeGo).toBe(true);
    const receipt = await conn.receipt(true);
    await conn.close();
    expect(receipt?.outcome).toBe(Outcome.CANCELLED);
    expect(receipt?.reason).toBe("cancelled_before_go");
    expect(receipt?.cancelledBeforeGo).toBe(true);
    expect(receipt?.commands[0]?.started).toBe(false);
    expect(receipt?.echildObserved).toBe(true);
    expect(existsSync(mark)).toBe(false);
    expect(await handle.waitGone(5000)).toBe(true);
    expect(existsSync(join(spec.runDir, RunDirFiles.receipt))).toBe(true);
    expect(processesTagged(tag)).toEqual([]);
  });

  test.concurrent("cancel during the run terminates and reaps the whole tree", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: "sleep 120 & setsid sleep 120 & echo ready; sleep 120" }] });
    const handle = await launchSupervisor(spec);
    const conn = await handle.connect();
    expect((await conn.go()).started).toBe(true);
    expect(
      await waitFor(async () => (await conn.readOutput(Stream.STDOUT, 0, 0, 1024)).data.length > 0, 10_000),
    ).toBe(true);
    expect(liveTagged(tag).length).toBeGreaterThanOrEqual(3);
    const ack = await conn.cancel("stop now");
    expect([Phase.RUNNING, Phase.CLEANING_UP]).toContain(ack.phase);
    const receipt = await conn.receipt(true);
    await conn.close();
    expect(receipt?.outcome).toBe(Outcome.CANCELLED);
    expect(receipt?.reason).toBe("cancelled");
    expect(receipt?.cancelledBeforeGo).toBe(false);
    expect(receipt?.commands[0]?.signal).toBe("SIGTERM");
    expect(receipt?.cleanup?.signalledTerm).toBeGreaterThanOrEqual(3);
    expect(receipt?.echildObserved).toBe(true);
    expect(processesTagged(tag)).toEqual([]);
    expect(await handle.waitGone(5000)).toBe(true);
  });

  test.concurrent("a controller disconnects; a new incarnation re-adopts, reads output from offset 0, gets the receipt", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: "echo one; sleep 0.8; echo two" }] });
    const handle = await launchSupervisor(spec);
    const first = await handle.connect("executor-1");
    await first.go();
    await waitFor(async () => (await first.readOutput(Stream.STDOUT, 0, 0, 1024)).data.length > 0, 5000);
    await first.close();
    // The "executor restarted": only the run dir and the marker are known.
    const second = await connectSupervisor(spec.runDir, "executor-2");
    expect(second.previousIncarnationId).toBe("executor-1");
    expect(second.marker.supervisor?.pid).toBe(handle.pid);
    expect(second.marker.supervisor?.startTimeTicks).toBe(handle.marker.supervisor?.startTimeTicks);
    expect(await handle.verify()).toBe("alive");
    const status = await second.status();
    expect([Phase.RUNNING, Phase.CLEANING_UP, Phase.FINISHED]).toContain(status.phase);
    const receipt = await second.receipt(true);
    const out = await second.readOutput(Stream.STDOUT, 0, 0, 1024);
    expect(Buffer.from(out.data).toString()).toBe("one\ntwo\n");
    expect(out.eof).toBe(true);
    const tail = await second.readOutput(Stream.STDOUT, 0, 4, 1024);
    expect(Buffer.from(tail.data).toString()).toBe("two\n");
    await second.close();
    expect(receipt?.outcome).toBe(Outcome.SUCCEEDED);
    expect(await handle.waitGone(5000)).toBe(true);
    expect(await handle.verify()).toBe("gone");
    expect(processesTagged(tag)).toEqual([]);
  });

  test.concurrent("a new incarnation supersedes the old one's connection", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: "true" }] });
    const handle = await launchSupervisor(spec);
    const old = await handle.connect("old");
    const fresh = await handle.connect("new");
    await old.closed;
    await expect(old.status()).rejects.toBeInstanceOf(SupervisorProtocolError);
    expect((await fresh.status()).phase).toBe(Phase.WAITING_FOR_GO);
    await fresh.cancel("done");
    await fresh.receipt(true);
    await fresh.close();
    expect(await handle.waitGone(5000)).toBe(true);
  });

  test.concurrent("wrong token, garbage, oversized frames and requests before HELLO are refused and change nothing", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: "echo fine" }] });
    const handle = await launchSupervisor(spec);
    const socketPath = join(spec.runDir, RunDirFiles.socket);

    const badToken = create(ClientFrameSchema, { body: { case: "hello", value: { token: "0".repeat(64), incarnationId: "x" } } });
    expect(errorCode(await rawExchange(socketPath, encodeFrame(toBinary(ClientFrameSchema, badToken))))).toBe("bad_token");

    const goFirst = create(ClientFrameSchema, { body: { case: "go", value: {} } });
    expect(errorCode(await rawExchange(socketPath, encodeFrame(toBinary(ClientFrameSchema, goFirst))))).toBe("hello_required");

    const garbage = Buffer.concat([Buffer.from([0, 0, 0, 8]), Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])]);
    expect(errorCode(await rawExchange(socketPath, garbage))).toBe("bad_frame");

    const huge = Buffer.from([0x7f, 0xff, 0xff, 0xff]);
    expect(errorCode(await rawExchange(socketPath, huge))).toBe("frame_too_large");

    // Nothing changed: still waiting for GO, and the job then runs normally.
    const conn = await handle.connect();
    expect((await conn.status()).phase).toBe(Phase.WAITING_FOR_GO);
    await conn.go();
    const receipt = await conn.receipt(true);
    await conn.close();
    expect(receipt?.outcome).toBe(Outcome.SUCCEEDED);
    await handle.waitGone(5000);
    const log = readFileSync(join(spec.runDir, RunDirFiles.log), "utf8");
    for (const code of ["bad_token", "hello_required", "bad_frame", "frame_too_large"]) {
      expect(log).toContain(`"code":"${code}"`);
    }
    expect(processesTagged(tag)).toEqual([]);
  });

  // Switching to another uid needs root; the refusal path itself is also unit-tested with a fake.
  const asRoot = process.getuid?.() === 0 ? test.concurrent : test.skip;
  asRoot("a peer with another uid is refused (SO_PEERCRED)", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: "true" }] });
    const handle = await launchSupervisor(spec);
    const socketPath = join(spec.runDir, RunDirFiles.socket);
    // Let uid 65534 reach the socket at all; the token stays 0600 and unreadable to it.
    chmodSync(spec.runDir, 0o711);
    chmodSync(socketPath, 0o666);
    const token = readFileSync(join(spec.runDir, RunDirFiles.token), "utf8");
    const hello = encodeFrame(
      toBinary(ClientFrameSchema, create(ClientFrameSchema, { body: { case: "hello", value: { token, incarnationId: "intruder" } } })),
    );
    const script = `process.setgid(65534); process.setuid(65534);
const s = require("node:net").connect(${JSON.stringify(socketPath)});
const chunks = [];
s.on("connect", () => s.write(Buffer.from(${JSON.stringify(hello.toString("base64"))}, "base64")));
s.on("data", (d) => chunks.push(d));
s.on("close", () => process.stdout.write(Buffer.concat(chunks).toString("base64")));
s.on("error", (e) => { process.stderr.write(String(e)); process.exit(3); });`;
    const child = spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "pipe"], env: {} });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((r) => child.once("exit", r));
    expect(code).toBe(0);
    const decoder = new FrameDecoder();
    const frames = decoder.push(Buffer.from(out, "base64")).map((f) => fromBinary(ServerFrameSchema, f));
    expect(errorCode(frames)).toBe("peer_uid");
    chmodSync(spec.runDir, 0o700);
    const conn = await handle.connect();
    expect((await conn.status()).phase).toBe(Phase.WAITING_FOR_GO);
    await conn.cancel("done");
    await conn.receipt(true);
    await conn.close();
    await handle.waitGone(5000);
    expect(readFileSync(join(spec.runDir, RunDirFiles.log), "utf8")).toContain('"code":"peer_uid"');
  });

  test.concurrent("deadline before GO: nothing starts, the outcome is timed_out", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, deadlineMs: 1800, graceMs: 100, reserveMs: 400, commands: [{ script: "echo never" }] });
    const handle = await launchSupervisor(spec);
    const conn = await handle.connect();
    const receipt = await conn.receipt(true);
    await conn.close();
    expect(receipt?.outcome).toBe(Outcome.TIMED_OUT);
    expect(receipt?.reason).toBe("deadline_before_go");
    expect(receipt?.commands[0]?.started).toBe(false);
    await delay(10);
    expect(await handle.waitGone(5000)).toBe(true);
  });
});
