import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createTestDatabase } from "@seraph/kit/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { startTestNats, type TestNatsServer } from "./harness/nats-server.js";
import { stopProcess, waitServing, type ServiceProcess } from "./harness/cluster.js";
import { freePort } from "./harness/ports.js";

// The image's filesystem without a container engine: scripts/build-image-layout.mjs (what the
// Dockerfile's build stage runs) into a temporary directory, once for this file; then every
// service is started from that layout alone (its own node_modules, its compiled dist) until
// its gRPC health check answers SERVING.

const repo = fileURLToPath(new URL("..", import.meta.url));
let out: string;
let app: string;
let nats: TestNatsServer;
let database: Awaited<ReturnType<typeof createTestDatabase>>;
const started: ChildProcess[] = [];
const namespaceInits: number[] = [];
const internalToken = randomBytes(32).toString("hex");

beforeAll(async () => {
  out = mkdtempSync(join(tmpdir(), "seraph-layout-"));
  execFileSync(process.execPath, [join(repo, "scripts/build-image-layout.mjs"), join(out, "root")], { stdio: "pipe", timeout: 240_000 });
  app = join(out, "root/opt/seraph");
  nats = await startTestNats({ nodes: ["layout-node"] });
  database = await createTestDatabase();
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
  await nats?.close();
  await database?.drop();
  if (out) rmSync(out, { recursive: true, force: true });
});

/** Direct children of `pid`. */
function descendants(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(" ").filter((x) => x !== "").map(Number);
}

