import { isAbsolute, join } from "node:path";
import { ControllerLossPolicy, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { containmentProblems } from "./containment.js";
import { MAX_SOCKET_PATH_BYTES, RunDirFiles } from "./run-dir.js";

/** Per-stream cap from the seeds (not to be widened); also the default when the spec says 0. */
export const STREAM_LIMIT_MAX_BYTES = 1024 * 1024;
/** Job-wide output cap from the seeds (not to be widened); also the default when the spec says 0. */
export const OUTPUT_LIMIT_MAX_BYTES = 16 * 1024 * 1024;
/**
 * Time the cleanup reserve must hold beyond the grace: SIGKILL rounds, reaping to ECHILD
 * and writing the receipt. A reserve below grace + this margin is refused.
 */
export const MIN_KILL_MARGIN_MS = 250;

/** Default grace for a new HELLO after the last controller left (policy CANCEL). */
export const CONTROLLER_LOSS_GRACE_DEFAULT_MS = 2000;
/** Largest controller_loss_grace_ms the schema allows. */
export const CONTROLLER_LOSS_GRACE_MAX_MS = 60_000;

/** The spec's controller-loss grace (0 → the 2 s default). */
export function controllerLossGraceMs(spec: SupervisorSpec): number {
  return spec.controllerLossGraceMs === 0 ? CONTROLLER_LOSS_GRACE_DEFAULT_MS : spec.controllerLossGraceMs;
}

/** Most argv entries (argv[0] included) one command may have (the schema's bound). */
export const MAX_ARGV_ENTRIES = 64;

const NAME_PATTERN = /^[a-z][a-z0-9_-]{0,31}$/;

/** A spec the supervisor will not run, with every reason. */
export class InvalidSpecError extends Error {
  override readonly name = "InvalidSpecError";
  /** @param problems one sentence per violated rule */
  constructor(readonly problems: readonly string[]) {
    super(`invalid supervisor spec: ${problems.join("; ")}`);
  }
}

/** The limits a supervisor actually applies to a spec (zero means the seed default). */
export interface EffectiveLimits {
  readonly streamLimitBytes: number;
  readonly outputLimitBytes: number;
}

/** Resolves the spec's stream/output limits (0 → default; never above the seed caps). */
export function effectiveLimits(spec: SupervisorSpec): EffectiveLimits {
  const stream = spec.streamLimitBytes === 0n ? STREAM_LIMIT_MAX_BYTES : Number(spec.streamLimitBytes);
  const output = spec.outputLimitBytes === 0n ? OUTPUT_LIMIT_MAX_BYTES : Number(spec.outputLimitBytes);
  return { streamLimitBytes: stream, outputLimitBytes: output };
}

/**
 * Checks a spec against the schema's rules (mirrored here instead of running protovalidate:
 * loading its CEL runtime costs the supervisor ~0.5 s at every launch) and the supervisor's
 * own: absolute argv[0], cwd and run dir, a reserve that covers the grace plus the kill
 * margin, limits within the seed caps, a socket path that fits sockaddr_un. With `nowUnixMs`
 * the deadline must also leave time for the commands. Returns the problems (empty = valid).
 */
export function specProblems(spec: SupervisorSpec, nowUnixMs?: number): string[] {
  const problems: string[] = [];
  if (spec.jobId.length === 0) problems.push("job_id is empty");
  if (spec.commands.length < 1 || spec.commands.length > 8) problems.push("commands must hold 1 to 8 entries");
  spec.commands.forEach((c, i) => {
    if (!NAME_PATTERN.test(c.name)) problems.push(`commands[${i}].name ${JSON.stringify(c.name)} does not match ${NAME_PATTERN}`);
    if (c.argv.length < 1 || c.argv.length > MAX_ARGV_ENTRIES) problems.push(`commands[${i}].argv must hold 1 to ${MAX_ARGV_ENTRIES} entries`);
    const exe = c.argv[0] ?? "";
    if (!isAbsolute(exe)) problems.push(`commands[${i}].argv[0] ${JSON.stringify(exe)} is not an absolute path`);
    if (c.argv.some((a) => a.includes("\0"))) problems.push(`commands[${i}].argv contains a NUL byte`);
    if (!isAbsolute(c.cwd)) problems.push(`commands[${i}].cwd ${JSON.stringify(c.cwd)} is not an absolute path`);
  });
  for (const [k, v] of Object.entries(spec.env)) {
    if (k.length === 0 || k.includes("=") || k.includes("\0")) problems.push(`env key ${JSON.stringify(k)} is invalid`);
    if (v.includes("\0")) problems.push(`env value of ${k} contains a NUL byte`);
  }
  if (!isAbsolute(spec.runDir)) problems.push(`run_dir ${JSON.stringify(spec.runDir)} is not an absolute path`);
  else if (Buffer.byteLength(join(spec.runDir, RunDirFiles.socket)) > MAX_SOCKET_PATH_BYTES) {
    problems.push(`run_dir is too long: the socket path must fit in ${MAX_SOCKET_PATH_BYTES} bytes`);
  }
  if (spec.cleanupReserveMs < spec.graceMs + MIN_KILL_MARGIN_MS) {
    problems.push(`cleanup_reserve_ms (${spec.cleanupReserveMs}) must be at least grace_ms (${spec.graceMs}) + ${MIN_KILL_MARGIN_MS} ms`);
  }
  if (!Object.values(ControllerLossPolicy).includes(spec.controllerLossPolicy)) {
    problems.push(`controller_loss_policy ${spec.controllerLossPolicy} is not a defined value`);
  }
  if (spec.controllerLossGraceMs > CONTROLLER_LOSS_GRACE_MAX_MS) {
    problems.push(`controller_loss_grace_ms exceeds ${CONTROLLER_LOSS_GRACE_MAX_MS}`);
  }
  const limits = effectiveLimits(spec);
  if (limits.streamLimitBytes > STREAM_LIMIT_MAX_BYTES) problems.push(`stream_limit_bytes exceeds ${STREAM_LIMIT_MAX_BYTES}`);
  if (limits.outputLimitBytes > OUTPUT_LIMIT_MAX_BYTES) problems.push(`output_limit_bytes exceeds ${OUTPUT_LIMIT_MAX_BYTES}`);
  problems.push(...containmentProblems(spec));
  if (spec.deadlineUnixMs <= 0n) problems.push("deadline_unix_ms is not set");
  else if (nowUnixMs !== undefined && Number(spec.deadlineUnixMs) - spec.cleanupReserveMs <= nowUnixMs) {
    problems.push("deadline_unix_ms leaves no time for the commands before the cleanup reserve");
  }
  return problems;
}

/** Throws InvalidSpecError when `specProblems` finds anything. */
export function assertValidSpec(spec: SupervisorSpec, nowUnixMs?: number): void {
  const problems = specProblems(spec, nowUnixMs);
  if (problems.length > 0) throw new InvalidSpecError(problems);
}
