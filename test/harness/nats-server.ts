import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createWriteStream, existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { connect as tcpConnect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeAccount, encodeOperator, encodeUser, fmtCreds } from "@nats-io/jwt";
import { createAccount, createOperator, createUser } from "@nats-io/nkeys";
import { natsPermissions, renderNatsAuthorization, type NatsRole, type NatsUserEntry } from "@seraph/kit";
import { freePort } from "./ports.js";

/** Debian's nats-server (CI installs it; `.ci/run`). */
export const NATS_SERVER_BIN = "/usr/sbin/nats-server";

/** One NATS user's credentials. */
export interface NatsCredentials {
  readonly user: string;
  readonly password: string;
}

/**
 * A private nats-server for one test file: its own port, JetStream store and a config that
 * requires authentication and grants each Seraph service user exactly the subjects of
 * `natsPermissions` (kit). Never the machine's shared server; stopped by pid.
 */
export interface TestNatsServer {
  readonly url: string;
  readonly port: number;
  readonly dir: string;
  readonly configFile: string;
  /** The service users: jobs, api, ops (operator tooling) and observer (reads seraph.> events only). */
  readonly users: Readonly<Record<"jobs" | "api" | "ops" | "observer", NatsCredentials>>;
  /** The user of one executor node (hears only its node's subjects). Throws for a node not configured. */
  executor(nodeId: string): NatsCredentials;
  /** NATS_URL / NATS_USER / NATS_PASSWORD for a service process. */
  env(role: "jobs" | "api" | "executor", nodeId?: string): Record<string, string>;
  /** The server's pid (undefined while stopped). */
  readonly pid: number | undefined;
  /** Stops the server by pid (SIGKILL when `kill`, else SIGTERM); resolves when it exited. */
  stop(kill?: boolean): Promise<void>;
  /** Starts it again on the same port with the same config (after stop). */
  start(): Promise<void>;
  /** Stops it and removes its directory. */
  close(): Promise<void>;
}

/** Options of {@link startTestNats}. */
export interface TestNatsOptions {
  /** Executor node ids that get a user (default node-a, node-b, node-c). */
  readonly nodes?: readonly string[];
}

function secret(): string {
  return randomBytes(18).toString("base64url");
}

async function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = tcpConnect(port, "127.0.0.1", () => {
      s.end();
      resolve(true);
    });
    s.on("error", () => resolve(false));
  });
}

