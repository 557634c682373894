import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import {
  CgroupRequestSchema,
  JobUserSchema,
  NodeContainmentSchema,
  ResourceCeilingsSchema,
  type CgroupRequest,
  type ContainmentFacilities,
  type JobUser,
  type NodeContainment,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";

/** `isolation_claim` when commands run as the executor's own user. */
export const ISOLATION_NONE = "none";
/** `isolation_claim` when every slot has a job uid of its own (or there is one slot). */
export const ISOLATION_SEPARATE_JOB_UID = "separate_job_uid";
/** `isolation_claim` when one configured job user serves several slots. */
export const ISOLATION_SHARED_JOB_UID = "shared_job_uid";
/** `resource_enforcement` when no ceiling is enforced. */
export const ENFORCEMENT_NONE = "admission_and_wall_timeout_only";
/** Prefix of `resource_enforcement` when a per-job cgroup enforces ceilings (the list follows). */
export const ENFORCEMENT_CGROUP_PREFIX = "admission_wall_timeout_and_cgroup:";

/** `network_claim` when each step's commands run in a network namespace of their own with only its loopback. */
export const NETWORK_OWN_LOOPBACK = "own_loopback_only";
/** `network_claim` when the commands have the host's network. */
export const NETWORK_HOST = "host_network";

const CEILINGS = ["cpu", "memory", "pids"] as const;

/** How the operator configured job users. */
export type JobUserSetting =
  | { readonly kind: "auto" }
  | { readonly kind: "none" }
  | { readonly kind: "user"; readonly name: string; readonly uid: number; readonly gid: number };

/** The node's containment configuration (from the executor's environment, see config.ts). */
export interface ContainmentSettings {
  readonly jobUser: JobUserSetting;
  /** First uid (and gid) of the per-slot range: slot i runs as uid = gid = base + i. */
  readonly uidBase: number;
  readonly slotCount: number;
  /** Per-job cgroups (opt-in). */
  readonly cgroups: boolean;
  readonly cgroupParent: string;
  /** Ceilings to enforce through the cgroup; 0 = none for that resource. */
  readonly memoryBytes: number;
  readonly pids: number;
  readonly cpuMillicores: number;
  /** Root of the staged job directories when a job user is in effect (0711, root-owned). */
  readonly jobRoot: string;
  /**
   * SERAPH_JOB_NETWORK: "auto" (a network namespace of each step's own, only its loopback,
   * wherever the node can enforce it: root, a job user, the probe made one) or "host" (the host's network).
   */
  readonly network: "auto" | "host";
}

/** The most slots a node may have (SERAPH_SLOT_COUNT); slot i's job uid is base + i. */
export const MAX_SLOT_COUNT = 64;
/** Bounds of SERAPH_JOB_UID_BASE: above the usual human/system ranges' start, and room for every slot and seraph-exec's uid. */
export const JOB_UID_BASE_MIN = 1000;
export const JOB_UID_BASE_MAX = 0x7fffffff - MAX_SLOT_COUNT;

/**
 * The job uid (and gid) of `seraph-exec run` as root: the first id past every slot's range
 * (base + MAX_SLOT_COUNT, 64064 by default), so a command run by hand never shares a uid with
 * an executor job on the same host. Concurrent `seraph-exec run`s share it.
 */
export function seraphExecJobUid(uidBase: number): number {
  return uidBase + MAX_SLOT_COUNT;
}

/** Defaults: job users on when root (per-slot uids from 64000), cgroups off, 2 GiB / 512 pids / 2 CPUs, no network where enforceable. */
export function defaultContainmentSettings(slotCount = 1): ContainmentSettings {
  return {
    jobUser: { kind: "auto" },
    uidBase: 64_000,
    slotCount,
    cgroups: false,
    cgroupParent: "/seraph",
    memoryBytes: 2 * 1024 * 1024 * 1024,
    pids: 512,
    cpuMillicores: 2000,
    jobRoot: join(tmpdir(), "seraph-jobs"),
    network: "auto",
  };
}

/**
 * Parses SERAPH_JOB_USER: "auto" (per-slot uids when root), "none", "<uid>:<gid>", or a user name
 * looked up in `passwd` (/etc/passwd text; no NSS). uid/gid 0 are refused. Returns the setting or
 * a problem sentence.
 */
export function parseJobUserSetting(raw: string, passwd: () => string = () => readFileSync("/etc/passwd", "utf8")): JobUserSetting | string {
  if (raw === "" || raw === "auto") return { kind: "auto" };
  if (raw === "none") return { kind: "none" };
  const ids = /^(\d{1,10}):(\d{1,10})$/.exec(raw);
  if (ids !== null) {
    const uid = Number(ids[1]);
    const gid = Number(ids[2]);
    if (uid === 0 || gid === 0 || uid > 0x7fffffff || gid > 0x7fffffff) return `job user ${raw}: uid and gid must be between 1 and 2^31-1`;
    return { kind: "user", name: "", uid, gid };
  }
  if (!/^[a-z_][a-z0-9_-]{0,31}$/.test(raw)) return `job user ${JSON.stringify(raw)} is neither auto, none, uid:gid nor a user name`;
  let text: string;
  try {
    text = passwd();
  } catch (err) {
    return `job user ${raw}: /etc/passwd is unreadable (${(err as Error).message})`;
  }
  for (const line of text.split("\n")) {
    const f = line.split(":");
    if (f[0] !== raw || f.length < 4) continue;
    const uid = Number(f[2]);
    const gid = Number(f[3]);
    if (!Number.isInteger(uid) || !Number.isInteger(gid) || uid === 0 || gid === 0) return `job user ${raw} has uid ${f[2]} / gid ${f[3]}; it must be an unprivileged user`;
    return { kind: "user", name: raw, uid, gid };
  }
  return `job user ${raw} is not in /etc/passwd`;
}

/** True when the node switches commands to a job user (root executor, setpriv, not disabled). */
export function jobUsersActive(s: ContainmentSettings, f: ContainmentFacilities | undefined): boolean {
  return s.jobUser.kind !== "none" && f?.root === true && f.setprivPath !== "";
}

/**
 * True when each step's commands get a network namespace of their own: not turned off, a job user
 * in effect (a command running as root could setns back to the host's), and the facility probe
 * made one with its loopback up.
 */
export function networkIsolationActive(s: ContainmentSettings, f: ContainmentFacilities | undefined): boolean {
  return s.network !== "host" && jobUsersActive(s, f) && f?.networkNamespace === true;
}

/** Why a node's commands have the host's network (for the claim's sentence). */
function hostNetworkReason(s: ContainmentSettings, f: ContainmentFacilities | undefined): string {
  if (s.network === "host") return "SERAPH_JOB_NETWORK=host";
  if (!jobUsersActive(s, f)) return "no job user: a command running as the executor's user could leave a namespace";
  return "this host could not make a network namespace";
}

/** The job user of one slot, or undefined when commands run as the executor's own user. */
export function jobUserForSlot(s: ContainmentSettings, f: ContainmentFacilities | undefined, slotIndex: number): JobUser | undefined {
  if (!jobUsersActive(s, f)) return undefined;
  if (s.jobUser.kind === "user") return create(JobUserSchema, { uid: s.jobUser.uid, gid: s.jobUser.gid, name: s.jobUser.name });
  const id = s.uidBase + Math.max(0, slotIndex);
  return create(JobUserSchema, { uid: id, gid: id, name: "" });
}

/**
 * What this node claims for a job, from its configuration and its probed facilities: the exact
 * `isolation_claim` and `resource_enforcement`, the job user, the enforced and unenforced
 * ceilings with their values, and what the claim protects and does not. A per-job cgroup is only
 * claimed together with a job user: a command running as root could leave its cgroup.
 */
export function nodeContainment(s: ContainmentSettings, f: ContainmentFacilities | undefined): NodeContainment {
  const users = jobUsersActive(s, f);
  const shared = users && s.jobUser.kind === "user" && s.slotCount > 1;
  const isolationClaim = !users ? ISOLATION_NONE : shared ? ISOLATION_SHARED_JOB_UID : ISOLATION_SEPARATE_JOB_UID;
  const perJobCgroup = users && s.cgroups && (f?.cgroupLayout ?? "") !== "";
  const isolatedNetwork = networkIsolationActive(s, f);
  const available = new Set(f?.controllers ?? []);
  const values: Record<(typeof CEILINGS)[number], number> = { cpu: s.cpuMillicores, memory: s.memoryBytes, pids: s.pids };
  const enforced = perJobCgroup ? CEILINGS.filter((c) => values[c] > 0 && available.has(c)) : [];
  const unenforced = CEILINGS.filter((c) => !enforced.includes(c));
  const jobUser =
    !users ? "" : s.jobUser.kind === "user" ? (s.jobUser.name !== "" ? `${s.jobUser.name} (${s.jobUser.uid}:${s.jobUser.gid})` : `${s.jobUser.uid}:${s.jobUser.gid}`) : `uid = gid = ${s.uidBase} + slot index`;
  const range =
    !users ? "" : s.jobUser.kind === "user" ? `${s.jobUser.uid}:${s.jobUser.gid}` : s.slotCount === 1 ? `${s.uidBase}` : `${s.uidBase}-${s.uidBase + s.slotCount - 1}`;
  const protects = !users
    ? []
    : [
        "the supervisor process: the command runs under another uid and cannot signal, stop or ptrace it",
        "the supervisor's capability token and control socket (root-owned, 0600, in a 0700 run directory)",
        "the job's journals and receipt: the command cannot open them through /proc/<pid>/fd or the run directory",
        ...(shared ? [] : ["other jobs' staging and processes: each slot's uid owns only its own job directory (0700)"]),
        "the original repository against writes: the command gets only the staged copy, owned by the job user",
        "privilege gain: no supplementary groups, no capabilities, no_new_privs (setuid binaries do not elevate)",
        ...(perJobCgroup ? ["escape from the job's cgroup: cgroup.kill ends every process in it, and populated 0 is required beside ECHILD"] : []),
        ...(isolatedNetwork
          ? ["the network: each step's commands run in a network namespace of their own with only its loopback (up); they reach no port of the host (its database, NATS, the API), no abstract Unix socket, no other interface and nothing outside"]
          : []),
      ];
  const doesNotProtect = [
    ...(users ? [] : ["anything of the executor's own user: the command runs as that user, with its files and processes"]),
    "host files readable or writable by any user (world-readable files, world-writable directories such as /tmp)",
    ...(isolatedNetwork
      ? ["services on Unix sockets in the filesystem: a network namespace does not cover them; the socket's file and directory modes decide whether the job user may connect"]
      : [`the network: the command has the host's network access (${hostNetworkReason(s, f)}): every port on the host's loopback, such as a database that trusts loopback connections, and everything outside`]),
    ...(shared ? ["other jobs running at the same time on this node: they share the configured job user"] : []),
    ...(users ? ["other processes of the same job: they share the job's uid"] : []),
    "the kernel: a kernel privilege-escalation bug defeats the uid boundary",
    ...(unenforced.length > 0 ? [`resource use without a ceiling: ${unenforced.join(", ")}`] : []),
  ];
  return create(NodeContainmentSchema, {
    isolationClaim,
    resourceEnforcement: enforced.length > 0 ? `${ENFORCEMENT_CGROUP_PREFIX}${enforced.join(",")}` : ENFORCEMENT_NONE,
    jobUser,
    enforced,
    unenforced,
    ceilings: create(ResourceCeilingsSchema, {
      memoryBytes: BigInt(enforced.includes("memory") ? s.memoryBytes : 0),
      pids: enforced.includes("pids") ? s.pids : 0,
      cpuMillicores: enforced.includes("cpu") ? s.cpuMillicores : 0,
    }),
    protects,
    doesNotProtect,
    perJobCgroup,
    jobUidRange: range,
    networkClaim: isolatedNetwork ? NETWORK_OWN_LOOPBACK : NETWORK_HOST,
  });
}

/** The supervisor's cgroup request for an approved containment (undefined without a per-job cgroup). */
export function cgroupRequestFor(approved: NodeContainment, s: ContainmentSettings): CgroupRequest | undefined {
  if (!approved.perJobCgroup) return undefined;
  const k = approved.ceilings;
  return create(CgroupRequestSchema, {
    parent: s.cgroupParent,
    ceilings: create(ResourceCeilingsSchema, { memoryBytes: k?.memoryBytes ?? 0n, pids: k?.pids ?? 0, cpuMillicores: k?.cpuMillicores ?? 0 }),
  });
}

/**
 * The differences between the containment an approval states and what the node would hold now
 * (claims, job user range, cgroup, network, enforced ceilings and their values). Empty = the same.
 */
export function containmentDifferences(approved: NodeContainment | undefined, now: NodeContainment): string[] {
  const a = approved ?? create(NodeContainmentSchema, { isolationClaim: ISOLATION_NONE, resourceEnforcement: ENFORCEMENT_NONE });
  const out: string[] = [];
  const show = (v: unknown): string => JSON.stringify(v, (_k, x: unknown) => (typeof x === "bigint" ? x.toString() : x));
  const cmp = (name: string, x: unknown, y: unknown): void => {
    if (show(x) !== show(y)) out.push(`${name}: approved ${show(x)}, node now ${show(y)}`);
  };
  cmp("isolation_claim", a.isolationClaim || ISOLATION_NONE, now.isolationClaim);
  cmp("resource_enforcement", a.resourceEnforcement || ENFORCEMENT_NONE, now.resourceEnforcement);
  cmp("job_uid_range", a.jobUidRange, now.jobUidRange);
  cmp("per_job_cgroup", a.perJobCgroup, now.perJobCgroup);
  cmp("network_claim", a.networkClaim || NETWORK_HOST, now.networkClaim || NETWORK_HOST);
  cmp("ceilings", [a.ceilings?.cpuMillicores ?? 0, a.ceilings?.memoryBytes ?? 0n, a.ceilings?.pids ?? 0], [now.ceilings?.cpuMillicores ?? 0, now.ceilings?.memoryBytes ?? 0n, now.ceilings?.pids ?? 0]);
  return out;
}

/**
 * The job user of a hand-run command (`seraph-exec run`, `seraph-exec repair-run`): the flag's, or
 * by default (auto) uid = gid = {@link seraphExecJobUid} when root; undefined = this process's
 * user; a string = the problem with SERAPH_JOB_UID_BASE.
 */
export function resolveHandRunJobUser(setting: JobUserSetting, env: NodeJS.ProcessEnv): { uid: number; gid: number; name: string } | undefined | string {
  if (setting.kind === "none") return undefined;
  if (setting.kind === "user") return { uid: setting.uid, gid: setting.gid, name: setting.name };
  // auto, as the executor's: a job user only when root (another user cannot change uid).
  if (process.geteuid?.() !== 0) return undefined;
  const raw = env["SERAPH_JOB_UID_BASE"];
  let base = defaultContainmentSettings().uidBase;
  if (raw !== undefined && raw !== "") {
    if (!/^\d{1,10}$/.test(raw) || Number(raw) < JOB_UID_BASE_MIN || Number(raw) > JOB_UID_BASE_MAX) {
      return `SERAPH_JOB_UID_BASE must be an integer between ${JOB_UID_BASE_MIN} and ${JOB_UID_BASE_MAX}, got ${JSON.stringify(raw)}`;
    }
    base = Number(raw);
  }
  const id = seraphExecJobUid(base);
  return { uid: id, gid: id, name: "" };
}
