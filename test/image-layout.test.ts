import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, chownSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createHash, createPublicKey } from "node:crypto";
import { tmpdir } from "node:os";
import { isAbsolute, join } from "node:path";
import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { createTestDatabase } from "@seraph/kit/testing";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { NodeService } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { RepairService, RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SandboxBackend, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findInPidNamespace, createJsTestProject, createPythonProject, fixAddPatch, fixPythonAddPatch } from "@seraph/executor-linux/testing";
import { FREE_METRICS_PORTS, stopProcess, waitServing, type ServiceProcess } from "./harness/cluster.js";
import { byBaseName, containerEnv, imageConfig, podSpec, renderOverlays, REPO as repo, workloads, type Obj } from "./harness/deploy.js";
import { NATS_SERVER_BIN } from "./harness/nats-server.js";
import { freePort } from "./harness/ports.js";

// The image's filesystem without a container engine: scripts/build-image-layout.mjs (what the
// Dockerfile's build stage runs) into a temporary directory, once for this file; then every
// container of the dev overlay that runs the image is started from that layout alone (its own
// node_modules, its compiled dist) as the kubelet would start it: the container's own command
// from the image's WORKDIR, the image's USER (or the container's runAsUser) and ENV, the
// container's environment as rendered (ConfigMap, generated Secrets, downward API), against
// the dev overlay's own NATS configuration and credentials, until its gRPC health answers
// SERVING. What differs from a cluster is listed in LOCAL and nowhere else: addresses (this
// machine's PostgreSQL, ports free here), and the volumes (directories here).

let out: string;
let app: string;
let overlays: ReturnType<typeof renderOverlays>;
let database: Awaited<ReturnType<typeof createTestDatabase>>;
let nats: ChildProcess;
let natsUrl = "";
const started: ChildProcess[] = [];
const namespaceInits: number[] = [];
const image = imageConfig();
/** The node image's PATH (the base image's ENV; the Dockerfile does not change it). */
const IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** An image path (absolute, e.g. /opt/node-v24.15.0/bin/node) in the layout. */
const inLayout = (p: string) => join(out, "root", p);

beforeAll(async () => {
  out = mkdtempSync(join(tmpdir(), "seraph-layout-"));
  chmodSync(out, 0o755);
  execFileSync(process.execPath, [join(repo, "scripts/build-image-layout.mjs"), join(out, "root")], { stdio: "pipe", timeout: 240_000 });
  app = inLayout(image.workdir);
  overlays = renderOverlays();
  database = await createTestDatabase();
  // The dev overlay's NATS: its rendered nats.conf and the generated passwords, on free ports.
  const ss = overlays.dev.find((o) => o.kind === "StatefulSet" && o.metadata.name === "seraph-nats")!;
  const c = podSpec(ss).containers[0];
  const [client, monitor] = [await freePort(), await freePort()];
  const conf = (byBaseName(overlays.dev, "ConfigMap", "seraph-nats-config")!["data"]["nats.conf"] as string)
    .replace(/^port: 4222$/m, `port: ${client}\nhost: 127.0.0.1`)
    .replace(/^http_port: 8222$/m, `http: "127.0.0.1:${monitor}"`)
    .replace("store_dir: /data/jetstream", `store_dir: ${join(out, "nats")}`);
  expect(conf).toContain(`port: ${client}`);
  expect(conf).toContain(join(out, "nats"));
  writeFileSync(join(out, "nats.conf"), conf);
  nats = spawn(NATS_SERVER_BIN, ["-c", join(out, "nats.conf")], { env: containerEnv(overlays.dev, c, { podIP: "127.0.0.1", nodeName: "layout-node" }), stdio: ["ignore", "ignore", "pipe"] });
  let natsErr = "";
  nats.stderr?.on("data", (b: Buffer) => (natsErr += b.toString()));
  // The container's readiness probe (httpGet on the monitor port).
  const ready = c.readinessProbe.httpGet.path as string;
  for (let i = 0; ; i++) {
    if (nats.exitCode !== null) throw new Error(`the dev NATS config did not start: ${natsErr}`);
    const ok = await fetch(`http://127.0.0.1:${monitor}${ready}`).then((r) => r.ok, () => false);
    if (ok) break;
    if (i > 200) throw new Error(`dev NATS not ready: ${natsErr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  natsUrl = `nats://127.0.0.1:${client}`;
}, 300_000);

afterAll(async () => {
  for (const pid of namespaceInits) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  for (const c of started.reverse()) await stopProcess(c);
  if (nats) await stopProcess(nats);
  await database?.drop();
  overlays?.close();
  if (out && process.env["SERAPH_KEEP_LAYOUT"] !== "1") rmSync(out, { recursive: true, force: true });
});

/** Whether `pid` is running (not a zombie). */
function alive(pid: number): boolean {
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));
  } catch {
    return false;
  }
}

/** Direct children of `pid`. */
function descendants(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(" ").filter((x) => x !== "").map(Number);
}

const devWorkload = (name: string): Obj => workloads(overlays.dev).find((w) => w.metadata.name === name)!;
const containerOf = (w: Obj, name: string) => podSpec(w).containers.find((c: { name: string }) => c.name === name);

/**
 * What the kubelet and the image give a container, here: the image's ENV (its paths in the
 * layout), the rendered environment, with each volume's mount path mapped to `volumes` and
 * the LOCAL overrides (named, and only these).
 */