/** One nats-server process for `configFile`: (re)start it, stop it by pid. */
function natsProcess(configFile: string, port: number, logFile: string) {
  let child: ChildProcess | undefined;
  const start = async () => {
    if (child && child.exitCode === null && child.signalCode === null) return;
    const out = createWriteStream(logFile, { flags: "a" });
    const c = spawn(NATS_SERVER_BIN, ["-c", configFile], { stdio: ["ignore", "pipe", "pipe"] });
    c.stdout?.pipe(out);
    c.stderr?.pipe(out);
    child = c;
    const until = Date.now() + 15_000;
    while (Date.now() < until) {
      if (c.exitCode !== null) break;
      if (await portOpen(port)) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    const log = await readFile(logFile, "utf8").catch(() => "");
    throw new Error(`nats-server did not listen on ${port} (exit ${c.exitCode}):\n${log.slice(-2000)}`);
  };
  const stop = async (kill = false) => {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise<void>((r) => c.once("exit", () => r()));
    c.kill(kill ? "SIGKILL" : "SIGTERM");
    const timer = setTimeout(() => c.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(timer);
  };
  return { start, stop, pid: () => child?.pid };
}

/** Starts a private, authenticated nats-server; fails (never skips) when the binary is missing. */
export async function startTestNats(o: TestNatsOptions = {}): Promise<TestNatsServer> {
  if (!existsSync(NATS_SERVER_BIN)) throw new Error(`${NATS_SERVER_BIN} is required for this test (apt-get install nats-server; .ci/run does)`);
  const dir = await mkdtemp(join(tmpdir(), "seraph-nats-"));
  const port = await freePort();
  const nodes = o.nodes ?? ["node-a", "node-b", "node-c"];
  const creds = (user: string): NatsCredentials => ({ user, password: secret() });
  const users = { jobs: creds("seraph-jobs"), api: creds("seraph-api"), ops: creds("seraph-ops"), observer: creds("seraph-observer") };
  const executors = new Map(nodes.map((n) => [n, creds(`seraph-executor-${n}`)]));
  const entries: NatsUserEntry[] = [
    ...(["jobs", "api", "ops"] as const satisfies readonly NatsRole[]).map((r) => ({ ...users[r], permissions: natsPermissions(r) })),
    // A test-only reader of the event subjects (what a subscriber with read permission sees).
    { ...users.observer, permissions: { publish: [], subscribe: ["seraph.jobs.>", "seraph.slots.>", "seraph.repairs.>"], allowResponses: false } },
    ...[...executors].map(([node, c]) => ({ ...c, permissions: natsPermissions("executor", node) })),
  ];
  const configFile = join(dir, "nats.conf");
  await writeFile(
    configFile,
    [`listen: "127.0.0.1:${port}"`, `jetstream { store_dir: ${JSON.stringify(join(dir, "js"))} }`, renderNatsAuthorization(entries)].join("\n"),
    { mode: 0o600 },
  );
  const { start, stop, pid } = natsProcess(configFile, port, join(dir, "nats.log"));
  await start();
  const url = `nats://127.0.0.1:${port}`;
  const executor = (nodeId: string) => {
    const c = executors.get(nodeId);
    if (!c) throw new Error(`no NATS user for executor node ${nodeId}: pass it in startTestNats({ nodes })`);
    return c;
  };
  return {
    url,
    port,
    dir,
    configFile,
    users,
    executor,
    env(role, nodeId) {
      const c = role === "executor" ? executor(nodeId ?? "node-a") : users[role];
      return { NATS_URL: url, NATS_USER: c.user, NATS_PASSWORD: c.password };
    },
    get pid() {
      return pid();
    },
    stop,
    start,
    async close() {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A private nats-server in operator (JWT) mode, whose users connect with creds files. */
export interface TestOperatorModeNats {
  readonly url: string;
  /** A creds file (JWT + nkey seed, mode 0600) for a user with `role`'s permissions of `natsPermissions`. */
  credsFile(role: NatsRole, nodeId?: string): Promise<string>;
  close(): Promise<void>;
}

/**
 * Starts nats-server in operator mode (an operator, one account preloaded in a memory
 * resolver): only users whose JWT that account signed may connect, each with the subject
 * permissions in its JWT, as an `nsc`-managed deployment would run it.
 */
export async function startOperatorModeNats(): Promise<TestOperatorModeNats> {
  if (!existsSync(NATS_SERVER_BIN)) throw new Error(`${NATS_SERVER_BIN} is required for this test (apt-get install nats-server; .ci/run does)`);
  const dir = await mkdtemp(join(tmpdir(), "seraph-nats-op-"));
  const port = await freePort();
  const operator = createOperator();
  const account = createAccount();
  const unlimited = { conn: -1, subs: -1, data: -1, payload: -1, leaf: -1, imports: -1, exports: -1, wildcards: true };
  const operatorJwt = await encodeOperator("seraph-test", operator);
  const accountJwt = await encodeAccount("seraph", account, { limits: unlimited }, { signer: operator });
  const configFile = join(dir, "nats.conf");
  await writeFile(
    configFile,
    [`listen: "127.0.0.1:${port}"`, `operator: ${JSON.stringify(operatorJwt)}`, "resolver: MEMORY", `resolver_preload: { ${account.getPublicKey()}: ${JSON.stringify(accountJwt)} }`, ""].join("\n"),
    { mode: 0o600 },
  );
  const server = natsProcess(configFile, port, join(dir, "nats.log"));
  await server.start();
  let n = 0;
  return {
    url: `nats://127.0.0.1:${port}`,
    async credsFile(role, nodeId) {
      const p = natsPermissions(role, nodeId);
      const user = createUser();
      const allow = (xs: readonly string[]) => (xs.length > 0 ? { allow: [...xs] } : { deny: [">"] });
      const jwt = await encodeUser(`seraph-${role}`, user, account, {
        pub: allow(p.publish),
        sub: allow(p.subscribe),
        ...(p.allowResponses ? { resp: { max: 1, ttl: 0 } } : {}),
        subs: -1,
        data: -1,
        payload: -1,
      });
      const file = join(dir, `${role}-${n++}.creds`);
      await writeFile(file, fmtCreds(jwt, user), { mode: 0o600 });
      return file;
    },
    async close() {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
