import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createRootLogger } from "@seraph/kit";
import { HostLaunchRequestSchema, HostLaunchResponseSchema, WarmMarkerSchema, type HostLaunchResponse } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createNativeSystem } from "../native/libc.js";
import { readPidNamespace } from "../native/pid-namespace.js";
import { requestHost, requestHostLaunch, SupervisorLaunchError } from "../supervisor-client/launch.js";
import { retireWarmSupervisor } from "../supervisor-client/warm.js";
import { FrameDecoder, encodeFrame } from "../supervisor/framing.js";
import { hostTokenFile, startSupervisorHost, SupervisorBundleMissingError, type SupervisorHost } from "./host.js";

const log = createRootLogger({ name: "host-test", level: "silent" });
let dir: string;
let dataDir: string;
let socketPath: string;
let host: SupervisorHost;

beforeAll(async () => {
  dir = realpathSync(mkdtempSync(join(tmpdir(), "sh-")));
  dataDir = join(dir, "data");
  mkdirSync(dataDir, { mode: 0o700 });
  socketPath = join(dataDir, "host.sock");
  host = await startSupervisorHost({ socketPath, dataDir, log, native: createNativeSystem() });
});

afterAll(async () => {
  await host?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Sends raw bytes and returns the host's answer. */
function raw(bytes: Buffer): Promise<HostLaunchResponse> {
  return new Promise((resolve, reject) => {
    const s = connect(socketPath, () => s.write(bytes));
    const d = new FrameDecoder();
    s.on("data", (c: Buffer) => {
      const f = d.push(c)[0];
      if (f) {
        resolve(fromBinary(HostLaunchResponseSchema, f));
        s.destroy();
      }
    });
    s.on("error", reject);
  });
}

const token = () => readFileSync(hostTokenFile(socketPath), "utf8").trim();
const request = (specPath: string, t = token()) => encodeFrame(toBinary(HostLaunchRequestSchema, create(HostLaunchRequestSchema, { token: t, specPath })));

describe("supervisor host launch channel", () => {
  it("writes a 0600 token and listens in a 0700 directory; reports its PID namespace", () => {
    expect(statSync(hostTokenFile(socketPath)).mode & 0o777).toBe(0o600);
    expect(token()).toMatch(/^[0-9a-f]{64}$/);
    expect(host.pidNamespace).toBe(readPidNamespace("/proc", "self"));
  });

  it("refuses a wrong token (bad_token) and starts nothing", async () => {
    const run = join(dataDir, "r1");
    mkdirSync(run, { mode: 0o700 });
    writeFileSync(join(run, "spec.binpb"), "", { mode: 0o600 });
    const res = await raw(request(join(run, "spec.binpb"), "0".repeat(64)));
    expect([res.started, res.errorCode]).toEqual([false, "bad_token"]);
    expect(host.children.size).toBe(0);
  });

  it("refuses specs outside the data directory, non-private run dirs, used run dirs and invalid specs, each with its code", async () => {
    const outside = join(dir, "elsewhere");
    mkdirSync(outside, { mode: 0o700 });
    writeFileSync(join(outside, "spec.binpb"), "", { mode: 0o600 });
    expect((await raw(request(join(outside, "spec.binpb")))).errorCode).toBe("spec_path_outside_data_dir");
    expect((await raw(request(`${dataDir}/r1/../r1/spec.binpb`))).errorCode).toBe("invalid_argument");
    expect((await raw(request(join(dataDir, "r1", "other.binpb")))).errorCode).toBe("invalid_argument");
    expect((await raw(request("relative/spec.binpb"))).errorCode).toBe("invalid_argument");

    const open = join(dataDir, "r2");
    mkdirSync(open, { mode: 0o700 });
    chmodSync(open, 0o755);
    writeFileSync(join(open, "spec.binpb"), "", { mode: 0o600 });
    expect((await raw(request(join(open, "spec.binpb")))).errorCode).toBe("run_dir_not_private");

    const used = join(dataDir, "r3");
    mkdirSync(used, { mode: 0o700 });
    writeFileSync(join(used, "spec.binpb"), "", { mode: 0o600 });
    writeFileSync(join(used, "marker.binpb"), "", { mode: 0o600 });
    expect((await raw(request(join(used, "spec.binpb")))).errorCode).toBe("run_dir_used");

    // An empty spec decodes but names no job, commands or run dir.
    const res = await raw(request(join(dataDir, "r1", "spec.binpb")));
    expect(res.errorCode).toBe("spec_invalid");
    expect(res.errorMessage).toContain("job_id is empty");
    expect(existsSync(join(dataDir, "r1", "marker.binpb"))).toBe(false);
    expect(host.children.size).toBe(0);
  });

  it("refuses garbage and oversized frames", async () => {
    expect((await raw(encodeFrame(Buffer.from([0xff, 0xff, 0xff])))).errorCode).toBe("bad_frame");
    const big = Buffer.alloc(20_000, 0x41);
    expect((await raw(encodeFrame(big))).errorCode).toBe("frame_too_large");
  });

  it("the client maps a refusal to SupervisorLaunchError with the code", async () => {
    const err = await requestHostLaunch({ socketPath, tokenFile: hostTokenFile(socketPath) }, join(dir, "elsewhere", "spec.binpb"), 5000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SupervisorLaunchError);
    expect(String(err)).toContain("spec_path_outside_data_dir");
  });

  it("starts a warm supervisor for a fresh run directory below the data directory; refuses both or neither target and a used directory", async () => {
    const warmRequest = (fields: { specPath?: string; warmRunDir?: string }) => encodeFrame(toBinary(HostLaunchRequestSchema, create(HostLaunchRequestSchema, { token: token(), ...fields })));
    expect((await raw(warmRequest({}))).errorCode).toBe("invalid_argument");
    const fresh = join(dataDir, "w1");
    mkdirSync(fresh, { mode: 0o700 });
    expect((await raw(warmRequest({ specPath: join(dataDir, "r1", "spec.binpb"), warmRunDir: fresh })))).toMatchObject({ started: false, errorCode: "invalid_argument" });
    expect((await raw(warmRequest({ warmRunDir: join(dir, "elsewhere") })))).toMatchObject({ started: false, errorCode: "spec_path_outside_data_dir" });
    expect(host.children.size).toBe(0);
    const started = await requestHost({ socketPath, tokenFile: hostTokenFile(socketPath) }, { warmRunDir: fresh }, 15_000);
    const marker = fromBinary(WarmMarkerSchema, readFileSync(join(fresh, "warm.binpb")));
    expect(marker.supervisor?.pid).toBe(started.pid);
    expect(marker.pidNamespace).toBe(started.pidNamespace);
    expect(host.children.has(started.pid)).toBe(true);
    // The same directory again: used.
    expect((await raw(warmRequest({ warmRunDir: fresh })))).toMatchObject({ started: false, errorCode: "run_dir_used" });
    expect(await retireWarmSupervisor(fresh)).toBe(true);
    await host.idle();
    expect(host.children.size).toBe(0);
  });

  it("refuses a peer with another uid (SO_PEERCRED)", async () => {
    if (process.getuid?.() !== 0) throw new Error("this test needs root (it connects as another uid)");
    // A child running as nobody connects; the host answers peer_uid.
    // Asynchronously: the host answers from this very process's event loop.
    const { execFile } = await import("node:child_process");
    const { promisify } = await import("node:util");
    // Open the way (directories searchable, socket writable) so only SO_PEERCRED can refuse.
    chmodSync(dir, 0o711);
    chmodSync(dataDir, 0o711);
    chmodSync(socketPath, 0o777);
    try {
      const { stdout: out } = await promisify(execFile)(
        process.execPath,
        [
          "-e",
          `const s=require("node:net").connect(${JSON.stringify(socketPath)},()=>s.write(Buffer.from([0,0,0,0])));let b=Buffer.alloc(0);s.on("data",c=>{b=Buffer.concat([b,c])});s.on("close",()=>process.stdout.write(b.subarray(4).toString("base64")));s.on("error",e=>process.stdout.write("ERR "+e.code))`,
        ],
        { uid: 65534, gid: 65534, encoding: "utf8", timeout: 10_000 },
      );
      expect(out.startsWith("ERR")).toBe(false);
      expect(fromBinary(HostLaunchResponseSchema, Buffer.from(out, "base64")).errorCode).toBe("peer_uid");
    } finally {
      chmodSync(socketPath, 0o755);
      chmodSync(dataDir, 0o700);
      chmodSync(dir, 0o700);
    }
    expect(host.children.size).toBe(0);
  });
});

describe("supervisor host start", () => {
  it("refuses to start without its supervisor bundle, naming the file and `npm run build`, and creates no socket", async () => {
    const otherSocket = join(dir, "other", "host.sock");
    const entry = join(dir, "no-bundle", "supervisor.mjs");
    const err = await startSupervisorHost({ socketPath: otherSocket, dataDir, log, native: createNativeSystem(), supervisorEntry: entry }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err).toBeInstanceOf(SupervisorBundleMissingError);
    expect(err?.message).toBe(`the supervisor host cannot start supervisors: the per-job supervisor bundle ${entry} is missing; run \`npm run build\` (it builds the bundle, \`tsc -b\` does not)`);
    expect(existsSync(otherSocket)).toBe(false);
    expect(existsSync(hostTokenFile(otherSocket))).toBe(false);
  });
});