/** Starts `services/<service>/dist/main.js` of the layout with only `env` (plus PATH). */
async function startFromLayout(service: string, env: Record<string, string>, grpcPort: number, as?: { uid: number; gid: number }): Promise<ServiceProcess> {
  const logFile = join(out, `${service}.log`);
  const log = createWriteStream(logFile);
  // /usr/bin/node: the test runner's own node may live where uid 10001 cannot reach it.
  const child = spawn(as ? "/usr/bin/node" : process.execPath, [join("services", service, "dist/main.js")], {
    ...(as ?? {}),
    cwd: app,
    env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", NODE_ENV: "production", LOG_LEVEL: "info", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  started.push(child);
  const p: ServiceProcess = { name: service, child, grpcUrl: `http://127.0.0.1:${grpcPort}`, grpcPort, httpPort: 0, logFile };
  await waitServing(p, 60_000);
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

  it("jobs, api, the executor pod (agent as uid 10001, the supervisor host by the manifest's own command) and the UI gateway each start from the layout to SERVING", async () => {
    if (process.getuid?.() !== 0) throw new Error("this test needs root (the supervisor host's wrapper and uid 10001)");
    const [jg, jh, ag, ah, eg, eh, gg, gh] = await Promise.all(Array.from({ length: 8 }, () => freePort()));
    const common = { DATABASE_URL: database.url, SERAPH_INTERNAL_TOKEN: internalToken };
    const jobs = await startFromLayout("jobs", { ...common, ...nats.env("jobs"), SERAPH_JOBS_GRPC_PORT: `${jg}`, SERAPH_JOBS_HTTP_PORT: `${jh}` }, jg!);
    await startFromLayout(
      "api",
      { ...common, ...nats.env("api"), SERAPH_API_GRPC_PORT: `${ag}`, SERAPH_API_HTTP_PORT: `${ah}`, SERAPH_JOBS_URL: jobs.grpcUrl, SERAPH_OPERATOR_TOKEN_FILE: join(out, "operator-token") },
      ag!,
    );
    // The executor pod as deploy/base/executor.yaml declares it: the supervisor host started by
    // exactly the container's command (root → unshare --pid --mount-proc → setpriv to uid 10001
    // → tini → the host), the agent as uid 10001, sharing a 0700 run directory owned by 10001.
    const pod = parseAllDocuments(readFileSync(join(repo, "deploy/base/executor.yaml"), "utf8"))[0]!.toJS().spec.template.spec;
    const containerOf = (name: string) => pod.containers.find((c: { name: string }) => c.name === name);
    const hostContainer = containerOf("supervisor-host");
    const envOf = (c: { env: { name: string; value?: string }[] }) => Object.fromEntries(c.env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
    const dataDir = join(out, "executor");
    mkdirSync(dataDir, { mode: 0o700 });
    chownSync(dataDir, 10001, 10001);
    chmodSync(out, 0o755);
    // The image sets SERAPH_SUPERVISOR_RUNTIME=/opt/node-v24.15.0/bin/node (Dockerfile); here the layout's copy.
    const supervisorRuntime = join(out, "root/opt/node-v24.15.0/bin/node");
    const hostEnv = { ...envOf(hostContainer), SERAPH_EXECUTOR_DATA_DIR: dataDir, SERAPH_SUPERVISOR_HOST_SOCKET: join(dataDir, "supervisor-host.sock"), SERAPH_SUPERVISOR_RUNTIME: supervisorRuntime };
    const socket = hostEnv.SERAPH_SUPERVISOR_HOST_SOCKET;
    const [cmd, ...args] = hostContainer.command as string[];
    const host = spawn(cmd!, args, { cwd: app, env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", ...hostEnv }, stdio: ["ignore", "ignore", "pipe"] });
    let hostErr = "";
    host.stderr?.on("data", (c: Buffer) => (hostErr += c.toString()));
    started.push(host);
    for (let i = 0; i < 200 && !existsSync(`${socket}.token`); i++) await new Promise((r) => setTimeout(r, 50));
    expect(existsSync(`${socket}.token`), hostErr).toBe(true);
    // Everything the host runs is uid 10001 in a PID namespace of its own, tini as its PID 1.
    const tini = descendants(host.pid!)[0]!;
    // setpriv's uid change clears unshare's parent-death signal: stop tini (and so its whole
    // namespace) by pid at the end.
    namespaceInits.push(tini);
    const status = (pid: number) => readFileSync(`/proc/${pid}/status`, "utf8");
    expect(status(tini)).toMatch(/^NSpid:\s+\d+\s+1$/m);
    expect(status(tini)).toMatch(/^Uid:\s+10001\s+10001\s+10001\s+10001$/m);
    expect(status(tini)).toMatch(/^CapEff:\s+0+$/m);
    expect(status(tini)).toMatch(/^NoNewPrivs:\s+1$/m);
    expect(readlinkSync(`/proc/${tini}/ns/pid`)).not.toBe(readlinkSync("/proc/self/ns/pid"));
    const hostPid = descendants(tini)[0]!;
    expect(status(hostPid)).toMatch(/^Uid:\s+10001\s+10001\s+10001\s+10001$/m);
    expect(status(hostPid)).toMatch(/^NSpid:\s+\d+\s+2$/m);
    expect(statSync(`${socket}.token`).uid).toBe(10001);
    // The container's probe command.
    const probe = hostContainer.readinessProbe.exec.command as string[];
    execFileSync(probe[0]!, probe.slice(1), { cwd: app, env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", ...hostEnv }, timeout: 10_000 });
    const agent = containerOf("executor");
    expect(envOf(agent)["SERAPH_SUPERVISOR_HOST_SOCKET"]).toBe(envOf(hostContainer)["SERAPH_SUPERVISOR_HOST_SOCKET"]);
    await startFromLayout(
      "executor-linux",
      {
        ...common,
        ...nats.env("executor", "layout-node"),
        SERAPH_EXECUTOR_GRPC_PORT: `${eg}`,
        SERAPH_EXECUTOR_HTTP_PORT: `${eh}`,
        SERAPH_JOBS_URL: jobs.grpcUrl,
        SERAPH_NODE_ID: "layout-node",
        SERAPH_EXECUTOR_DATA_DIR: dataDir,
        SERAPH_SUPERVISOR_HOST_SOCKET: socket,
        SERAPH_SUPERVISOR_RUNTIME: supervisorRuntime,
      },
      eg!,
      { uid: 10001, gid: 10001 },
    );
    await startFromLayout("ui-gateway", { SERAPH_GATEWAY_GRPC_PORT: `${gg}`, SERAPH_GATEWAY_HTTP_PORT: `${gh}`, SERAPH_API_URL: `http://127.0.0.1:${ag}` }, gg!);
    // The gateway serves the bundled UI from the layout.
    const page = await fetch(`http://127.0.0.1:${gh}/`);
    expect(page.status).toBe(200);
    const html = await page.text();
    const src = /<script[^>]+src="([^"]+\.js)"/.exec(html)?.[1];
    expect(src).toBeDefined();
    expect((await fetch(`http://127.0.0.1:${gh}${src}`)).status).toBe(200);
  }, 180_000);
});
