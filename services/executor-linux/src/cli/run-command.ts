import { accessSync, constants as fsConstants, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, isAbsolute, join, resolve } from "node:path";
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { CgroupRequestSchema, ControllerLossPolicy, JobUserSchema, SupervisorSpecSchema, type Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { checkJobUserAccess, jobUserAccessTools, jobUserLabel, type JobUserAccess } from "../native/setpriv.js";
import { defaultContainmentSettings, parseJobUserSetting, resolveHandRunJobUser, seraphExecJobUid, type JobUserSetting } from "../supervisor-client/node-containment.js";
import {
  CONTROLLER_DEADLINE_MARGIN_MS,
  CONTROLLER_LOSS_GRACE_DEFAULT_MS,
  ControllerUnknownError,
  InvalidSpecError,
  JournalMismatchError,
  MAX_ARGV_ENTRIES,
  MIN_KILL_MARGIN_MS,
  OUTPUT_LIMIT_MAX_BYTES,
  STREAM_LIMIT_MAX_BYTES,
  SupervisorLaunchError,
  readVerifiedJournal,
  receiptToJson,
  runToReceipt,
  type OutcomeName,
  type SupervisorHandle,
  type VerifiedJournal,
} from "../supervisor-client/index.js";

/** Usage of this subcommand (also printed by `seraph-exec <command> --help`). */
export const RUN_USAGE = `usage: seraph-exec run [--json] [--deadline-ms N] [--grace-ms N] [--cleanup-reserve-ms N]
                       [--cwd DIR] [--keep-run-dir] [--job-user USER] [--cgroup]
                       [--memory-bytes N] [--pids N] [--cpu-millicores N] -- <argv...>

Runs argv under a fresh per-job supervisor (no shell) and prints its receipt: with --json as one
JSON object on the last line of stdout; otherwise the command's output (read back and checked
against the receipt's SHA-256 first; head, an elision line, tail) followed by a summary on
stderr. Without a receipt it can trust (none by the deadline + ${CONTROLLER_DEADLINE_MARGIN_MS} ms, supervisor
gone, connection taken over, journal rewritten) it prints outcome unknown with a reason.
If seraph-exec dies, its supervisor cancels the job ${CONTROLLER_LOSS_GRACE_DEFAULT_MS} ms later (policy cancel). argv[0] may be a bare name: it is resolved against PATH here and recorded as an absolute
path. The command's environment is this process's environment minus NODE_OPTIONS.
argv holds at most ${MAX_ARGV_ENTRIES} entries (the command name included).
Defaults: --deadline-ms 180000, --grace-ms 2000, --cleanup-reserve-ms grace + 1000 (at least
grace + ${MIN_KILL_MARGIN_MS}); the reserve is inside the deadline. Exit status: 0 succeeded, 1 failed,
3 rejected_leftover_descendants, 4 unknown, 124 timed_out, 130 cancelled, 2 usage,
125 supervisor could not start, 126 the job user cannot enter --cwd or execute argv[0],
127 command not found.
As root the command runs as an unprivileged job user (groups dropped, capabilities cleared,
no_new_privs), by default uid = gid = $SERAPH_JOB_UID_BASE + 64 (${seraphExecJobUid(defaultContainmentSettings().uidBase)}; past every executor slot's
uid); --job-user <uid>:<gid>|<name> picks another, --job-user none runs it as root. That user
must be able to enter --cwd and execute argv[0] (checked first: exit 126 naming the path).
As another user the command runs as that user. --cgroup gives the run its own
cgroup v2 (cgroup.kill, populated 0 required beside ECHILD); --memory-bytes, --pids and
--cpu-millicores (each implies --cgroup) are enforced ceilings. Both need root.`;

/** SHA-256 of no bytes. */
const EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

const EXIT_STATUS: Readonly<Record<OutcomeName, number>> = {
  succeeded: 0,
  failed: 1,
  rejected_leftover_descendants: 3,
  unknown: 4,
  timed_out: 124,
  cancelled: 130,
};

/** Environment variables never passed to the command (they would change how node runs). */
const DROPPED_ENV = new Set(["NODE_OPTIONS"]);

interface RunArgs {
  json: boolean;
  deadlineMs: number;
  graceMs: number;
  reserveMs: number | undefined;
  cwd: string;
  keepRunDir: boolean;
  /** auto: the default (a job user when root, resolved in resolveJobUser). */
  jobUser: JobUserSetting;
  cgroup: boolean;
  memoryBytes: number;
  pids: number;
  cpuMillicores: number;
  argv: string[];
}

class UsageError extends Error {}

function parseArgs(args: readonly string[]): RunArgs {
  const out: RunArgs = {
    json: false,
    deadlineMs: 180_000,
    graceMs: 2000,
    reserveMs: undefined,
    cwd: process.cwd(),
    keepRunDir: false,
    jobUser: { kind: "auto" },
    cgroup: false,
    memoryBytes: 0,
    pids: 0,
    cpuMillicores: 0,
    argv: [],
  };
  const int = (name: string, v: string | undefined): number => {
    if (v === undefined || !/^\d+$/.test(v)) throw new UsageError(`${name} needs a non-negative integer`);
    return Number(v);
  };
  let i = 0;
  for (; i < args.length; i++) {
    const a = args[i];
    if (a === "--") {
      i++;
      break;
    }
    if (a === undefined || !a.startsWith("--")) break;
    switch (a) {
      case "--json":
        out.json = true;
        break;
      case "--keep-run-dir":
        out.keepRunDir = true;
        break;
      case "--deadline-ms":
        out.deadlineMs = int(a, args[++i]);
        break;
      case "--grace-ms":
        out.graceMs = int(a, args[++i]);
        break;
      case "--cleanup-reserve-ms":
        out.reserveMs = int(a, args[++i]);
        break;
      case "--job-user": {
        const v = args[++i];
        if (v === undefined || v === "") throw new UsageError("--job-user needs auto, none, <uid>:<gid> or a user name");
        const parsed = parseJobUserSetting(v);
        if (typeof parsed === "string") throw new UsageError(`--job-user: ${parsed}`);
        out.jobUser = parsed;
        break;
      }
      case "--cgroup":
        out.cgroup = true;
        break;
      case "--memory-bytes":
        out.memoryBytes = int(a, args[++i]);
        out.cgroup = true;
        break;
      case "--pids":
        out.pids = int(a, args[++i]);
        out.cgroup = true;
        break;
      case "--cpu-millicores":
        out.cpuMillicores = int(a, args[++i]);
        out.cgroup = true;
        break;
      case "--cwd": {
        const v = args[++i];
        if (v === undefined) throw new UsageError("--cwd needs a directory");
        out.cwd = resolve(v);
        break;
      }
      default:
        throw new UsageError(`unknown option ${a}`);
    }
  }
  out.argv = args.slice(i);
  if (out.argv.length === 0) throw new UsageError("no command given");
  // The supervisor refuses more (its spec bound): say so as a usage error, before a run dir exists.
  if (out.argv.length > MAX_ARGV_ENTRIES) {
    throw new UsageError(`the command has ${out.argv.length} argv entries; at most ${MAX_ARGV_ENTRIES} (the command name included) are allowed`);
  }
  return out;
}

function isExecutableFile(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Resolves argv[0] explicitly: a name with a slash is taken relative to the command's cwd; a
 * bare name is searched in PATH (relative PATH entries relative to the cwd). The supervisor
 * itself only ever executes absolute paths.
 */
function resolveExecutable(name: string, cwd: string, path: string | undefined): string | undefined {
  if (name.includes("/")) {
    const abs = isAbsolute(name) ? name : resolve(cwd, name);
    return isExecutableFile(abs) ? abs : undefined;
  }
  for (const dir of (path ?? "").split(delimiter)) {
    const candidate = resolve(cwd, dir === "" ? "." : dir, name);
    if (isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}

function humanBytes(n: number): string {
  return n < 1024 ? `${n} B` : n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/**
 * `seraph-exec run`: one command under a fresh supervisor; prints the receipt (see RUN_USAGE).
 * Exit status 0 only for succeeded.
 */
export async function runCommand(args: readonly string[]): Promise<number> {
  let parsed: RunArgs;
  try {
    parsed = parseArgs(args);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`seraph-exec run: ${err.message}\n${RUN_USAGE}\n`);
    return 2;
  }
  const reserveMs = parsed.reserveMs ?? parsed.graceMs + 1000;
  if (reserveMs < parsed.graceMs + MIN_KILL_MARGIN_MS) {
    process.stderr.write(`seraph-exec run: --cleanup-reserve-ms must be at least --grace-ms + ${MIN_KILL_MARGIN_MS}\n`);
    return 2;
  }
  if (parsed.deadlineMs <= reserveMs) {
    process.stderr.write(
      `seraph-exec run: --deadline-ms (${parsed.deadlineMs}) must exceed the cleanup reserve (${reserveMs} ms = grace + margin)\n`,
    );
    return 2;
  }
  const [name, ...rest] = parsed.argv as [string, ...string[]];
  const executable = resolveExecutable(name, parsed.cwd, process.env["PATH"]);
  if (executable === undefined) {
    notStarted(parsed, "command_not_found", `${JSON.stringify(name)}: command not found (PATH searched explicitly)`, null);
    return 127;
  }
  const jobUser = resolveHandRunJobUser(parsed.jobUser, process.env);
  if (typeof jobUser === "string") {
    process.stderr.write(`seraph-exec run: ${jobUser}\n`);
    return 2;
  }
  if (jobUser !== undefined && process.geteuid?.() === 0) {
    const refused = checkJobUser(parsed, jobUser, executable);
    if (refused !== undefined) return refused;
  }
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !DROPPED_ENV.has(k)) env[k] = v;
  }

  const runDir = mkdtempSync(join(tmpdir(), "seraph-exec-"));
  const spec = create(SupervisorSpecSchema, {
    jobId: `seraph-exec-${randomUUID()}`,
    attempt: 1,
    fence: 1n,
    commands: [{ name: "command", argv: [executable, ...rest], cwd: parsed.cwd }],
    env,
    deadlineUnixMs: BigInt(Date.now() + parsed.deadlineMs),
    cleanupReserveMs: reserveMs,
    graceMs: parsed.graceMs,
    streamLimitBytes: BigInt(STREAM_LIMIT_MAX_BYTES),
    outputLimitBytes: BigInt(OUTPUT_LIMIT_MAX_BYTES),
    runDir,
    startBarrier: true,
    ...(jobUser !== undefined ? { jobUser: create(JobUserSchema, { uid: jobUser.uid, gid: jobUser.gid, name: jobUser.name }) } : {}),
    ...(parsed.cgroup
      ? {
          cgroup: create(CgroupRequestSchema, {
            parent: "/seraph",
            ceilings: { memoryBytes: BigInt(parsed.memoryBytes), pids: parsed.pids, cpuMillicores: parsed.cpuMillicores },
          }),
        }
      : {}),
    // seraph-exec cannot re-adopt a supervisor: when it is gone, its job is cancelled.
    controllerLossPolicy: ControllerLossPolicy.CANCEL,
  });

  // After SIGHUP the terminal may be gone: a failed write must not end the run without its cleanup.
  for (const out of [process.stdout, process.stderr]) out.on("error", () => undefined);
  const abort = new AbortController();
  const onSignal = (): void => abort.abort();
  // SIGHUP too: a closed terminal cancels the job (the supervisor is in its own session).
  for (const sig of CANCEL_SIGNALS) process.on(sig, onSignal);
  let handle: SupervisorHandle | undefined;
  const startedMs = Date.now();
  try {
    let receipt: Receipt | undefined;
    try {
      receipt = await runToReceipt(spec, {
        signal: abort.signal,
        onLaunched: (h) => {
          handle = h;
        },
      });
      // Checked against the receipt before anything is shown: the command could have rewritten
      // its journal through /proc/<supervisor>/fd.
      const c = receipt.commands[0];
      const journals = c?.started
        ? { stdout: await readVerifiedJournal(runDir, 0, "stdout", c.stdout), stderr: await readVerifiedJournal(runDir, 0, "stderr", c.stderr) }
        : undefined;
      return await printReceipt(parsed, receipt, journals, handle, executable, runDir);
    } catch (err) {
      if (err instanceof InvalidSpecError || err instanceof SupervisorLaunchError) throw err;
      const unknown =
        err instanceof ControllerUnknownError
          ? err
          : err instanceof JournalMismatchError
            ? new ControllerUnknownError("journal_mismatch", `${err.message}; the output is not shown`, handle, receipt, { cause: err })
            : new ControllerUnknownError("controller_error", `seraph-exec failed while supervising: ${(err as Error)?.message ?? String(err)}`, handle, receipt, { cause: err });
      printUnknown(parsed, unknown, executable, runDir, Date.now() - startedMs);
      return EXIT_STATUS.unknown;
    }
  } catch (err) {
    if (err instanceof InvalidSpecError || err instanceof SupervisorLaunchError) {
      process.stderr.write(`seraph-exec run: ${err.message}\n(run dir kept: ${runDir})\n`);
      return 125;
    }
    throw err;
  } finally {
    for (const sig of CANCEL_SIGNALS) process.off(sig, onSignal);
  }
}

/**
 * Before anything starts: the job user must be able to enter the working directory and execute
 * argv[0], asked of the kernel as that user. Refused with the path, its mode and owner, and the
 * next step (exit 126; 125 without setpriv/test). A directory it cannot write is only a note.
 */
function checkJobUser(parsed: RunArgs, user: { uid: number; gid: number; name: string }, executable: string): number | undefined {
  const who = `the job user ${jobUserLabel(user)}`;
  const tools = jobUserAccessTools();
  if (!tools.ok) {
    notStarted(parsed, "job_user_unavailable", `${who} cannot be used: ${tools.reason}; install util-linux and coreutils, or pass --job-user none to run the command as root`, executable);
    return 125;
  }
  const access: JobUserAccess = checkJobUserAccess(tools.setpriv, tools.test, user.uid, user.gid, parsed.cwd, executable);
  const none = "or pass --job-user none to run it as root (the command can then signal, stop and ptrace its supervisor)";
  switch (access.problem) {
    case "cannot_enter":
      notStarted(
        parsed,
        "job_user_cannot_enter_cwd",
        `${who} cannot enter the working directory ${parsed.cwd}: no search permission on ${access.path} (${access.detail}); give --cwd a directory it can enter (e.g. under a 0755 parent), make ${access.path} searchable for it, ${none}`,
        executable,
      );
      return 126;
    case "cannot_execute":
      notStarted(
        parsed,
        "job_user_cannot_execute",
        `${who} cannot execute ${executable} (${access.detail}); make it (and its directories) executable for that user, ${none}`,
        executable,
      );
      return 126;
    case "cannot_write":
      process.stderr.write(`seraph-exec run: note: ${who} cannot write ${parsed.cwd} (${access.detail}); a command that writes there fails (chown it to ${user.uid}:${user.gid}, or --job-user none)\n`);
      return undefined;
    default:
      return undefined;
  }
}

/**
 * A run refused before anything started: the message on stderr and, with --json, one object of
 * the receipt's top-level shape saying so (there is no supervisor receipt).
 */
function notStarted(parsed: RunArgs, reason: string, message: string, resolvedExecutable: string | null): void {
  process.stderr.write(`seraph-exec run: ${message}\n`);
  if (!parsed.json) return;
  process.stdout.write(`${JSON.stringify({ outcome: "failed", reason, message, ...receiptlessFields(parsed.argv, false, 0), resolvedExecutable })}\n`);
}

/** The stats of a stream nothing was read from. */
const EMPTY_STREAM = { bytes: 0, keptBytes: 0, truncated: false, sha256: EMPTY_SHA256, producedSha256: EMPTY_SHA256, headBytes: 0, tailBytes: 0, elidedBytes: 0 };

/** The receipt's command fields for a run with no receipt: `started` false (nothing started) or null (unknown). */
function receiptlessFields(argv: readonly string[], started: false | null, durationMs: number) {
  return {
    exitCode: null,
    signal: null,
    leftoverDescendants: 0,
    echildObserved: false,
    stdout: EMPTY_STREAM,
    stderr: EMPTY_STREAM,
    durationMs,
    commands: [{ name: "command", argv: [...argv], started }],
  };
}

const CANCEL_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/** Writes a journal: the head, one line naming the elided byte count, the tail. */
function writeJournal(out: NodeJS.WriteStream, name: string, j: VerifiedJournal): void {
  if (j.elidedBytes === 0) {
    out.write(j.data);
    return;
  }
  out.write(j.data.subarray(0, j.headBytes));
  out.write(`\n[seraph-exec: ${j.elidedBytes} bytes of ${name} elided]\n`);
  out.write(j.data.subarray(j.headBytes));
}

async function printReceipt(
  parsed: RunArgs,
  receipt: Receipt,
  journals: { stdout: VerifiedJournal; stderr: VerifiedJournal } | undefined,
  handle: SupervisorHandle | undefined,
  executable: string,
  runDir: string,
): Promise<number> {
  const json = receiptToJson(receipt);
  const gone = handle === undefined || (await handle.verify()) !== "alive";
  const keep = parsed.keepRunDir || !gone;
  if (!keep) rmSync(runDir, { recursive: true, force: true });
  if (parsed.json) {
    const extra = { resolvedExecutable: executable, runDir: keep ? runDir : null };
    process.stdout.write(`${JSON.stringify({ ...json, ...extra })}\n`);
  } else {
    if (journals !== undefined) {
      writeJournal(process.stdout, "stdout", journals.stdout);
      writeJournal(process.stderr, "stderr", journals.stderr);
    }
    const how = json.exitCode !== null ? `exit code ${json.exitCode}` : json.signal !== null ? `signal ${json.signal}` : "not started";
    const elided = (s: typeof json.stdout): string => (s.elidedBytes > 0 ? ` (${humanBytes(s.elidedBytes)} elided)` : s.truncated ? " (truncated)" : "");
    process.stderr.write(
      `seraph-exec: ${json.outcome} (${json.reason}): ${how}, ${json.durationMs} ms; ` +
        `leftover descendants ${json.leftoverDescendants}; ECHILD ${json.echildObserved ? "observed" : "NOT observed"}; ` +
        `cleanup ${json.cleanup.cleanupMs} ms (found ${json.cleanup.descendantsFound}, reaped ${json.cleanup.reaped}); ` +
        `stdout ${humanBytes(json.stdout.bytes)}${elided(json.stdout)}, ` +
        `stderr ${humanBytes(json.stderr.bytes)}${elided(json.stderr)}` +
        `${json.containment?.jobUser ? `; as job user ${json.containment.jobUser.uid}:${json.containment.jobUser.gid}` : ""}` +
        `${keep ? `; run dir ${runDir}` : ""}\n` +
        `seraph-exec: ${json.message}\n`,
    );
  }
  return EXIT_STATUS[json.outcome];
}

/**
 * The one object printed when there is no receipt to trust (or its journals do not match it):
 * the receipt's top-level shape with outcome unknown and the controller's reason. The run dir
 * is kept; `supervisor` names the process (it may still be running).
 */
function printUnknown(parsed: RunArgs, err: ControllerUnknownError, executable: string, runDir: string, durationMs: number): void {
  const marker = err.handle?.marker;
  const supervisor = {
    pid: marker?.supervisor?.pid ?? 0,
    startTimeTicks: String(marker?.supervisor?.startTimeTicks ?? 0n),
    bootId: marker?.supervisor?.bootId ?? "",
    sourceSha256: marker?.supervisorSourceSha256 ?? "",
    specSha256: marker?.specSha256 ?? "",
  };
  const fromReceipt = err.receipt !== undefined ? receiptToJson(err.receipt) : undefined;
  const object = {
    ...(fromReceipt ?? {
      ...receiptlessFields(parsed.argv, null, durationMs),
      supervisor,
      containment: null,
      controllerLossPolicy: "cancel",
      controllerLost: false,
    }),
    outcome: "unknown" as const,
    reason: err.reason,
    message: err.message,
    // What the supervisor's own receipt said, when there is one (journal_mismatch).
    supervisorOutcome: fromReceipt?.outcome ?? null,
    supervisorReason: fromReceipt?.reason ?? null,
    resolvedExecutable: executable,
    runDir,
  };
  if (parsed.json) {
    process.stdout.write(`${JSON.stringify(object)}\n`);
  } else {
    process.stderr.write(
      `seraph-exec: unknown (${err.reason}): ${err.message}\n` +
        `seraph-exec: supervisor pid ${supervisor.pid}; run dir ${runDir} (kept)\n`,
    );
  }
}
