import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createWriteStream, existsSync } from "node:fs";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health, HealthCheckResponse_ServingStatus } from "@seraph/proto/grpc/health/v1/health_pb.js";
import { startTestNats, type TestNatsServer } from "./nats-server.js";
import { startTcpBalancer, type TcpBalancer } from "./balancer.js";
import { freePort } from "./ports.js";

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));

/** One service process of a test cluster. */
export interface ServiceProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly grpcUrl: string;
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly logFile: string;
}

/**
 * A cluster-mode Seraph: four processes against real PostgreSQL and a private, authenticated
 * nats-server (each service connects as its own user with only its subjects), on free ports.
 */
export interface TestCluster {
  readonly dir: string;
  readonly nats: TestNatsServer;
  readonly api: ServiceProcess;
  readonly jobs: ServiceProcess;
  /**
   * With `jobsReplicas`: every jobs replica (jobs is the first) behind {@link balancer}, which
   * the API and the executor use instead of a replica's own URL.
   */
  readonly jobsReplicas: ServiceProcess[];
  readonly balancer: TcpBalancer | undefined;
  /** Starts jobs replica `i` again on its ports (after a kill or stop) and waits for SERVING. */
  restartJobs(i: number): Promise<ServiceProcess>;
  /** The executor process (after {@link restartExecutor}, the new one). */
  readonly executor: ServiceProcess;
  /**
   * SIGKILLs the executor (the supervisors it started live on) and starts it again with the same
   * node id, data directory and ports (a new incarnation); waits for SERVING.
   */
  restartExecutor(): Promise<ServiceProcess>;
  readonly gateway: ServiceProcess;
  readonly operatorToken: string;
  /** The API's credential for the jobs service (only api and jobs hold it). */
  readonly internalToken: string;
  /** The API's credential for the executor (api and executor hold it). */
  readonly executorToken: string;
  /** SIGTERM each process by pid (reverse order, nats-server last), SIGKILL after a deadline; resolves when all exited. */
  stop(): Promise<void>;
}

/** Options for {@link startCluster}. */
export interface ClusterOptions {
  readonly databaseUrl: string;
  readonly repositoryRoots?: readonly string[];
  readonly nodeId?: string;
  readonly env?: Readonly<Record<string, string>>;
  /** Run this many jobs-service replicas behind a round-robin TCP balancer (default: one, no balancer). */
  readonly jobsReplicas?: number;
}

function entry(service: string): string {
  const file = join(repoRoot, "services", service, "dist", "main.js");
  if (!existsSync(file)) throw new Error(`${file} is missing: run \`npx tsc -b\` (npm test does) before the end-to-end tests`);
  return file;
}

/** Every service's `/metrics` on a free port (the defaults, 7409-7439, would collide between test files). */
export const FREE_METRICS_PORTS = { SERAPH_API_METRICS_PORT: "0", SERAPH_JOBS_METRICS_PORT: "0", SERAPH_EXECUTOR_METRICS_PORT: "0", SERAPH_GATEWAY_METRICS_PORT: "0" } as const;

