import { accessSync, constants as fsConstants, statSync } from "node:fs";
import { delimiter, isAbsolute, resolve } from "node:path";
import { parseJobUserSetting, type JobUserSetting } from "../supervisor-client/node-containment.js";
import { MAX_ARGV_ENTRIES } from "../supervisor-client/index.js";

/** The parsed options and argv of `seraph-exec run`. */
export interface RunArgs {
  json: boolean;
  deadlineMs: number;
  graceMs: number;
  reserveMs: number | undefined;
  cwd: string;
  keepRunDir: boolean;
  /** auto: the default (a job user when root, resolved in resolveJobUser). */
  jobUser: JobUserSetting;
  cgroup: boolean;
  /** --no-network: the command runs in a network namespace of its own (only its loopback). */
  noNetwork: boolean;
  memoryBytes: number;
  pids: number;
  cpuMillicores: number;
  argv: string[];
}

/** A malformed command line (exit 2, with the usage). */
export class UsageError extends Error {}

function int(name: string, v: string | undefined): number {
  if (v === undefined || !/^\d+$/.test(v)) throw new UsageError(`${name} needs a non-negative integer`);
  return Number(v);
}

/** Each option of `seraph-exec run`: applies it to `out`, taking its value (if any) from `value()`. */
const OPTIONS: Readonly<Record<string, (out: RunArgs, value: () => string | undefined, name: string) => void>> = {
  "--json": (out) => {
    out.json = true;
  },
  "--keep-run-dir": (out) => {
    out.keepRunDir = true;
  },
  "--deadline-ms": (out, value, name) => {
    out.deadlineMs = int(name, value());
  },
  "--grace-ms": (out, value, name) => {
    out.graceMs = int(name, value());
  },
  "--cleanup-reserve-ms": (out, value, name) => {
    out.reserveMs = int(name, value());
  },
  "--job-user": (out, value) => {
    const v = value();
    if (v === undefined || v === "") throw new UsageError("--job-user needs auto, none, <uid>:<gid> or a user name");
    const parsed = parseJobUserSetting(v);
    if (typeof parsed === "string") throw new UsageError(`--job-user: ${parsed}`);
    out.jobUser = parsed;
  },
  "--cgroup": (out) => {
    out.cgroup = true;
  },
  "--no-network": (out) => {
    out.noNetwork = true;
  },
  "--memory-bytes": (out, value, name) => {
    out.memoryBytes = int(name, value());
    out.cgroup = true;
  },
  "--pids": (out, value, name) => {
    out.pids = int(name, value());
    out.cgroup = true;
  },
  "--cpu-millicores": (out, value, name) => {
    out.cpuMillicores = int(name, value());
    out.cgroup = true;
  },
  "--cwd": (out, value) => {
    const v = value();
    if (v === undefined) throw new UsageError("--cwd needs a directory");
    out.cwd = resolve(v);
  },
};

/** Parses `seraph-exec run` arguments; throws UsageError on anything malformed. */
export function parseArgs(args: readonly string[]): RunArgs {
  const out: RunArgs = {
    json: false,
    deadlineMs: 180_000,
    graceMs: 2000,
    reserveMs: undefined,
    cwd: process.cwd(),
    keepRunDir: false,
    jobUser: { kind: "auto" },
    cgroup: false,
    noNetwork: false,
    memoryBytes: 0,
    pids: 0,
    cpuMillicores: 0,
    argv: [],
  };
  let i = 0;
  for (; i < args.length; i++) {
    const a = args[i];
    if (a === "--") {
      i++;
      break;
    }
    if (a === undefined || !a.startsWith("--")) break;
    const apply = Object.hasOwn(OPTIONS, a) ? OPTIONS[a] : undefined;
    if (apply === undefined) throw new UsageError(`unknown option ${a}`);
    apply(out, () => args[++i], a);
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
export function resolveExecutable(name: string, cwd: string, path: string | undefined): string | undefined {
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
