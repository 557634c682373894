import { mkdtemp, readFile, realpath, rm, writeFile } from "node:fs/promises";
import { readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ApprovalDocumentSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { createClient, type Client } from "@connectrpc/connect";
import { startJobs, type AuthorityReader, type JobsDatabase, type JobsHandle } from "@seraph/jobs";
import { createNatsSignals, createRootLogger, createServiceTransport, newId, sha256Hex, type Signals } from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import { ExecutionBundleSchema, JobState, JobsService, type ExecutionBundle, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { BlockReasonSchema, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { NodeContainment } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { Kysely, PostgresDialect } from "kysely";
import pg from "pg";
import { actAsRightfulCaller, nodeKeyIn, testApprovalDocument, withApprovalDocument } from "@seraph/jobs/testing";
import { supervisorSourceOf, defaultSupervisorEntry, readFacilityReport, defaultContainmentSettings, nodeContainment } from "@seraph/executor-linux";
import { inspectRepository, parseLimitOverrides } from "@seraph/executor-linux/profile";
import { pinnedNodeForTests } from "@seraph/executor-linux/testing";
import { spawnService, stopProcess, waitServing, type ServiceProcess } from "./harness/cluster.js";
import { startTestNats, type TestNatsServer } from "./harness/nats-server.js";
import { freePort } from "./harness/ports.js";

/**
 * The durable-execution test stack: the jobs service in this process (real PostgreSQL, a
 * private authenticated nats-server where jobs and each executor node connect as their own
 * users, a controllable authority reader standing in for the API's tables), and executor nodes
 * as separate processes (`services/executor-linux/dist/main.js`) that a test can SIGKILL and
 * restart by pid. Supervisors are real processes started by those executors.
 */
export interface ExecutionStack {
  readonly dir: string;
  readonly db: Kysely<JobsDatabase>;
  readonly databaseName: string;
  readonly jobs: JobsHandle;
  readonly client: Client<typeof JobsService>;
  readonly signals: Signals;
  readonly internalToken: string;
  readonly nats: TestNatsServer;
  readonly natsUrl: string;
  readonly node: string;
  /** Pinned Node v24.15.0. */
  readonly runtime: string;
  /** Parent of fixture repositories (the executors' repository root). */
  readonly repoRoot: string;
  /** Boot-id file of the executors (initially a copy of the real boot id). */
  readonly bootIdFile: string;
  /** Extra admission blockers the stand-in authority returns at claim time. */
  blockers: { code: string; message: string }[];
  readonly liveRoots: Set<string>;
  readonly executors: Map<string, ServiceProcess>;
  startExecutor(nodeId?: string, env?: Record<string, string>): Promise<ServiceProcess>;
  killExecutor(nodeId?: string, signal?: NodeJS.Signals): Promise<void>;
  close(): Promise<void>;
}

/** Options of the stack. */
export interface ExecutionStackOptions {
  /** A server the caller started (and stops); default: the stack starts its own and closes it. */
  readonly nats?: TestNatsServer;
  readonly nodeId?: string;
  /** Start the first executor at once (default true). */
  readonly executor?: boolean;
}

/** Starts the stack; fails (never skips) without PostgreSQL, NATS or the pinned runtime. */
export async function startExecutionStack(o: ExecutionStackOptions): Promise<ExecutionStack> {
  const runtime = await pinnedNodeForTests({ ...process.env, CI: "true" });
  if (!runtime) throw new Error("the pinned runtime is required");
  const dir = await realpath(await mkdtemp(join(tmpdir(), "sx-")));
  const repoRoot = join(dir, "repos");
  await import("node:fs/promises").then((fs) => fs.mkdir(repoRoot));
  const bootIdFile = join(dir, "boot_id");
  await writeFile(bootIdFile, await readFile("/proc/sys/kernel/random/boot_id", "utf8"));
  const database = await createTestDatabase();
  // Same pool settings as @seraph/kit openDatabase, plus an error listener on every client: a
  // checked-out client whose backend is terminated (the PostgreSQL fault test) emits 'error',
  // which without a listener would crash the process. (Reported for kit's openDatabase.)
  const pool = new pg.Pool({ connectionString: database.url, max: 10 });
  pool.on("error", () => undefined);
  pool.on("connect", (client) => client.on("error", () => undefined));
  const db = new Kysely<JobsDatabase>({ dialect: new PostgresDialect({ pool }) });
  const log = createRootLogger({ name: "jobs-test", level: process.env["SERAPH_TEST_LOG"] ?? "silent" });
  const nats = o.nats ?? (await startTestNats());
  const signals = await createNatsSignals(nats.url, "seraph-jobs-test", log, nats.users.jobs);
  const internalToken = newId().replaceAll("-", "");
  const state = { blockers: [] as { code: string; message: string }[], liveRoots: new Set<string>() };
  // Stand-in for the API tables (the shared-table reader is tested in execution-authority.test.ts):
  // expiry from the bundle, plus whatever a test sets.
  const authority: AuthorityReader = {
    async admissionBlockers(_db, bundle, nowMs) {
      const out = state.blockers.map((b) => create(BlockReasonSchema, { ...b, subject: "" }));
      if (Number(bundle.approvalExpiresUnixMs) <= nowMs) out.push(create(BlockReasonSchema, { code: "rejected_approval_expired", message: "the approval expired", subject: "approval" }));
      return out;
    },
    async rootIsLive(_db, rootId) {
      return state.liveRoots.has(rootId);
    },
    // The approval the API would have stored: the document the bundle carries, else one derived from the bundle and owner.
    async approvedDocument(trx, approvalId) {
      const row = await trx.selectFrom("jobs").select(["bundle", "owner_id"]).where("approval_id", "=", approvalId).executeTakeFirst();
      if (!row) return undefined;
      const bundle = fromBinary(ExecutionBundleSchema, row.bundle);
      if (bundle.approvalDocument.length > 0) return { document: bundle.approvalDocument, documentSha256: bundle.approvalDocumentSha256 };
      const doc = testApprovalDocument(bundle, row.owner_id);
      return { document: toBinary(ApprovalDocumentSchema, doc), documentSha256: doc.documentSha256 };
    },
  };
  const jobs = await startJobs({ host: "127.0.0.1", grpcPort: 0, db, signals, log, internalToken, autoEnrolNodes: true, authority, pollMs: 500 });
  const node = o.nodeId ?? "node-a";
  const executors = new Map<string, ServiceProcess>();
  const dataDirs = new Map<string, string>();
  // The API's RPCs with the API's token; a node's RPCs (a test acting as a node, e.g. its superseded
  // incarnation) with that node's real key from its data directory, else a test key of its own.
  const client = createClient(JobsService, createServiceTransport(jobs.server.grpcUrl, actAsRightfulCaller(db, internalToken, new Map(), (id) => nodeKeyIn(dataDirs.get(id)))));

  const stack: ExecutionStack = Object.assign(state, {
    dir,
    db,
    databaseName: database.name,
    jobs,
    client,
    signals,
    internalToken,
    nats,
    natsUrl: nats.url,
    node,
    runtime,
    repoRoot,
    bootIdFile,
    executors,
    async startExecutor(nodeId = node, env: Record<string, string> = {}) {
      const [g, h] = [await freePort(), await freePort()];
      const dataDir = dataDirs.get(nodeId) ?? join(dir, `x-${nodeId}`);
      dataDirs.set(nodeId, dataDir);
      const p = spawnService(
        `executor-${nodeId}-${Date.now()}`,
        "executor-linux",
        {
          SERAPH_EXECUTOR_GRPC_PORT: `${g}`,
          SERAPH_EXECUTOR_HTTP_PORT: `${h}`,
          SERAPH_JOBS_URL: jobs.server.grpcUrl,
          SERAPH_NODE_ID: nodeId,
          SERAPH_REPOSITORY_ROOTS: repoRoot,
          SERAPH_EXECUTOR_DATA_DIR: dataDir,
          SERAPH_BOOT_ID_FILE: bootIdFile,
          // Test-only: the executor refuses SERAPH_BOOT_ID_FILE without it.
          SERAPH_TEST_ALLOW_BOOT_ID_FILE: "1",
          SERAPH_EXECUTOR_POLL_MS: "200",
          SERAPH_EXECUTOR_HEARTBEAT_MS: "500",
          ...nats.env("executor", nodeId),
          SERAPH_EXECUTOR_TOKEN: internalToken,
          LOG_LEVEL: "debug",
          ...env,
        },
        dir,
        g,
        h,
      );
      executors.set(nodeId, p);
      try {
        await waitServing(p);
      } catch (err) {
        await stack.killExecutor(nodeId);
        throw err;
      }
      // Registered once the node (with this process's incarnation) is listed with a fresh heartbeat.
      await pollUntil(async () => (await client.listNodes({})).nodes.some((n) => n.nodeId === nodeId && Number(n.heartbeatUnixMs) > Date.now() - 2000), 20_000, `node ${nodeId} registered`);
      return p;
    },
    async killExecutor(nodeId = node, signal: NodeJS.Signals = "SIGKILL") {
      const p = executors.get(nodeId);
      if (!p) return;
      executors.delete(nodeId);
      if (signal === "SIGKILL") {
        const exited = new Promise<void>((r) => (p.child.exitCode !== null || p.child.signalCode !== null ? r() : p.child.once("exit", () => r())));
        p.child.kill("SIGKILL");
        await exited;
      } else {
        await stopProcess(p.child);
      }
    },
    async close() {
      for (const id of [...executors.keys()]) await stack.killExecutor(id, "SIGTERM");
      await jobs.stop();
      await signals.close();
      await db.destroy();
      await database.drop();
      if (!o.nats) await nats.close();
      if (process.env["SERAPH_TEST_KEEP"] === undefined) await rm(dir, { recursive: true, force: true });
    },
  });
  if (o.executor !== false) {
    try {
      await stack.startExecutor();
    } catch (err) {
      await stack.close().catch(() => undefined);
      throw err;
    }
  }
  return stack;
}

/** An approval bundle for a fixture repository on `nodeId` (inspected now, as the API would). */
export async function bundleFor(
  stack: ExecutionStack,
  repositoryPath: string,
  opts: {
    diff?: string;
    nodeId?: string;
    expiresInMs?: number;
    allowed?: string[];
    selection?: Selection;
    supervisorSourceSha256?: string;
    limits?: string[];
    owner?: string;
    /** What the node would state (default: the stack's executors' default settings, one slot). */
    containment?: NodeContainment;
  } = {},
): Promise<ExecutionBundle> {
  // What the stack's executors (default containment settings, one slot) report at inspection.
  containmentOfNodes ??= readFacilityReport().then((r) => nodeContainment(defaultContainmentSettings(1), r.containment));
  const inspection = await inspectRepository({
    repositoryPath,
    selection: opts.selection ?? Selection.TEST,
    nodePath: stack.runtime,
    ...(opts.limits ? { limits: parseLimitOverrides(opts.limits) } : {}),
  });
  if (!inspection.admitted) throw new Error(`fixture not admitted: ${inspection.reasons.map((r) => r.message).join("; ")}`);
  const containment = opts.containment ?? (await containmentOfNodes);
  const bundle = create(ExecutionBundleSchema, {
    repairId: newId(),
    approvalId: newId(),
    repositoryPath,
    nodeId: opts.nodeId ?? stack.node,
    inspection,
    diff: opts.diff ?? "",
    // As the API computes it: the SHA-256 of the diff's bytes (recovery recomputes it).
    proposalSha256: sha256Hex(opts.diff ?? ""),
    runtimePath: stack.runtime,
    limits: inspection.limits,
    approvalExpiresUnixMs: BigInt(Date.now() + (opts.expiresInMs ?? 600_000)),
    goalId: newId(),
    goalRevision: 1,
    settingsRevision: 1n,
    allowedPatchPaths: opts.allowed ?? ["src/math.js"],
    // What the node reports for its compiled supervisor (the executors run from dist/).
    supervisorSourceSha256: opts.supervisorSourceSha256 ?? supervisorSourceOf(defaultSupervisorEntry()),
    containment,
    // The posture the approval shows (the API copies it from the document into the bundle).
    isolationClaim: containment.isolationClaim || "none",
    resourceEnforcement: containment.resourceEnforcement || "admission_and_wall_timeout_only",
  });
  // The document the API would have stored for this approval by this owner, carried as the API's bundle carries it.
  return withApprovalDocument(bundle, opts.owner ?? EXECUTION_TEST_OWNER);
}

let containmentOfNodes: Promise<NodeContainment> | undefined;
/** The owner bundleFor's approval document names unless told otherwise (tests enqueue as this owner). */
export const EXECUTION_TEST_OWNER = "00000000-0000-4000-8000-00000000e0e0";

/** Polls `check` every 100 ms until it is true; throws naming `what` after `timeoutMs`. */
export async function pollUntil(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (await check().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Waits until the job reaches one of `states`; returns it. */
export async function waitForState(stack: ExecutionStack, jobId: string, states: JobState[], timeoutMs = 30_000): Promise<Job> {
  const until = Date.now() + timeoutMs;
  let last: Job | undefined;
  while (Date.now() < until) {
    last = (await stack.client.getJob({ jobId })).job;
    if (last && states.includes(last.state)) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`job ${jobId} did not reach ${states.map((s) => JobState[s]).join("|")} (last: ${last ? `${JobState[last.state]} ${last.outcome} ${last.outcomeMessage}` : "none"})`);
}

/** Pids of every live descendant of `pid` (via /proc/<pid>/task/<tid>/children). */
export function descendantsOf(pid: number): number[] {
  const out: number[] = [];
  const walk = (p: number) => {
    let tasks: string[] = [];
    try {
      tasks = readdirSync(`/proc/${p}/task`);
    } catch {
      return;
    }
    for (const t of tasks) {
      let kids = "";
      try {
        kids = readFileSync(`/proc/${p}/task/${t}/children`, "utf8");
      } catch {
        continue;
      }
      for (const k of kids.split(" ").filter((x) => x !== "")) {
        out.push(Number(k));
        walk(Number(k));
      }
    }
  };
  walk(pid);
  return out;
}

/** Pids of live processes (this one excluded) whose command line mentions `dir` (this stack's private temp dir, or any tag). */
export function processesUnder(dir: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, "utf8").includes(dir) && alive(Number(name))) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

/**
 * Ends what still runs from `dir` after a stack stopped (by pid): a supervisor an executor left
 * behind on stop (at its start barrier, or running: the keep policy waits for a re-adoption that
 * a test stack never makes) gets SIGTERM, which it treats as a cancellation (it terminates and
 * reaps its tree); whatever is still alive after `graceMs` gets SIGKILL.
 */
export async function endProcessesUnder(dir: string, graceMs = 10_000): Promise<void> {
  const pids = processesUnder(dir);
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGTERM");
    } catch {
      // gone
    }
  }
  const deadline = Date.now() + graceMs;
  while (pids.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  for (const pid of pids.filter(alive)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
}

/** True while `pid` exists and is not a zombie. */
export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

/** Replaces the executors' boot id (simulates a reboot for the recovery proof). */
export async function simulateReboot(stack: ExecutionStack): Promise<void> {
  const current = (await readFile(stack.bootIdFile, "utf8")).trim();
  await writeFile(stack.bootIdFile, `${current.slice(0, -4)}beef\n`);
}

/** Closes the stack, then SIGKILLs (by pid) whatever still runs from its private directory (and `also`). */
export async function closeStackAndLeftovers(stack: ExecutionStack | undefined, also: readonly number[] = []): Promise<void> {
  const leftovers = [...also, ...(stack ? processesUnder(stack.dir) : [])];
  await stack?.close();
  for (const pid of leftovers) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
}
