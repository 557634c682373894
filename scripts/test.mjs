// `npm test`: the one command that runs the whole suite on a fresh machine. In order:
//   1. the generated code is checked against proto/ (scripts/check-generated.mjs);
//   2. the machine's prerequisites are installed from Debian's packages when missing (as root),
//      or one line names the exact `apt-get install` (not root);
//   3. everything is built (`npm run build`: TypeScript, the supervisor bundle, the UI) and the
//      tests, which the build leaves out of dist/, are type-checked (tsconfig.test.json);
//   4. PostgreSQL: SERAPH_TEST_POSTGRES_URL when set, otherwise a throwaway cluster of our own
//      (@seraph/postgres-server: initdb in a temporary directory, a free loopback port, fsync off),
//      with one migrated template database that every test file's database is copied from;
//   5. vitest, with the arguments given to this script (`npm test -- test/ui.test.ts`);
//   6. what it started is stopped and removed, whatever vitest's outcome.
// NATS servers are started by the tests themselves (test/harness/nats-server.ts), one per file.
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { missingPrerequisites } from "./test-prerequisites.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const say = (line) => process.stderr.write(`test setup: ${line}\n`);
const args = process.argv.slice(2);
const skipBuild = process.env.SERAPH_TEST_SKIP_BUILD === "1";
// `--project unit` alone (npm run test:unit) needs no database: no server is started for it.
const projects = args.flatMap((a, i) => (a === "--project" ? [args[i + 1]] : a.startsWith("--project=") ? [a.slice(10)] : []));
const needsPostgres = !(projects.length > 0 && projects.every((p) => p === "unit"));
const started = Date.now();

function step(what, fn) {
  const t0 = Date.now();
  const out = fn();
  const done = () => say(`${what} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  if (out && typeof out.then === "function") return out.then((v) => (done(), v));
  done();
  return out;
}

function provision() {
  const missing = missingPrerequisites(root);
  if (missing.length === 0) return;
  const packages = [...new Set(missing.map((m) => m.package))];
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  if (!isRoot) {
    say(`missing ${missing.map((m) => m.what).join(", ")}; tests that need them will fail. Install with:`);
    say(`  sudo apt-get install -y ${packages.join(" ")}`);
    return;
  }
  say(`installing from Debian's packages: ${packages.join(" ")}`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  execFileSync("apt-get", ["update", "-qq"], { stdio: ["ignore", "ignore", "inherit"], env });
  execFileSync("apt-get", ["install", "-y", "-qq", "--no-install-recommends", ...packages], { stdio: ["ignore", "ignore", "inherit"], env });
  const still = missingPrerequisites(root);
  if (still.length > 0) throw new Error(`still missing after apt-get install: ${still.map((m) => m.what).join(", ")}`);
}

const PG_PREFIX = "seraph-test-pg-";

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === "EPERM";
  }
}

/** Stops and removes throwaway clusters whose test run died without cleaning up (the server by the pid in its own postmaster.pid). */
async function sweepStaleClusters(stopLeftoverServer) {
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith(PG_PREFIX)) continue;
    const dir = join(tmpdir(), name);
    let owner = 0;
    try {
      owner = Number(readFileSync(join(dir, "owner.pid"), "utf8").trim());
    } catch {
      /* a run killed before it wrote its pid */
    }
    if (owner > 0 && alive(owner)) continue;
    await stopLeftoverServer(join(dir, "server"));
    rmSync(dir, { recursive: true, force: true });
    say(`removed a stale throwaway cluster ${dir}`);
  }
}