function podEnv(w: Obj, c: any, volumes: Record<string, string>, local: Record<string, string>): Record<string, string> {
  const rendered = containerEnv(overlays.dev, c, { podIP: "127.0.0.1", nodeName: "layout-node" });
  const mounts: [string, string][] = (c.volumeMounts ?? []).filter((m: any) => m.mountPath !== "/tmp").map((m: any) => {
    expect(volumes[m.name], `${w.metadata.name}/${c.name}: a directory for volume ${m.name}`).toBeDefined();
    return [m.mountPath, volumes[m.name]!];
  });
  const map = (v: string) => {
    for (const [from, to] of mounts) if (v === from || v.startsWith(`${from}/`)) return to + v.slice(from.length);
    return v;
  };
  const env: Record<string, string> = { PATH: IMAGE_PATH, HOME: "/nonexistent" };
  for (const [k, v] of Object.entries(image.env)) env[k] = v.startsWith("/opt/") ? inLayout(v) : v;
  for (const [k, v] of Object.entries(rendered)) env[k] = map(v);
  for (const [k, v] of Object.entries({ ...FREE_METRICS_PORTS, ...local })) {
    expect(Object.keys(LOCAL_OVERRIDES), `${k} is a named local override`).toContain(k);
    env[k] = v;
  }
  return env;
}

/** The only variables set differently from the cluster, and why. */
const LOCAL_OVERRIDES: Record<string, string> = {
  DATABASE_URL: "this machine's PostgreSQL (a fresh database) instead of seraph-postgres",
  NATS_URL: "the dev NATS config started here, on a free port, instead of seraph-nats:4222",
  SERAPH_JOBS_URL: "the jobs service here, on its free port, instead of seraph-jobs:7410",
  SERAPH_API_URL: "the API here, on its free port, instead of seraph-api:7400",
  SERAPH_API_GRPC_PORT: "free ports on a shared machine (the manifests use the defaults)",
  SERAPH_API_HTTP_PORT: "",
  SERAPH_JOBS_GRPC_PORT: "",
  SERAPH_JOBS_HTTP_PORT: "",
  SERAPH_EXECUTOR_GRPC_PORT: "",
  SERAPH_EXECUTOR_HTTP_PORT: "",
  SERAPH_EXECUTOR_ADVERTISE_URL: "http://$(POD_IP):7420 with the free port",
  SERAPH_GATEWAY_GRPC_PORT: "",
  SERAPH_GATEWAY_HTTP_PORT: "",
  SERAPH_API_METRICS_PORT: "",
  SERAPH_JOBS_METRICS_PORT: "",
  SERAPH_EXECUTOR_METRICS_PORT: "",
  SERAPH_GATEWAY_METRICS_PORT: "",
};

/** Starts a container's command from the layout as uid:gid `as`, until its gRPC health is SERVING (unless `serving` is false). */
async function startContainer(w: Obj, c: any, env: Record<string, string>, grpcPort: number, serving = true): Promise<ServiceProcess> {
  const logFile = join(out, `${c.name}.log`);
  const log = createWriteStream(logFile);
  const sc = podSpec(w).securityContext ?? {};
  const uid = c.securityContext?.runAsUser ?? sc.runAsUser ?? image.user.uid;
  const gid = c.securityContext?.runAsGroup ?? sc.runAsGroup ?? image.user.gid;
  expect([uid, gid], `${w.metadata.name}/${c.name} runs as the image's user`).toEqual([image.user.uid, image.user.gid]);
  const [cmd, ...args] = c.command as string[];
  const child = spawn(cmd!, args, { uid, gid, cwd: app, env, stdio: ["ignore", "pipe", "pipe"] });
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  started.push(child);
  const p: ServiceProcess = { name: c.name, child, grpcUrl: `http://127.0.0.1:${grpcPort}`, grpcPort, httpPort: 0, logFile };
  if (serving) await waitServing(p, 60_000);
  return p;
}

describe("image layout (scripts/build-image-layout.mjs)", () => {
  it("holds production dependencies only, compiled code without tests or sources, the UI bundle and the pinned Node 24 runtime", () => {
    const modules = readdirSync(join(app, "node_modules"));
    const root = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { devDependencies: Record<string, string> };
    // A root devDependency is in the image only when a production package needs it too (yaml: tap-parser's tap-yaml).
    const needed = new Set<string>();
    const scan = (dir: string) => {
      for (const name of readdirSync(dir)) {
        if (name.startsWith(".")) continue;
        if (name.startsWith("@")) { scan(join(dir, name)); continue; }
        const manifest = join(dir, name, "package.json");
        if (!existsSync(manifest)) continue;
        const pkg = JSON.parse(readFileSync(manifest, "utf8")) as { dependencies?: Record<string, string>; optionalDependencies?: Record<string, string> };
        for (const d of Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies })) needed.add(d);
        if (existsSync(join(dir, name, "node_modules"))) scan(join(dir, name, "node_modules"));
      }
    };
    scan(join(app, "node_modules"));
    for (const dev of Object.keys(root.devDependencies)) {
      if (!needed.has(dev)) expect(existsSync(join(app, "node_modules", dev)), `devDependency ${dev}`).toBe(false);
    }
    expect(existsSync(join(app, "node_modules", "vitest")), "vitest").toBe(false);
    expect(modules).toContain("koffi");
    for (const ws of ["services/api", "services/jobs", "services/executor-linux", "services/ui-gateway", "packages/kit", "packages/proto"]) {
      expect(existsSync(join(app, ws, "dist"))).toBe(true);
      expect(existsSync(join(app, ws, "src"))).toBe(false);
    }
    const all = execFileSync("find", [app, "-path", join(app, "node_modules"), "-prune", "-o", "-type", "f", "-print"], { encoding: "utf8" }).split("\n");
    expect(all.filter((f) => f.endsWith(".test.js") || f.endsWith(".ts") && !f.endsWith(".d.ts"))).toEqual([]);
    // The UI bundle the gateway serves: index.html and the script it names.
    const index = readFileSync(join(app, "services/ui-gateway/public/index.html"), "utf8");
    const script = /<script[^>]+src="\/([^"]+\.js)"/.exec(index)?.[1];
    expect(script).toBeDefined();
    expect(existsSync(join(app, "services/ui-gateway/public", script!))).toBe(true);
    expect(existsSync(join(app, "services/executor-linux/dist/supervisor-host/main.js"))).toBe(true);
    const pinned = join(out, "root/opt/node-v24.15.0/bin/node");
    expect(execFileSync(pinned, ["--version"], { encoding: "utf8" }).trim()).toBe("v24.15.0");
    // The per-job supervisor's one bundled entry runs on the pinned runtime from the layout: it
    // loads koffi from the production node_modules and names exactly what it loaded.
    const bundle = join(app, "services/executor-linux/dist/supervisor-bundle/supervisor.mjs");
    const source = JSON.parse(execFileSync(pinned, [bundle, "--source"], { encoding: "utf8", env: {} })) as { entry: string; modules: string[]; sha256: string };
    expect(source.entry).toBe(bundle);
    expect(source.modules.every((m) => m.startsWith(join(app, "node_modules")))).toBe(true);
    expect(source.modules.some((m) => m.endsWith("/koffi.node"))).toBe(true);
    expect(source.sha256).toMatch(/^[0-9a-f]{64}$/);
  });

});

