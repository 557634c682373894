// Real processes as root: a job's commands under a job user, with and without a network namespace
// of the job's own. Reproduces the attack first (an approved job reached a port on the host's
// loopback, where a database trusted it), then proves the namespace: no host port, no host
// address, only its own loopback (up). CI runs as root; without root these tests fail there.
import { readlinkSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { networkInterfaces } from "node:os";
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { JobUserSchema, Outcome, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { readFacilityReport } from "./facility.js";
import { runToReceipt } from "./run-to-receipt.js";
import { facilityGate, newTag, processesTagged, removeScenarioRunDirs, scenarioSpec } from "../../testing/supervisor-test-kit.js";

const skipReason = await facilityGate();
const isRoot = process.geteuid?.() === 0;
if (!isRoot && process.env["CI"] === "true") throw new Error("the network namespace tests need root in CI");
const skip = skipReason !== undefined || !isRoot;

let nextUid = 64_700 + Math.floor(Math.random() * 200);

/** A non-loopback IPv4 address of this host, or undefined when it has none. */
const hostAddress = Object.values(networkInterfaces()).flat().find((a) => a !== undefined && a.family === "IPv4" && !a.internal)?.address;

// The job's probe: its namespace and interfaces, then a connection to the host's listener on
// loopback and on the host's address, then a server of its own on 127.0.0.1 that it connects to.
const PROBE = `
const net = require("net"), fs = require("fs");
const out = (k, v) => console.log(k + "=" + v);
out("ns", fs.readlinkSync("/proc/self/ns/net"));
out("ifaces", fs.readFileSync("/proc/net/dev", "utf8").split("\\n").slice(2).map((l) => l.split(":")[0].trim()).filter(Boolean).join(","));
const [port, addr] = [Number(process.argv[1]), process.argv[2]];
const attempt = (name, host, p, next) => {
  const c = net.connect({ port: p, host, timeout: 3000 });
  c.on("connect", () => { out(name, "connected"); c.destroy(); next(); });
  c.on("timeout", () => { out(name, "timeout"); c.destroy(); next(); });
  c.on("error", (e) => { out(name, e.code); next(); });
};
const local = () => {
  const s = net.createServer((k) => k.end("pong")).listen(0, "127.0.0.1", () => {
    const k = net.connect(s.address().port, "127.0.0.1");
    k.on("data", (d) => { out("loopback", String(d)); k.destroy(); s.close(); });
    k.on("error", (e) => { out("loopback", e.code); s.close(); });
  });
};
attempt("host_loopback", "127.0.0.1", port, () => addr ? attempt("host_address", addr, port, local) : local());
`;

function jobSpec(tag: string, port: number, isolate: boolean, commands = 1): SupervisorSpec {
  const argv = [process.execPath, "-e", PROBE, String(port), hostAddress ?? ""];
  const spec = scenarioSpec({ tag, commands: Array.from({ length: commands }, () => ({ argv })) });
  const uid = nextUid++;
  spec.jobUser = create(JobUserSchema, { uid, gid: uid, name: "" });
  spec.isolateNetwork = isolate;
  return spec;
}

async function run(spec: SupervisorSpec): Promise<{ receipt: Awaited<ReturnType<typeof runToReceipt>>; lines: Map<string, string>; stdout: string }> {
  const chunks: Uint8Array[] = [];
  const receipt = await runToReceipt(spec, { onOutput: (c) => void (c.stream === "stdout" && chunks.push(c.data)) });
  const stdout = Buffer.concat(chunks).toString("utf8");
  const lines = new Map<string, string>();
  for (const line of stdout.split("\n")) {
    const eq = line.indexOf("=");
    if (eq > 0) lines.set(line.slice(0, eq), line.slice(eq + 1));
  }
  return { receipt, lines, stdout };
}

describe.skipIf(skip)("containment: the job's network", () => {
  let server: Server;
  let port = 0;
  let accepted = 0;
  beforeAll(async () => {
    // A service of the host: every address, like a database or NATS on loopback and beyond.
    server = createServer((c) => {
      accepted++;
      c.end("service");
    });
    await new Promise<void>((r) => server.listen(0, "0.0.0.0", r));
    port = (server.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
    removeScenarioRunDirs();
  });

  test("reproduced: without a namespace of its own, a job user's command reaches a service on the host's loopback and address", async () => {
    const before = accepted;
    const tag = newTag();
    const { receipt, lines } = await run(jobSpec(tag, port, false));
    expect(receipt.outcome, receipt.message).toBe(Outcome.SUCCEEDED);
    expect(lines.get("ns")).toBe(readlinkSync("/proc/self/ns/net"));
    expect(lines.get("host_loopback")).toBe("connected");
    if (hostAddress !== undefined) expect(lines.get("host_address")).toBe("connected");
    expect(accepted).toBeGreaterThan(before);
    expect(receipt.containment?.networkIsolated).toBe(false);
    expect(receipt.containment?.networkNamespace).toBe("");
    expect(processesTagged(tag)).toEqual([]);
  });

  test("isolate_network: the command has only its own loopback (up): the host's port is refused, its address unreachable, a server of its own works", async () => {
    const before = accepted;
    const tag = newTag();
    const { receipt, lines } = await run(jobSpec(tag, port, true));
    expect(receipt.outcome, receipt.message).toBe(Outcome.SUCCEEDED);
    const own = receipt.containment?.networkNamespace ?? "";
    expect(receipt.containment?.networkIsolated).toBe(true);
    expect(own).toMatch(/^net:\[\d+\]$/);
    expect(own).not.toBe(readlinkSync("/proc/self/ns/net"));
    expect(lines.get("ns")).toBe(own);
    expect(receipt.containment?.networkInterfaces).toEqual(["lo"]);
    expect(lines.get("ifaces")).toBe("lo");
    expect(lines.get("host_loopback")).toBe("ECONNREFUSED");
    if (hostAddress !== undefined) expect(lines.get("host_address")).toBe("ENETUNREACH");
    expect(lines.get("loopback")).toBe("pong");
    expect(accepted).toBe(before);
    expect(processesTagged(tag)).toEqual([]);
  });

  test("two commands of one job share its namespace; another job gets another", async () => {
    const [first, second] = await Promise.all([run(jobSpec(newTag(), port, true, 2)), run(jobSpec(newTag(), port, true))]);
    expect(first.receipt.outcome, first.receipt.message).toBe(Outcome.SUCCEEDED);
    expect(first.receipt.commands.length).toBe(2);
    const seen = [...first.stdout.matchAll(/^ns=(.*)$/gm)].map((m) => m[1]);
    expect(seen).toEqual([first.receipt.containment?.networkNamespace, first.receipt.containment?.networkNamespace]);
    expect(second.receipt.containment?.networkNamespace).toMatch(/^net:\[\d+\]$/);
    expect(second.receipt.containment?.networkNamespace).not.toBe(first.receipt.containment?.networkNamespace);
  });

  test("the facility probe reports that this host can make a network namespace", async () => {
    const report = await readFacilityReport();
    expect(report.containment?.networkNamespace, report.containment?.notes.join("; ")).toBe(true);
  });
});
