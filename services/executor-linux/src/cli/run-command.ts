import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { CgroupRequestSchema, ControllerLossPolicy, JobUserSchema, SupervisorSpecSchema, type JobUser, type Receipt, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { checkJobUserAccess, checkJobUserWrite, jobUserAccessTools, jobUserLabel, type JobUserAccess } from "../native/setpriv.js";
import { defaultContainmentSettings, resolveHandRunJobUser, seraphExecJobUid } from "../supervisor-client/node-containment.js";
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
  runToReceipt,
  type SupervisorHandle,
} from "../supervisor-client/index.js";
import type { WarmSupervisor } from "../supervisor-client/warm.js";
import { handOverOrLaunch, warmOf } from "./run-launch.js";
import type { Prestart } from "./run-prestart.js";
import { parseArgs, resolveExecutable, UsageError, type RunArgs } from "./run-args.js";
import { EXIT_STATUS, notStarted, printReceipt, printUnknown } from "./run-output.js";

/** Usage of this subcommand (also printed by `seraph-exec <command> --help`). */
export const RUN_USAGE = `usage: seraph-exec run [--json] [--deadline-ms N] [--grace-ms N] [--cleanup-reserve-ms N]
                       [--cwd DIR] [--keep-run-dir] [--job-user USER] [--cgroup] [--no-network]
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
--cpu-millicores (each implies --cgroup) are enforced ceilings. Both need root. --no-network
runs the command in a network namespace of its own with only its loopback (no port of the host,
nothing outside); it needs a job user (root, not --job-user none).`;

/** Environment variables never passed to the command (they would change how node runs). */
const DROPPED_ENV = new Set(["NODE_OPTIONS"]);

/**
 * `seraph-exec run`: one command under a fresh supervisor; prints the receipt (see RUN_USAGE).
 * Exit status 0 only for succeeded.
 */
export async function runCommand(args: readonly string[], prestart?: Prestart): Promise<number> {
  const checked = checkRun(args);
  if (typeof checked === "number") {
    await prestart?.discard();
    return checked;
  }
  const warm = prestart !== undefined ? await warmOf(prestart) : undefined;
  const runDir = warm?.runDir ?? mkdtempSync(join(tmpdir(), "seraph-exec-"));
  const spec = specOf(checked.parsed, checked.argv, checked.reserveMs, runDir, checked.jobUser);
  return superviseRun(checked.parsed, spec, checked.executable, runDir, warm, checked.notes);
}

/** What `run` starts once its arguments and the job user passed their checks. */
interface CheckedRun {
  readonly parsed: RunArgs;
  readonly argv: string[];
  readonly executable: string;
  readonly reserveMs: number;
  readonly jobUser: Pick<JobUser, "uid" | "gid" | "name"> | undefined;
  /** Settles once the notes still being checked (the job user's write access) are printed. */
  readonly notes: Promise<void>;
}

/** The checks before anything starts: the exit status of a refusal (already reported), else what to run. */
function checkRun(args: readonly string[]): number | CheckedRun {
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
  if (parsed.noNetwork && jobUser === undefined) {
    process.stderr.write("seraph-exec run: --no-network needs a job user (root, and not --job-user none): a command running as root or as this process's user could leave its network namespace\n");
    return 2;
  }
  let notes: Promise<void> = Promise.resolve();
  if (jobUser !== undefined && process.geteuid?.() === 0) {
    const checked = checkJobUser(parsed, jobUser, executable);
    if (typeof checked === "number") return checked;
    notes = checked;
  }
  return { parsed, argv: [executable, ...rest], executable, reserveMs, jobUser, notes };
}

/** The supervisor spec of a hand run: this process's environment minus DROPPED_ENV, the deadline from now, policy cancel. */
function specOf(parsed: RunArgs, argv: string[], reserveMs: number, runDir: string, jobUser: Pick<JobUser, "uid" | "gid" | "name"> | undefined): SupervisorSpec {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !DROPPED_ENV.has(k)) env[k] = v;
  }
  return create(SupervisorSpecSchema, {
    jobId: `seraph-exec-${randomUUID()}`,
    attempt: 1,
    fence: 1n,
    commands: [{ name: "command", argv, cwd: parsed.cwd }],
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
    isolateNetwork: parsed.noNetwork,
    // seraph-exec cannot re-adopt a supervisor: when it is gone, its job is cancelled.
    controllerLossPolicy: ControllerLossPolicy.CANCEL,
  });
}

const CANCEL_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * Runs `spec` to its receipt and prints it (or one unknown object when there is none to trust);
 * SIGINT, SIGTERM and SIGHUP cancel. Resolves to the exit status.
 */
async function superviseRun(parsed: RunArgs, spec: SupervisorSpec, executable: string, runDir: string, warm: WarmSupervisor | undefined, notes: Promise<void>): Promise<number> {
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
        ...(warm !== undefined ? { launch: () => handOverOrLaunch(warm, spec) } : {}),
        onLaunched: (h) => {
          handle = h;
        },
      });
      await notes;
      // Checked against the receipt before anything is shown: the command could have rewritten
      // its journal through /proc/<supervisor>/fd.
      const c = receipt.commands[0];
      const journals = c?.started
        ? { stdout: await readVerifiedJournal(runDir, 0, "stdout", c.stdout), stderr: await readVerifiedJournal(runDir, 0, "stderr", c.stderr) }
        : undefined;
      return await printReceipt(parsed, receipt, journals, handle, executable, runDir);
    } catch (err) {
      await notes;
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
 * next step (exit 126; 125 without setpriv/test). A directory it cannot write is only a note,
 * asked without blocking: the promise settles once it is printed (or not needed).
 */
function checkJobUser(parsed: RunArgs, user: { uid: number; gid: number; name: string }, executable: string): number | Promise<void> {
  const who = `the job user ${jobUserLabel(user)}`;
  const tools = jobUserAccessTools();
  if (!tools.ok) {
    notStarted(parsed, "job_user_unavailable", `${who} cannot be used: ${tools.reason}; install util-linux and coreutils, or pass --job-user none to run the command as root`, executable);
    return 125;
  }
  const access: JobUserAccess = checkJobUserAccess(tools.setpriv, tools.test, user.uid, user.gid, parsed.cwd, executable, { write: false });
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
    default:
      // Only a note (many commands only read): asked without blocking the launch, printed as soon as known.
      return checkJobUserWrite(tools.setpriv, tools.test, user.uid, user.gid, parsed.cwd)
        .then((w) => {
          if (w.problem !== "cannot_write") return;
          process.stderr.write(`seraph-exec run: note: ${who} cannot write ${parsed.cwd} (${w.detail}); a command that writes there fails (chown it to ${user.uid}:${user.gid}, or --job-user none)\n`);
        })
        .catch(() => undefined);
  }
}