describe("the dev overlay's containers, started from the layout", () => {
  let hostMain: ChildProcess | undefined;
  let volumes: Record<string, string> = {};
  let hostEnv: Record<string, string> = {};
  let apiUrl = "";
  let settingsRevision = 0n;
  let agent: ServiceProcess | undefined;
  let startAgent: (() => Promise<ServiceProcess>) | undefined;
  let hostNamespace = "";

  /** The API as the operator (the token the API printed once), over one HTTP/2 session closed after `fn`. */
  async function asOperator<T>(fn: (api: { transport: Transport; repairs: Client<typeof RepairService> }) => Promise<T>): Promise<T> {
    const token = /Operator token \(shown once\): (\S+)/.exec(readFileSync(join(out, "api.log"), "utf8"))![1]!;
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    };
    const sessions = new Http2SessionManager(apiUrl);
    try {
      const transport = createGrpcTransport({ baseUrl: apiUrl, interceptors: [bearer], sessionManager: sessions });
      return await fn({ transport, repairs: createClient(RepairService, transport) });
    } finally {
      sessions.abort();
    }
  }

  /**
   * Registers `dir` (made readable by uid 10001, deploy/README.md's prerequisite), opens an
   * admitted repair for a new goal, proposes `patch` and approves exactly its document.
   */
  async function approvedRepair(
    api: { transport: Transport; repairs: Client<typeof RepairService> },
    o: { readonly dir: string; readonly title: string; readonly sourcePaths: string[]; readonly allowed: string[]; readonly selection: string; readonly patch: string },
  ): Promise<{ repairId: string; nodeId: string; runtimePath: string }> {
    execFileSync("chmod", ["-R", "a+rX", o.dir]);
    const { repository } = await createClient(RepositoryService, api.transport).registerRepository({ path: o.dir });
    const { goal } = await createClient(GoalService, api.transport).createGoal({ title: o.title });
    const { repair } = await api.repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: o.sourcePaths, allowedPatchPaths: o.allowed, acceptanceCriteria: "tests pass", selection: o.selection });
    expect(RepairState[repair!.state], JSON.stringify(repair!.inspection?.reasons ?? [])).toBe("INSPECTED");
    const { proposal } = await api.repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: o.patch } });
    const { document } = await api.repairs.getApprovalDocument({ repairId: repair!.id, proposalId: proposal!.id });
    await api.repairs.approve({ repairId: repair!.id, documentSha256: document!.documentSha256 });
    return { repairId: repair!.id, nodeId: repository!.nodeId, runtimePath: document!.runtimePath };
  }

  /** Follows the repair until FINISHED; returns its last view. */
  async function finished(repairs: Client<typeof RepairService>, repairId: string): Promise<Repair> {
    let last: Repair | undefined;
    for await (const m of repairs.watchRepair({ repairId }, { timeoutMs: 120_000 })) {
      last = m.repair;
      if (last?.state === RepairState.FINISHED) break;
    }
    return last!;
  }

  /** A failing JS fixture (fixed by fixAddPatch) whose one test takes `ms`. */
  function slowJsProject(ms: number) {
    return createJsTestProject({
      parent: volumes["repositories"]!,
      failing: true,
      scripts: { test: "node --test test/slow.test.js" },
      extraFiles: {
        "test/slow.test.js": ['import test from "node:test";', 'import assert from "node:assert/strict";', 'import { add } from "../src/math.js";', `test("slow add", async () => { await new Promise((r) => setTimeout(r, ${ms})); assert.equal(add(2, 3), 5); });`, ""].join("\n"),
      },
    });
  }

  /**
   * Starts the supervisor-host container's command as the kubelet would: as root, with the
   * container's capabilities as the bounding set and nothing inheritable, from WORKDIR; resolves
   * once the launch socket's token exists (the host listens).
   */
  async function startHostContainer(logName: string): Promise<ChildProcess> {
    const hostC = containerOf(devWorkload("seraph-executor"), "supervisor-host");
    const socket = hostEnv["SERAPH_SUPERVISOR_HOST_SOCKET"]!;
    // A host killed by SIGKILL leaves its token file behind; the new one writes a fresh one.
    rmSync(`${socket}.token`, { force: true });
    const caps = (hostC.securityContext.capabilities.add as string[]).map((c) => `+${c.toLowerCase()}`).join(",");
    const main = spawn("setpriv", ["--inh-caps=-all", `--bounding-set=-all,${caps}`, "--", ...(hostC.command as string[])], { cwd: app, env: hostEnv, stdio: ["ignore", "pipe", "pipe"] });
    let hostErr = "";
    const hostLog = createWriteStream(join(out, logName));
    main.stdout?.pipe(hostLog);
    main.stderr?.on("data", (c: Buffer) => {
      hostErr += c.toString();
      hostLog.write(c);
    });
    started.push(main);
    await expect.poll(() => existsSync(`${socket}.token`) || main.exitCode !== null, { timeout: 15_000 }).toBe(true);
    expect(existsSync(`${socket}.token`), hostErr).toBe(true);
    return main;
  }

  it("jobs, api, the executor pod (the supervisor host by its container command with exactly its capabilities, the agent as uid 10001) and the UI gateway each start to SERVING with the rendered environment", async () => {
    if (process.getuid?.() !== 0) throw new Error("this test needs root (the supervisor host's wrapper and uid 10001)");
    const [jg, jh, ag, ah, eg, eh, gg, gh] = await Promise.all(Array.from({ length: 8 }, () => freePort()));
    const url = (port: number) => `http://127.0.0.1:${port}`;

    const jobsW = devWorkload("seraph-jobs");
    const jobsC = containerOf(jobsW, "jobs");
    const jobs = await startContainer(jobsW, jobsC, podEnv(jobsW, jobsC, {}, { DATABASE_URL: database.url, NATS_URL: natsUrl, SERAPH_JOBS_GRPC_PORT: `${jg}`, SERAPH_JOBS_HTTP_PORT: `${jh}` }), jg!);

    const apiW = devWorkload("seraph-api");
    const apiC = containerOf(apiW, "api");
    apiUrl = (await startContainer(apiW, apiC, podEnv(apiW, apiC, {}, { DATABASE_URL: database.url, NATS_URL: natsUrl, SERAPH_JOBS_URL: jobs.grpcUrl, SERAPH_API_GRPC_PORT: `${ag}`, SERAPH_API_HTTP_PORT: `${ah}` }), ag!)).grpcUrl;
    // No token file is configured: the first API start prints the operator's token, once (deploy/README.md).
    await expect.poll(() => readFileSync(join(out, "api.log"), "utf8"), { timeout: 10_000 }).toMatch(/Operator token \(shown once\): \S+/);

    // The executor pod: its volumes as directories (the hostPath run directory 0700 and owned
    // by uid 10001, as the init container leaves it), the supervisor host started by its
    // container's command as root with exactly the container's capabilities (the bounding
    // set; nothing inheritable), the agent as uid 10001.
    const ds = devWorkload("seraph-executor");
    volumes = { run: join(out, "executor"), repositories: join(out, "repositories") };
    mkdirSync(volumes["run"]!, { mode: 0o700 });
    chownSync(volumes["run"]!, image.user.uid, image.user.gid);
    mkdirSync(volumes["repositories"]!, { mode: 0o755 });
    const init = podSpec(ds).initContainers.find((c: { name: string }) => c.name === "prepare-run-dir");
    expect(init.command.join(" "), "the init container leaves the run directory as prepared here").toBe(`sh -c chown ${image.user.uid}:${image.user.gid} /var/lib/seraph-executor && chmod 0700 /var/lib/seraph-executor`);
    const hostC = containerOf(ds, "supervisor-host");
    hostEnv = podEnv(ds, hostC, volumes, {});
    const socket = hostEnv["SERAPH_SUPERVISOR_HOST_SOCKET"]!;
    expect(socket.startsWith(volumes["run"]! + "/")).toBe(true);
    const caps = (hostC.securityContext.capabilities.add as string[]).map((c) => `+${c.toLowerCase()}`).join(",");
    expect(hostC.securityContext.runAsUser).toBe(0);
    hostMain = await startHostContainer("supervisor-host.log");
    // The container's main process (outer tini, root, exactly the granted capabilities) →
    // unshare → the namespace's init (tini, uid 10001, no capabilities, no_new_privs) → the host.
    const status = (pid: number) => readFileSync(`/proc/${pid}/status`, "utf8");
    const capMask = (hostC.securityContext.capabilities.add as string[]).reduce((m, c) => m | (1n << BigInt(CAP_NUMBERS[c]!)), 0n);
    expect(status(hostMain.pid!)).toMatch(new RegExp(`^CapEff:\\s+${capMask.toString(16).padStart(16, "0")}$`, "m"));
    const unshare = descendants(hostMain.pid!)[0]!;
    const tini = descendants(unshare)[0]!;
    // setpriv's uid change clears unshare's parent-death signal: stop tini (and so its whole
    // namespace) by pid at the end.
    namespaceInits.push(tini);
    expect(status(tini)).toMatch(/^NSpid:\s+\d+\s+1$/m);
    expect(status(tini)).toMatch(/^Uid:\s+10001\s+10001\s+10001\s+10001$/m);
    // No capability in any set it could use; the bounding set stays the container's (dropping
    // from it needs CAP_SETPCAP), and no_new_privs keeps any execve from regaining one.
    for (const set of ["CapInh", "CapPrm", "CapEff", "CapAmb"]) expect(status(tini)).toMatch(new RegExp(`^${set}:\\s+0+$`, "m"));
    expect(status(tini)).toMatch(/^NoNewPrivs:\s+1$/m);
    expect(readlinkSync(`/proc/${tini}/ns/pid`)).not.toBe(readlinkSync("/proc/self/ns/pid"));
    const hostPid = descendants(tini)[0]!;
    hostNamespace = readlinkSync(`/proc/${tini}/ns/pid`);
    expect(status(hostPid)).toMatch(/^Uid:\s+10001\s+10001\s+10001\s+10001$/m);
    expect(status(hostPid)).toMatch(/^NSpid:\s+\d+\s+2$/m);
    expect(statSync(`${socket}.token`).uid).toBe(10001);
    // The container's probe commands, run as the kubelet runs them: in the container, as its
    // user (root) with its capabilities. The host must see its own uid: a probe it refuses is
    // a warning every period (and once crashed it: a refused peer gone before the refusal was
    // written). Connections are accepted in order, so a refusal of a probe is logged before
    // the bad_token refusal of the client that follows them.
    for (const probe of [hostC.startupProbe, hostC.readinessProbe, hostC.livenessProbe]) {
      execFileSync("setpriv", ["--inh-caps=-all", `--bounding-set=-all,${caps}`, "--", ...(probe.exec.command as string[])], { cwd: app, env: hostEnv, timeout: 10_000 });
    }
    const frame = "const b = Buffer.from([10, 1, 120]); const f = Buffer.alloc(4); f.writeUInt32BE(b.length); require('net').connect(process.argv[1]).end(Buffer.concat([f, b]));";
    execFileSync("setpriv", ["--reuid=10001", "--regid=10001", "--clear-groups", "--", "/usr/bin/node", "-e", frame, socket], { timeout: 10_000 });
    await expect.poll(() => readFileSync(join(out, "supervisor-host.log"), "utf8"), { timeout: 10_000 }).toContain('"code":"bad_token"');
    expect(readFileSync(join(out, "supervisor-host.log"), "utf8").match(/"event":"launch_refused","code":"[a-z_]+"/g)).toEqual(['"event":"launch_refused","code":"bad_token"']);
    expect(alive(hostPid), "the host outlives its probes").toBe(true);

    const agentC = containerOf(ds, "executor");
    const agentEnv = podEnv(ds, agentC, volumes, { NATS_URL: natsUrl, SERAPH_JOBS_URL: jobs.grpcUrl, SERAPH_EXECUTOR_GRPC_PORT: `${eg}`, SERAPH_EXECUTOR_HTTP_PORT: `${eh}`, SERAPH_EXECUTOR_ADVERTISE_URL: url(eg!) });
    expect(agentEnv["SERAPH_SUPERVISOR_HOST_SOCKET"]).toBe(socket);
    expect(agentEnv["SERAPH_NODE_ID"]).toBe("layout-node");
    startAgent = () => startContainer(ds, agentC, agentEnv, eg!);
    // A new node: its key (generated in the run directory at first start) is pending and the agent
    // NOT_SERVING until the instance operator approves exactly its fingerprint (deploy/README.md).
    const pending = await startContainer(ds, agentC, agentEnv, eg!, false);
    const fingerprint = await asOperator(async ({ transport }) => {
      const nodes = createClient(NodeService, transport);
      await expect.poll(async () => (await nodes.listNodes({})).pending.map((n) => n.nodeId), { timeout: 60_000 }).toContain("layout-node");
      const listed = (await nodes.listNodes({})).pending.find((n) => n.nodeId === "layout-node")!.keyFingerprint;
      // The SHA-256 of the key's SPKI DER, as `openssl pkey -pubin -outform DER | sha256sum` prints it.
      const der = createPublicKey(readFileSync(join(agentEnv["SERAPH_EXECUTOR_DATA_DIR"]!, "node-key.pub"), "utf8")).export({ type: "spki", format: "der" });
      expect(listed).toBe(createHash("sha256").update(der).digest("hex"));
      expect((await nodes.approveNode({ nodeId: "layout-node", fingerprint: listed })).approved).toBe(true);
      return listed;
    });
    await waitServing(pending, 60_000);
    agent = pending;
    expect(fingerprint).toMatch(/^[0-9a-f]{64}$/);
    // The agent delegated its warm supervisor to the host: it runs in the host's namespace.
    await expect.poll(() => (existsSync(`/proc/${hostPid}`) ? descendants(hostPid).length : -1), { timeout: 20_000 }).toBeGreaterThan(0);

    const gwW = devWorkload("seraph-ui-gateway");
    const gwC = containerOf(gwW, "ui-gateway");
    await startContainer(gwW, gwC, podEnv(gwW, gwC, {}, { SERAPH_API_URL: url(ag!), SERAPH_GATEWAY_GRPC_PORT: `${gg}`, SERAPH_GATEWAY_HTTP_PORT: `${gh}` }), gg!);
    // The gateway serves the bundled UI from the layout.
    const page = await fetch(`http://127.0.0.1:${gh}/`);
    expect(page.status).toBe(200);
    const html = await page.text();
    const src = /<script[^>]+src="([^"]+\.js)"/.exec(html)?.[1];
    expect(src).toBeDefined();
    expect((await fetch(`http://127.0.0.1:${gh}${src}`)).status).toBe(200);
  }, 180_000);

  it("a repair's job runs in that executor pod to SUCCEEDED: approved for the image's pinned runtime, its supervisor in the (uid 10001) host's PID namespace", async () => {
    expect(apiUrl, "the previous test started the services").not.toBe("");
    await asOperator(async ({ transport, repairs }) => {
      // As deploy/README.md has the operator do it: the runtime the image sets for the supervisors.
      const runtime = inLayout(image.env["SERAPH_SUPERVISOR_RUNTIME"]!);
      settingsRevision = (await createClient(SettingsService, transport).updateSandboxSettings({ expectedRevision: 0n, settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: runtime, enabled: true } })).settings!.revision;
      // A repository on the node, readable by uid 10001 (deploy/README.md, prerequisites).
      const repo = await createJsTestProject({ parent: volumes["repositories"]!, failing: true });
      const r = await approvedRepair({ transport, repairs }, { dir: repo.dir, title: "layout", sourcePaths: ["src", "test"], allowed: ["src"], selection: "npm test", patch: fixAddPatch("js") });
      expect(r.nodeId).toBe("layout-node");
      expect(r.runtimePath).toBe(runtime);
      const last = await finished(repairs, r.repairId);
      const job = last.job!;
      expect([RepairState[last.state], JobState[job.state], job.outcome]).toEqual(["FINISHED", "SUCCEEDED", "succeeded"]);
      expect(job.marker?.pidNamespace).toBe(hostNamespace);
      expect(job.marker?.observerPidNamespace).toBe(readlinkSync("/proc/self/ns/pid"));
      expect(job.receipt?.echildObserved).toBe(true);
    });
  }, 180_000);

  it("the agent container is killed mid-job and restarted by its command: the supervisor in the host's namespace survives, the new agent re-adopts the job and it finishes", async () => {
    expect(agent, "the services are running").toBeDefined();
    await asOperator(async ({ transport, repairs }) => {
      const repo = await slowJsProject(6000);
      const { repairId } = await approvedRepair({ transport, repairs }, { dir: repo.dir, title: "layout agent restart", sourcePaths: ["src", "test"], allowed: ["src"], selection: "npm test", patch: fixAddPatch("js") });
      const jobOf = async () => (await repairs.getRepair({ repairId })).repair?.job;
      await expect.poll(async () => JobState[(await jobOf())?.state ?? 0], { timeout: 60_000, interval: 200 }).toBe("RUNNING");
      await expect.poll(async () => (await jobOf())?.marker?.pidNamespace, { timeout: 10_000, interval: 200 }).toBe(hostNamespace);
      const running = (await jobOf())!;
      const supervisor = findInPidNamespace("/proc", running.marker!.pidNamespace, running.marker!.supervisor!.pid)!;
      expect(descendants(agent!.child.pid!)).not.toContain(supervisor);

      const gone = new Promise<void>((res) => agent!.child.once("exit", () => res()));
      agent!.child.kill("SIGKILL");
      await gone;
      expect(alive(supervisor), "the supervisor outlives the agent container").toBe(true);
      agent = await startAgent!();
      const last = await finished(repairs, repairId);
      const job = last.job!;
      expect([RepairState[last.state], JobState[job.state], job.outcome]).toEqual(["FINISHED", "SUCCEEDED", "succeeded"]);
      expect(job.fence, "re-adopted under a new fence").not.toBe(running.fence);
      expect(job.receipt?.marker?.supervisor?.pid).toBe(running.marker!.supervisor!.pid);
    });
  }, 180_000);

  it("a Python repair's job (the default profile, on the image's Debian /usr/bin/python3) runs in that executor pod to SUCCEEDED", async () => {
    expect(settingsRevision, "the previous test set the settings").toBeGreaterThan(0n);
    // The image installs Debian bookworm's python3 (Dockerfile); this machine is bookworm, and
    // its /usr/bin/python3 comes from the same package.
    expect(aptPackages()).toContain("python3");
    expect(debianPackageOf("python3")).toMatch(/^python3(\.11)?(-minimal)?$/);
    const python = "/usr/bin/python3";
    await asOperator(async ({ transport, repairs }) => {
      settingsRevision = (await createClient(SettingsService, transport).updateSandboxSettings({ expectedRevision: settingsRevision, settings: { backend: SandboxBackend.LOCAL, profile: "repo-python3-v1", runtimePath: python, enabled: true } })).settings!.revision;
      const repo = await createPythonProject({ parent: volumes["repositories"]!, failing: true });
      const r = await approvedRepair({ transport, repairs }, { dir: repo.dir, title: "layout python", sourcePaths: ["calc", "tests"], allowed: ["calc"], selection: "python -m unittest tests/test_ops.py", patch: fixPythonAddPatch() });
      expect(r.runtimePath).toBe(python);
      const last = await finished(repairs, r.repairId);
      const job = last.job!;
      expect([RepairState[last.state], JobState[job.state], job.outcome]).toEqual(["FINISHED", "SUCCEEDED", "succeeded"]);
      expect(job.marker?.pidNamespace).toBe(hostNamespace);
    });
  }, 180_000);

  it("the supervisor dies mid-job, then the host's init: recovery through the API refuses while the namespace (with the job's orphans) lives, and releases the slot once the uid-10001 agent observes it gone", async () => {
    expect(settingsRevision, "the previous tests set the settings").toBeGreaterThan(1n);
    await asOperator(async ({ transport, repairs }) => {
      const runtime = inLayout(image.env["SERAPH_SUPERVISOR_RUNTIME"]!);
      settingsRevision = (await createClient(SettingsService, transport).updateSandboxSettings({ expectedRevision: settingsRevision, settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: runtime, enabled: true } })).settings!.revision;
      // A test that runs for a minute, so the job is certainly running when the host dies.
      const repo = await slowJsProject(60000);
      const { repairId } = await approvedRepair({ transport, repairs }, { dir: repo.dir, title: "layout host death", sourcePaths: ["src", "test"], allowed: ["src"], selection: "npm test", patch: fixAddPatch("js") });
      const jobOf = async () => (await repairs.getRepair({ repairId })).repair?.job;
      await expect.poll(async () => JobState[(await jobOf())?.state ?? 0], { timeout: 60_000, interval: 200 }).toBe("RUNNING");
      await expect.poll(async () => (await jobOf())?.marker?.pidNamespace, { timeout: 10_000, interval: 200 }).toBe(hostNamespace);

      // The supervisor alone dies (SIGKILL): the job is UNKNOWN, but its test processes, now
      // orphans of the namespace's init, still run there. No proof: the slot stays held.
      const marker = (await jobOf())!.marker!;
      const supervisor = findInPidNamespace("/proc", marker.pidNamespace, marker.supervisor!.pid)!;
      const tests = descendants(supervisor);
      expect(tests.length, "the job's processes").toBeGreaterThan(0);
      process.kill(supervisor, "SIGKILL");
      await expect.poll(async () => [JobState[(await jobOf())?.state ?? 0], (await jobOf())?.outcome, (await jobOf())?.slotHeld], { timeout: 30_000, interval: 200 }).toEqual(["UNKNOWN", "unknown_supervisor_lost", true]);
      expect(tests.some(alive), "a test process outlives its supervisor").toBe(true);
      const early = await repairs.recoverProcessCleanup({ repairId });
      expect([early.released, early.refusalCode]).toEqual([false, "no_cleanup_receipt"]);
      expect(early.repair?.job?.slotHeld).toBe(true);

      // The namespace's init (the inner tini) dies: the kernel kills everything in it, and the
      // container's main process (outer tini) ends with it, as a crashed container would.
      const tini = descendants(descendants(hostMain!.pid!)[0]!)[0]!;
      expect(readlinkSync(`/proc/${tini}/ns/pid`)).toBe(hostNamespace);
      const exited = new Promise<void>((res) => (hostMain!.exitCode !== null || hostMain!.signalCode !== null ? res() : hostMain!.once("exit", () => res())));
      process.kill(tini, "SIGKILL");
      await exited;
      await expect.poll(() => tests.some(alive), { timeout: 10_000 }).toBe(false);

      // The agent (uid 10001, beside root wrappers it cannot inspect) observes the namespace
      // gone; recovery then releases the slot on that proof.
      let rec: Awaited<ReturnType<typeof repairs.recoverProcessCleanup>> | undefined;
      await expect.poll(async () => (rec = await repairs.recoverProcessCleanup({ repairId })).released, { timeout: 30_000, interval: 500 }).toBe(true);
      expect(rec!.repair?.job?.recovery).toMatchObject({ proof: "pid_namespace_gone", cleanupReceiptVerified: false, readbackScope: "process_cleanup_only" });
      expect([JobState[rec!.repair!.job!.state], rec!.repair!.job!.outcome, rec!.repair!.job!.slotHeld]).toEqual(["UNKNOWN", "unknown_supervisor_lost", false]);
    });
    // The kubelet restarts the container: a new host in a new namespace (whose inode number the
    // kernel may well reuse: deploy/README.md, the proof's limits).
    const before = namespaceInits.slice();
    hostMain = await startHostContainer("supervisor-host-2.log");
    const tini = descendants(descendants(hostMain.pid!)[0]!)[0]!;
    namespaceInits.push(tini);
    expect(before).not.toContain(tini);
    expect(readFileSync(`/proc/${tini}/status`, "utf8")).toMatch(/^NSpid:\s+\d+\s+1$/m);
  }, 240_000);

  it("SIGTERM to the supervisor-host container's main process (what the kubelet sends on a pod deletion) drains the host: the socket closes and the container's process exits 0", async () => {
    expect(hostMain, "the previous test started the supervisor host").toBeDefined();
    const socket = hostEnv["SERAPH_SUPERVISOR_HOST_SOCKET"]!;
    const exited = new Promise<number | null>((res) => (hostMain!.exitCode !== null ? res(hostMain!.exitCode) : hostMain!.once("exit", (code) => res(code))));
    hostMain!.kill("SIGTERM");
    await expect.poll(() => existsSync(socket), { timeout: 20_000 }).toBe(false);
    expect(await exited).toBe(0);
  }, 60_000);

  it("the supervisor host's command needs each capability it is granted", async () => {
    const ds = devWorkload("seraph-executor");
    const hostC = containerOf(ds, "supervisor-host");
    const granted = hostC.securityContext.capabilities.add as string[];
    expect([...granted].sort()).toEqual(["KILL", "SETGID", "SETUID", "SYS_ADMIN"]);
    const dir = join(out, "caps");
    mkdirSync(dir, { mode: 0o700 });
    chownSync(dir, image.user.uid, image.user.gid);
    const env = { ...hostEnv, SERAPH_EXECUTOR_DATA_DIR: dir, SERAPH_SUPERVISOR_HOST_SOCKET: join(dir, "s.sock") };
    const without = (cap: string) => ["--inh-caps=-all", `--bounding-set=-all,${granted.filter((c) => c !== cap).map((c) => `+${c.toLowerCase()}`).join(",")}`];
    // SYS_ADMIN (unshare), SETUID and SETGID (setpriv): without one, the command fails at once.
    const expected: Record<string, RegExp> = { SYS_ADMIN: /unshare failed|Operation not permitted/, SETUID: /setresuid failed|Operation not permitted/, SETGID: /setresgid failed|Operation not permitted/ };
    for (const [cap, message] of Object.entries(expected)) {
      let stderr = "";
      let failed = false;
      try {
        execFileSync("setpriv", [...without(cap), "--", ...(hostC.command as string[])], { cwd: app, env, stdio: "pipe", timeout: 20_000 });
      } catch (err) {
        failed = true;
        stderr = String((err as { stderr?: Buffer }).stderr ?? "");
      }
      expect(failed, `without ${cap}`).toBe(true);
      expect(stderr, `without ${cap}`).toMatch(message);
      expect(existsSync(join(dir, "s.sock.token")), `without ${cap} no host started`).toBe(false);
    }
    // KILL: the outer tini (uid 0) forwards the kubelet's SIGTERM to the namespace's init,
    // which is uid 10001: without CAP_KILL the kernel refuses that signal.
    const target = spawn("setpriv", ["--reuid=10001", "--regid=10001", "--clear-groups", "--", "sleep", "30"], { stdio: "ignore" });
    started.push(target);
    await expect.poll(() => readFileSync(`/proc/${target.pid}/status`, "utf8"), { timeout: 5000 }).toMatch(/^Uid:\s+10001\s/m);
    let refusal = "";
    try {
      execFileSync("setpriv", [...without("KILL"), "--", "kill", "-TERM", `${target.pid}`], { stdio: "pipe" });
    } catch (err) {
      refusal = String((err as { stderr?: Buffer }).stderr ?? "");
    }
    expect(refusal).toMatch(/Operation not permitted/);
    execFileSync("setpriv", ["--inh-caps=-all", `--bounding-set=-all,${granted.map((c) => `+${c.toLowerCase()}`).join(",")}`, "--", "kill", "-TERM", `${target.pid}`]);
    await new Promise<void>((res) => (target.exitCode !== null || target.signalCode !== null ? res() : target.once("exit", () => res())));
    expect(target.signalCode).toBe("SIGTERM");
  }, 60_000);

  it("every command, probe and hook of every container that runs the image, in both overlays, exists in the layout or the base image", () => {
    // Executables by name come from the base image (node: the node image; Essential Debian
    // packages, which every Debian image has) or from the Dockerfile's apt-get install; this
    // machine is Debian bookworm, as the base image, so dpkg here names the package.
    const aptInstalled = aptPackages();
    const wrappers: Record<string, (args: string[]) => string[] | undefined> = {
      tini: (a) => a.slice(a.indexOf("--") + 1),
      unshare: (a) => a.slice(a.indexOf("--") + 1),
      setpriv: (a) => a.slice(a.indexOf("--") + 1),
    };
    const checked = new Set<string>();
    const checkExecutable = (where: string, argv: string[]) => {
      const [exe, ...args] = argv;
      expect(exe, `${where}: a command`).toBeDefined();
      if (exe!.includes("/")) {
        expect(existsSync(isAbsolute(exe!) ? inLayout(exe!) : join(app, exe!)), `${where}: ${exe}`).toBe(true);
      } else if (exe === "node") {
        // The base image's node runs every service: its script must be in the layout.
        const script = args.find((a) => !a.startsWith("-"))!;
        expect(existsSync(join(app, script)), `${where}: node ${script} (from WORKDIR ${image.workdir})`).toBe(true);
      } else {
        const pkg = debianPackageOf(exe!);
        const essential = essentialOf(pkg);
        expect(essential === "yes" || aptInstalled.includes(pkg), `${where}: ${exe} (Debian package ${pkg}, Essential: ${essential}) is in the image`).toBe(true);
      }
      checked.add(exe!);
      const inner = wrappers[exe!]?.(args);
      if (inner) checkExecutable(where, inner);
      if ((exe === "sh" || exe === "bash") && args[0] === "-c") for (const part of args[1]!.split(/&&|\|\||;/)) checkExecutable(where, part.trim().split(/\s+/));
    };
    for (const objs of [overlays.dev, overlays.production]) {
      for (const w of workloads(objs)) {
        for (const c of [...podSpec(w).containers, ...(podSpec(w).initContainers ?? [])]) {
          if (!/(^|\/)seraph(:|$)/.test(c.image)) continue;
          const where = `${w.metadata.name}/${c.name}`;
          expect(c.workingDir ?? image.workdir, `${where} runs from the image's WORKDIR`).toBe(image.workdir);
          checkExecutable(`${where} command`, c.command ?? image.cmd);
          for (const [kind, probe] of Object.entries({ startup: c.startupProbe, readiness: c.readinessProbe, liveness: c.livenessProbe })) if (probe?.exec) checkExecutable(`${where} ${kind} probe`, probe.exec.command);
          for (const [kind, hook] of Object.entries(c.lifecycle ?? {})) if ((hook as any).exec) checkExecutable(`${where} ${kind}`, (hook as any).exec.command);
        }
      }
    }
    expect([...checked].sort()).toEqual(["chmod", "chown", "node", "setpriv", "sh", "sleep", "tini", "unshare"]);
  });
});

