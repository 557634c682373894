import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createTestDatabase } from "@seraph/kit/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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
const internalToken = randomBytes(32).toString("hex");

beforeAll(async () => {
  out = mkdtempSync(join(tmpdir(), "seraph-layout-"));
  execFileSync(process.execPath, [join(repo, "scripts/build-image-layout.mjs"), join(out, "root")], { stdio: "pipe", timeout: 240_000 });
  app = join(out, "root/opt/seraph");
  nats = await startTestNats({ nodes: ["layout-node"] });
  database = await createTestDatabase();
}, 300_000);

afterAll(async () => {
  for (const c of started.reverse()) await stopProcess(c);
  await nats?.close();
  await database?.drop();
  if (out) rmSync(out, { recursive: true, force: true });
});

/** Starts `services/<service>/dist/main.js` of the layout with only `env` (plus PATH). */
async function startFromLayout(service: string, env: Record<string, string>, grpcPort: number): Promise<ServiceProcess> {
  const logFile = join(out, `${service}.log`);
  const log = createWriteStream(logFile);
  const child = spawn(process.execPath, [join("services", service, "dist/main.js")], {
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
    for (const dev of Object.keys(root.devDependencies)) expect(existsSync(join(app, "node_modules", dev)), `devDependency ${dev}`).toBe(false);
    expect(modules).toContain("koffi");
    for (const ws of ["services/api", "services/jobs", "services/executor-linux", "services/ui-gateway", "packages/kit", "packages/proto"]) {
      expect(existsSync(join(app, ws, "dist"))).toBe(true);
      expect(existsSync(join(app, ws, "src"))).toBe(false);
    }
    const all = execFileSync("find", [app, "-path", join(app, "node_modules"), "-prune", "-o", "-type", "f", "-print"], { encoding: "utf8" }).split("\n");
    expect(all.filter((f) => f.endsWith(".test.js") || f.endsWith(".ts") && !f.endsWith(".d.ts"))).toEqual([]);
    expect(existsSync(join(app, "services/ui-gateway/public/app.js"))).toBe(true);
    expect(existsSync(join(app, "services/executor-linux/dist/supervisor-host/main.js"))).toBe(true);
    const pinned = join(out, "root/opt/node-v24.15.0/bin/node");
    expect(execFileSync(pinned, ["--version"], { encoding: "utf8" }).trim()).toBe("v24.15.0");
  });

  it("jobs, api, executor (with its supervisor host) and the UI gateway each start from the layout to SERVING", async () => {
    const [jg, jh, ag, ah, eg, eh, gg, gh] = await Promise.all(Array.from({ length: 8 }, () => freePort()));
    const common = { DATABASE_URL: database.url, SERAPH_INTERNAL_TOKEN: internalToken };
    const jobs = await startFromLayout("jobs", { ...common, ...nats.env("jobs"), SERAPH_JOBS_GRPC_PORT: `${jg}`, SERAPH_JOBS_HTTP_PORT: `${jh}` }, jg!);
    await startFromLayout(
      "api",
      { ...common, ...nats.env("api"), SERAPH_API_GRPC_PORT: `${ag}`, SERAPH_API_HTTP_PORT: `${ah}`, SERAPH_JOBS_URL: jobs.grpcUrl, SERAPH_OPERATOR_TOKEN_FILE: join(out, "operator-token") },
      ag!,
    );
    const dataDir = join(out, "executor");
    mkdirSync(dataDir, { mode: 0o700 });
    const socket = join(dataDir, "host.sock");
    // The supervisor host, as the pod's supervisor-host container runs it (tini as PID 1).
    const host = spawn("/usr/bin/tini", ["--", process.execPath, "services/executor-linux/dist/supervisor-host/main.js"], {
      cwd: app,
      env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", SERAPH_SUPERVISOR_HOST_SOCKET: socket, SERAPH_EXECUTOR_DATA_DIR: dataDir },
      stdio: "ignore",
    });
    started.push(host);
    for (let i = 0; i < 200 && !existsSync(`${socket}.token`); i++) await new Promise((r) => setTimeout(r, 50));
    expect(existsSync(`${socket}.token`)).toBe(true);
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
      },
      eg!,
    );
    await startFromLayout("ui-gateway", { SERAPH_GATEWAY_GRPC_PORT: `${gg}`, SERAPH_GATEWAY_HTTP_PORT: `${gh}`, SERAPH_API_URL: `http://127.0.0.1:${ag}` }, gg!);
    // The gateway serves the bundled UI from the layout.
    const page = await fetch(`http://127.0.0.1:${gh}/`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("app.js");
  }, 180_000);
});