async function startPostgres() {
  const given = process.env.SERAPH_TEST_POSTGRES_URL;
  if (given) return { url: given, stop: async () => undefined, describe: `SERAPH_TEST_POSTGRES_URL (${new URL(given).host})` };
  const { startPostgresServer, stopLeftoverServer } = await import(pathToFileURL(join(root, "packages/postgres-server/dist/index.js")).href);
  await sweepStaleClusters(stopLeftoverServer);
  const dir = mkdtempSync(join(tmpdir(), PG_PREFIX));
  chmodSync(dir, 0o711); // as root the server runs as seraph-postgres, which must reach server/ below it
  writeFileSync(join(dir, "owner.pid"), `${process.pid}\n`);
  const server = await startPostgresServer({ dir: join(dir, "server"), durable: false, maxConnections: 400 });
  const { Client } = (await import("pg")).default;
  const c = new Client({ connectionString: server.url("postgres") });
  await c.connect();
  await c.query("CREATE DATABASE test");
  await c.end();
  return {
    url: server.url("test"),
    describe: `a throwaway cluster on 127.0.0.1:${server.port} (${server.binaries.source})`,
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One database with every service's migrations applied; each test file's database is a copy of it. */
async function createTemplate(url) {
  const imp = (p) => import(pathToFileURL(join(root, p)).href);
  const [{ openDatabase }, { migrateApi }, { migrateJobs }] = await Promise.all([
    imp("packages/kit/dist/index.js"),
    imp("services/api/dist/index.js"),
    imp("services/jobs/dist/index.js"),
  ]);
  const { Client } = (await import("pg")).default;
  const name = `seraph_template_${randomBytes(4).toString("hex")}`;
  const admin = new Client({ connectionString: url });
  admin.on("error", () => undefined); // the server stopping under it at the end
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const u = new URL(url);
  u.pathname = `/${name}`;
  const db = await openDatabase({ url: u.toString() }, { poolSize: 2 });
  const quiet = { info() {}, warn() {}, error() {}, debug() {}, child() { return quiet; } };
  try {
    await migrateApi(db, quiet);
    await migrateJobs(db, quiet);
  } finally {
    await db.destroy();
  }
  return {
    name,
    async drop() {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
      await admin.end();
    },
  };
}

function runVitest(env) {
  return new Promise((resolve) => {
    // Its own process group, so that an interrupt reaches vitest's workers and what the tests
    // started too (a signal to vitest alone left its fork workers and their services running).
    const child = spawn(process.execPath, [join(root, "node_modules/vitest/vitest.mjs"), "run", ...args], { cwd: root, env, stdio: "inherit", detached: true });
    const forward = (signal) => {
      try {
        process.kill(-child.pid, signal);
      } catch {
        /* the group is gone already */
      }
    };
    process.on("SIGINT", forward);
    process.on("SIGTERM", forward);
    child.on("exit", (code, signal) => {
      process.off("SIGINT", forward);
      process.off("SIGTERM", forward);
      resolve(code ?? (signal ? 1 : 0));
    });
  });
}

async function main() {
  step("generated code matches proto/", () => execFileSync(process.execPath, [join(root, "scripts/check-generated.mjs")], { stdio: "inherit" }));
  step("prerequisites present", provision);
  if (!skipBuild) {
    step("built", () => execFileSync("npm", ["run", "build", "--silent"], { cwd: root, stdio: ["ignore", "ignore", "inherit"] }));
    // The build excludes tests (dist/ holds none); they are type-checked here, incrementally.
    step("tests type-checked", () => execFileSync(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.test.json"], { cwd: root, stdio: "inherit" }));
  }
  if (!needsPostgres) {
    process.exitCode = await runVitest(process.env);
    say(`${((Date.now() - started) / 1000).toFixed(0)} s in all`);
    return;
  }
  const pgServer = await step("PostgreSQL up", startPostgres);
  let template;
  let code = 1;
  try {
    template = await step("template database migrated", () => createTemplate(pgServer.url));
    say(`PostgreSQL: ${pgServer.describe}, template ${template.name}`);
    const env = { ...process.env, SERAPH_TEST_POSTGRES_URL: pgServer.url, SERAPH_TEST_TEMPLATE_DATABASE: template.name };
    code = await runVitest(env);
  } finally {
    await template?.drop();
    await pgServer.stop();
    say(`stopped what it started; ${((Date.now() - started) / 1000).toFixed(0)} s in all`);
  }
  process.exitCode = code;
}

main().catch((err) => {
  process.stderr.write(`test setup failed: ${err?.stack ?? err}\n`);
  process.exitCode = 1;
});