/** The packages the Dockerfile's runtime stage installs with apt-get. */
function aptPackages(): string[] {
  const docker = readFileSync(join(repo, "Dockerfile"), "utf8");
  const m = /apt-get install -y --no-install-recommends ([a-z0-9 .+-]+?) \\?\n?\s*&&/.exec(docker);
  if (!m) throw new Error("the Dockerfile installs no apt packages");
  return m[1]!.trim().split(/\s+/);
}

/** The Debian package that installs `exe` on this machine (merged /usr: dpkg records /bin paths). */
const packages = new Map<string, string>();
function debianPackageOf(exe: string): string {
  if (!packages.has(exe)) packages.set(exe, lookUpDebianPackage(exe));
  return packages.get(exe)!;
}
function lookUpDebianPackage(exe: string): string {
  const path = execFileSync("sh", ["-c", `command -v ${exe}`], { encoding: "utf8", env: { PATH: IMAGE_PATH } }).trim();
  const real = realpathSync(path);
  for (const candidate of new Set([path, path.replace(/^\/usr/, ""), real, real.replace(/^\/usr/, "")])) {
    let out = "";
    try {
      out = execFileSync("dpkg-query", ["-S", candidate], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
    } catch {
      continue;
    }
    const owner = out.split("\n").find((l) => !l.startsWith("diversion") && l.endsWith(`: ${candidate}`));
    if (owner) return owner.slice(0, owner.indexOf(":"));
  }
  throw new Error(`${exe} (${path}) belongs to no Debian package here`);
}

const essentials = new Map<string, string>();
/** Debian's Essential flag of an installed package ("yes" for those in every Debian image). */
function essentialOf(pkg: string): string {
  if (!essentials.has(pkg)) essentials.set(pkg, execFileSync("dpkg-query", ["-W", "-f", "${Essential}", pkg], { encoding: "utf8" }).trim());
  return essentials.get(pkg)!;
}

/** Linux capability numbers (linux/capability.h) of the capabilities the manifests grant. */
const CAP_NUMBERS: Record<string, number> = { CHOWN: 0, FOWNER: 3, KILL: 5, SETGID: 6, SETUID: 7, SYS_ADMIN: 21 };