/** Starts a service process with exactly `env` (plus PATH/HOME for node itself). */
export function spawnService(name: string, service: string, env: Record<string, string>, dir: string, grpcPort: number, httpPort: number): ServiceProcess {
  const logFile = join(dir, `${name}.log`);
  const out = createWriteStream(logFile);
  const child = spawn(process.execPath, [entry(service)], {
    env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", HOME: dir, LOG_LEVEL: "info", ...FREE_METRICS_PORTS, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.pipe(out);
  child.stderr?.pipe(out);
  return { name, child, grpcUrl: `http://127.0.0.1:${grpcPort}`, grpcPort, httpPort, logFile };
}

/** Waits until the process answers health SERVING, or fails with the tail of its log. */
export async function waitServing(p: ServiceProcess, timeoutMs = 90_000): Promise<void> {
  const client = createClient(Health, createGrpcTransport({ baseUrl: p.grpcUrl }));
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    if (p.child.exitCode !== null) break;
    try {
      const res = await client.check({ service: "" }, { timeoutMs: 1000 });
      if (res.status === HealthCheckResponse_ServingStatus.SERVING) return;
      last = `status ${res.status}`;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const log = await readFile(p.logFile, "utf8").catch(() => "");
  throw new Error(`${p.name} did not become SERVING (exit ${p.child.exitCode}, last: ${String(last)}):\n${log.slice(-3000)}`);
}

/** Stops one process by pid: SIGTERM, then SIGKILL after `graceMs`. */
export async function stopProcess(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}

/** Starts jobs, api, executor and gateway as four processes (cluster mode) and waits for SERVING. */
export async function startCluster(o: ClusterOptions): Promise<TestCluster> {
  const dir = await mkdtemp(join(tmpdir(), "seraph-cluster-"));
  const internalToken = randomBytes(32).toString("hex");
  const executorToken = randomBytes(32).toString("hex");
  // Every port in one batch of concurrent probes: concurrent binds to port 0 never get the same
  // port, so no two services (nor two jobs replicas) are handed one twice. Each probe closes its
  // socket before the service binds, so another process could still take a port meanwhile.
  const extra = 2 * Math.max(0, (o.jobsReplicas ?? 1) - 1);
  const ports = await Promise.all(Array.from({ length: 8 + extra }, () => freePort()));
  const [jg, jh, ag, ah, eg, eh, gg, gh] = ports;
  const nodeId = o.nodeId ?? "node-a";
  const nats = await startTestNats({ nodes: [nodeId] });
  // The executor never holds the API's jobs credential: it proves its jobs calls with its node key,
  // which this single-node test cluster enrols at first registration.
  const common = { DATABASE_URL: o.databaseUrl, ...o.env };
  const apiSide = { SERAPH_INTERNAL_TOKEN: internalToken, SERAPH_JOBS_AUTO_ENROL_NODES: "true", ...o.env };
  const started: ServiceProcess[] = [];
  const replicas: ServiceProcess[] = [];
  let balancer: TcpBalancer | undefined;
  const stop = async () => {
    for (const p of [...started].reverse()) await stopProcess(p.child);
    for (const p of replicas) await stopProcess(p.child);
    await balancer?.close();
    await nats.close();
  };
  const replicaPorts: [number, number][] = [[jg!, jh!]];
  for (let i = 1; i < (o.jobsReplicas ?? 1); i++) replicaPorts.push([ports[8 + 2 * (i - 1)]!, ports[9 + 2 * (i - 1)]!]);
  const spawnJobs = (i: number) => {
    const [g, h] = replicaPorts[i]!;
    return spawnService(i === 0 ? "jobs" : `jobs-${i}`, "jobs", { ...common, ...apiSide, ...nats.env("jobs"), SERAPH_JOBS_GRPC_PORT: `${g}`, SERAPH_JOBS_HTTP_PORT: `${h}` }, dir, g, h);
  };
  try {
    for (let i = 0; i < replicaPorts.length; i++) replicas.push(spawnJobs(i));
    const jobs = replicas[0]!;
    if (o.jobsReplicas !== undefined) balancer = await startTcpBalancer(() => replicaPorts.map(([g]) => g));
    const jobsUrl = balancer?.url ?? jobs.grpcUrl;
    const tokenFile = join(dir, "operator-token");
    const api = spawnService(
      "api",
      "api",
      { ...common, SERAPH_INTERNAL_TOKEN: internalToken, SERAPH_EXECUTOR_TOKEN: executorToken, ...o.env, ...nats.env("api"), SERAPH_API_GRPC_PORT: `${ag}`, SERAPH_API_HTTP_PORT: `${ah}`, SERAPH_JOBS_URL: jobsUrl, SERAPH_OPERATOR_TOKEN_FILE: tokenFile },
      dir,
      ag!,
      ah!,
    );
    started.push(api);
    let restarts = 0;
    const spawnExecutor = () =>
      spawnService(
        restarts === 0 ? "executor" : `executor-${restarts}`,
        "executor-linux",
        {
          ...common,
          SERAPH_EXECUTOR_TOKEN: executorToken,
          ...nats.env("executor", nodeId),
          SERAPH_EXECUTOR_GRPC_PORT: `${eg}`,
          SERAPH_EXECUTOR_HTTP_PORT: `${eh}`,
          SERAPH_JOBS_URL: jobsUrl,
          SERAPH_NODE_ID: nodeId,
          SERAPH_REPOSITORY_ROOTS: (o.repositoryRoots ?? []).join(":"),
          SERAPH_EXECUTOR_DATA_DIR: join(dir, "executor"),
        },
        dir,
        eg!,
        eh!,
      );
    let executor = spawnExecutor();
    started.push(executor);
    const gateway = spawnService(
      "gateway",
      "ui-gateway",
      { SERAPH_GATEWAY_GRPC_PORT: `${gg}`, SERAPH_GATEWAY_HTTP_PORT: `${gh}`, SERAPH_API_URL: api.grpcUrl },
      dir,
      gg!,
      gh!,
    );
    started.push(gateway);
    await Promise.all([...replicas, ...started].map((p) => waitServing(p)));
    const operatorToken = (await readFile(tokenFile, "utf8")).trim();
    const restartJobs = async (i: number) => {
      await stopProcess(replicas[i]!.child);
      replicas[i] = spawnJobs(i);
      await waitServing(replicas[i]!);
      return replicas[i]!;
    };
    const restartExecutor = async () => {
      const old = executor;
      if (old.child.exitCode === null && old.child.signalCode === null) {
        const exited = new Promise<void>((r) => old.child.once("exit", () => r()));
        old.child.kill("SIGKILL");
        await exited;
      }
      restarts += 1;
      executor = spawnExecutor();
      started[started.indexOf(old)] = executor;
      await waitServing(executor);
      return executor;
    };
    return {
      dir,
      nats,
      api,
      jobs,
      jobsReplicas: replicas,
      balancer,
      restartJobs,
      get executor() {
        return executor;
      },
      restartExecutor,
      gateway,
      operatorToken,
      internalToken,
      executorToken,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
