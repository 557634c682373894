import { readFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import {
  ContainmentReportSchema,
  JobUserSchema,
  ResourceCeilingsSchema,
  type ContainmentReport,
  type SupervisorSpec,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { Logger } from "./log.js";
import { DEFAULT_CGROUP_FS_ROOT, JobCgroup, detectCgroupLayout, type CgroupCounters } from "../native/cgroup.js";
import { createNetworkNamespaceCalls } from "../native/libc.js";
import type { NetworkNamespaceCalls, SpawnRequest, SpawnResult } from "../native/native-system.js";
import { JobNetworkNamespace } from "../native/network-namespace.js";
import { findTrustedSetpriv, setprivArgv, SETPRIV_CANDIDATES } from "../native/setpriv.js";

/** Least pids ceiling accepted: the supervisor's own threads sit in the job's cgroup while it spawns. */
export const MIN_PIDS_CEILING = 64;
/** Least memory ceiling accepted (16 MiB): below it not even the runtime starts. */
export const MIN_MEMORY_CEILING_BYTES = 16 * 1024 * 1024;
/** Least CPU ceiling accepted: a tenth of one CPU. */
export const MIN_CPU_MILLICORES = 100;

/** The spec asks for containment this supervisor cannot give; it refuses to start (exit 69). */
export class ContainmentUnavailableError extends Error {
  override readonly name = "ContainmentUnavailableError";
  /** @param code stable reason code; @param message what is missing */
  constructor(
    readonly code: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${code}: ${message}`, options);
  }
}

/** Problems of a spec's job_user / cgroup fields (the schema's rules plus the supervisor's). */
export function containmentProblems(spec: SupervisorSpec): string[] {
  const problems: string[] = [];
  const u = spec.jobUser;
  if (u !== undefined) {
    if (u.uid === 0 || u.gid === 0) problems.push("job_user uid and gid must not be 0");
    if (u.uid > 0x7fffffff || u.gid > 0x7fffffff) problems.push("job_user uid and gid must be below 2^31");
  }
  // A command running as root could setns back to the host's network (/proc/1/ns/net).
  if (spec.isolateNetwork && u === undefined) problems.push("isolate_network needs job_user: a command running as root could leave its network namespace");
  const c = spec.cgroup;
  if (c !== undefined) {
    if (!/^(\/[A-Za-z0-9_.-]{1,64}){1,8}$/.test(c.parent) || c.parent.split("/").some((p) => p === "." || p === "..")) {
      problems.push(`cgroup.parent ${JSON.stringify(c.parent)} must be an absolute path of plain names`);
    }
    const k = c.ceilings;
    if (k !== undefined) {
      if (k.pids !== 0 && k.pids < MIN_PIDS_CEILING) problems.push(`cgroup.ceilings.pids must be 0 or at least ${MIN_PIDS_CEILING}`);
      if (k.memoryBytes !== 0n && k.memoryBytes < BigInt(MIN_MEMORY_CEILING_BYTES)) problems.push(`cgroup.ceilings.memory_bytes must be 0 or at least ${MIN_MEMORY_CEILING_BYTES}`);
      if (k.cpuMillicores !== 0 && k.cpuMillicores < MIN_CPU_MILLICORES) problems.push(`cgroup.ceilings.cpu_millicores must be 0 or at least ${MIN_CPU_MILLICORES}`);
    }
  }
  return problems;
}

/** What Containment needs; injectable for tests. */
export interface ContainmentOptions {
  readonly spec: SupervisorSpec;
  readonly log: Logger;
  /** The supervisor's pid (moved into the job cgroup around each spawn). */
  readonly selfPid: number;
  readonly euid?: number;
  readonly cgroupFsRoot?: string;
  readonly setprivCandidates?: readonly string[];
  readonly selfCgroup?: () => string;
  /** The network-namespace calls (default: libc's through koffi). */
  readonly networkCalls?: () => NetworkNamespaceCalls;
}

const ZERO: CgroupCounters = { oomKills: 0, pidLimitHits: 0, memoryLimitHits: 0, memoryPeakBytes: 0 };

/**
 * A job's containment inside its supervisor: the job user every command is switched to (through
 * setpriv, see native/setpriv.ts), and the job's own cgroup. The command is born in the cgroup:
 * the supervisor moves itself in, posix_spawns (which returns only once the child has exec'd),
 * and moves itself out again, all synchronously, so no other supervisor code runs while it is
 * inside and cgroup.kill never targets it. Cleanup writes cgroup.kill when it escalates to SIGKILL;
 * after ECHILD, `cgroup.events` must say `populated 0` as well (both oracles, never either).
 */
export class Containment {
  readonly #o: ContainmentOptions;
  readonly #setpriv: string | undefined;
  readonly #cgroup: JobCgroup | undefined;
  readonly #layout: "v2" | "hybrid" | "";
  readonly #network: JobNetworkNamespace | undefined;
  #killUsed = false;
  #populatedZero = false;
  #problem = "";
  #removed = false;
  #final: CgroupCounters | undefined;

  /**
   * Checks and creates what the spec asks for: a job user needs this process to be root and a
   * trusted setpriv; a cgroup needs cgroup v2 and, for each ceiling, its controller. Throws
   * ContainmentUnavailableError (nothing is left behind) when any of it is missing.
   */
  constructor(o: ContainmentOptions) {
    this.#o = o;
    const { spec } = o;
    const euid = o.euid ?? process.geteuid?.() ?? -1;
    if (spec.jobUser !== undefined) {
      if (euid !== 0) throw new ContainmentUnavailableError("job_user_needs_root", `the spec names job user ${spec.jobUser.uid}:${spec.jobUser.gid}, but the supervisor runs as uid ${euid}`);
      const found = findTrustedSetpriv(o.setprivCandidates ?? SETPRIV_CANDIDATES);
      if (!found.ok) throw new ContainmentUnavailableError("job_user_unavailable", found.reason);
      this.#setpriv = found.path;
    }
    if (spec.cgroup !== undefined) {
      if (euid !== 0) throw new ContainmentUnavailableError("cgroup_needs_root", `per-job cgroups need root; the supervisor runs as uid ${euid}`);
      const fsRoot = o.cgroupFsRoot ?? DEFAULT_CGROUP_FS_ROOT;
      const layout = detectCgroupLayout(fsRoot);
      if (layout === undefined) throw new ContainmentUnavailableError("cgroup_v2_missing", `no cgroup v2 hierarchy under ${fsRoot}`);
      const k = spec.cgroup.ceilings;
      try {
        this.#cgroup = JobCgroup.create({
          layout,
          parent: spec.cgroup.parent,
          name: cgroupName(spec),
          memoryBytes: Number(k?.memoryBytes ?? 0n),
          pids: k?.pids ?? 0,
          cpuMillicores: k?.cpuMillicores ?? 0,
          selfCgroup: (o.selfCgroup ?? (() => readFileSync("/proc/self/cgroup", "utf8")))(),
        });
      } catch (err) {
        throw new ContainmentUnavailableError("cgroup_create_failed", (err as Error).message, { cause: err });
      }
      this.#layout = layout.kind;
      o.log.info({ event: "cgroup_created", dirs: this.#cgroup.dirs.map((d) => d.dir), enforced: this.#cgroup.enforced }, "job cgroup created");
    } else {
      this.#layout = "";
    }
    this.#network = spec.isolateNetwork ? this.#makeNetwork(euid) : undefined;
  }

  /** The job's network namespace (last: a failure removes the cgroup just made, so nothing is left). */
  #makeNetwork(euid: number): JobNetworkNamespace {
    const fail = (code: string, message: string, cause?: unknown): never => {
      this.#cgroup?.remove();
      throw new ContainmentUnavailableError(code, message, { cause });
    };
    if (euid !== 0) return fail("network_namespace_needs_root", `a network namespace of the job's own needs root; the supervisor runs as uid ${euid}`);
    let ns: JobNetworkNamespace;
    try {
      ns = JobNetworkNamespace.create((this.#o.networkCalls ?? createNetworkNamespaceCalls)());
    } catch (err) {
      return fail("network_namespace_failed", (err as Error).message, err);
    }
    this.#o.log.info({ event: "network_namespace_created", namespace: ns.namespace, host: ns.hostNamespace, interfaces: ns.interfaces }, "job network namespace created (loopback only, up)");
    return ns;
  }

  /** The job's cgroup, when there is one. */
  get cgroup(): JobCgroup | undefined {
    return this.#cgroup;
  }

  /**
   * Spawns `request` contained: through setpriv as the job user (when set), in the job's network
   * namespace (when isolated: the main thread enters it only for the spawn) and born in the job's
   * cgroup (when there is one). Throws when the supervisor could not enter the namespace, or
   * leave it or the cgroup again (a fatal error: the run heads to cleanup, and cgroup.kill is
   * refused while it is inside).
   */
  spawn(request: SpawnRequest, spawn: (r: SpawnRequest) => SpawnResult): SpawnResult {
    const net = this.#network;
    if (net === undefined) return this.#spawnInCgroup(request, spawn);
    net.enter();
    try {
      return this.#spawnInCgroup(request, spawn);
    } finally {
      net.leave();
    }
  }

  #spawnInCgroup(request: SpawnRequest, spawn: (r: SpawnRequest) => SpawnResult): SpawnResult {
    const user = this.#o.spec.jobUser;
    const contained: SpawnRequest =
      user !== undefined && this.#setpriv !== undefined
        ? { ...request, path: this.#setpriv, argv: setprivArgv(this.#setpriv, user.uid, user.gid, request.argv) }
        : request;
    const cg = this.#cgroup;
    if (cg === undefined) return spawn(contained);
    cg.enter(this.#o.selfPid);
    try {
      return spawn(contained);
    } finally {
      cg.leave(this.#o.selfPid);
    }
  }

  /** The kernel counters now (zeros without a cgroup); used for per-command deltas. */
  counters(): CgroupCounters {
    return this.#cgroup?.counters() ?? ZERO;
  }

  /** Cleanup escalated to SIGKILL: kill the whole cgroup at once (forks in flight included). */
  killAll(): void {
    const cg = this.#cgroup;
    if (cg === undefined || cg.inside) return;
    try {
      cg.kill();
      this.#killUsed = true;
      this.#o.log.info({ event: "cgroup_kill" }, "cgroup.kill written");
    } catch (err) {
      this.#o.log.warn({ event: "cgroup_kill_failed", err }, "cgroup.kill failed; pidfd rounds continue");
    }
  }

  /**
   * The second oracle, after ECHILD: `populated 0`. When the cgroup still holds processes (none of
   * them can be the supervisor's descendants any more), they are killed through cgroup.kill and
   * awaited until `budgetEnd`; the run is then not provably clean (`problem` says why).
   */
  async verifyEmpty(now: () => number, budgetEnd: number): Promise<boolean> {
    const cg = this.#cgroup;
    if (cg === undefined) return true;
    let populated: boolean;
    try {
      populated = cg.populated();
      if (populated) {
        this.#problem = "cgroup_populated_after_echild: processes outside the supervisor's tree were in the job's cgroup after ECHILD; they were killed through cgroup.kill";
        this.#o.log.warn({ event: "cgroup_populated_after_echild" }, "job cgroup populated after ECHILD");
        if (!cg.inside) {
          cg.kill();
          this.#killUsed = true;
        }
        while (populated && now() < budgetEnd) {
          await new Promise((r) => setTimeout(r, 5));
          populated = cg.populated();
        }
      }
    } catch (err) {
      this.#problem = `cgroup_unreadable: ${(err as Error).message}`;
      return false;
    }
    this.#populatedZero = !populated;
    if (populated) this.#problem = "cgroup_populated: the job's cgroup still held processes when the cleanup budget ran out";
    return this.#populatedZero && this.#problem === "";
  }

  /** Reads the final counters and removes the job's cgroups (once they are empty). */
  finish(): void {
    this.#network?.close();
    const cg = this.#cgroup;
    if (cg === undefined || this.#final !== undefined) return;
    this.#final = cg.counters();
    this.#removed = this.#populatedZero && cg.remove();
    this.#o.log.info({ event: "cgroup_finished", ...this.#final, removed: this.#removed }, "job cgroup finished");
  }

  /** Removes the cgroups without a receipt (the supervisor failed before it ran anything). */
  abandon(): void {
    this.#network?.close();
    this.#cgroup?.remove();
  }

  /** The receipt's containment report. */
  report(): ContainmentReport | undefined {
    const { spec } = this.#o;
    if (spec.jobUser === undefined && this.#cgroup === undefined && this.#network === undefined) return undefined;
    const c = this.#final ?? this.#cgroup?.counters() ?? ZERO;
    const k = spec.cgroup?.ceilings;
    return create(ContainmentReportSchema, {
      ...(spec.jobUser !== undefined ? { jobUser: create(JobUserSchema, { uid: spec.jobUser.uid, gid: spec.jobUser.gid, name: spec.jobUser.name }) } : {}),
      cgroupPath: this.#cgroup?.v2.dir ?? "",
      cgroupLayout: this.#layout,
      enforced: [...(this.#cgroup?.enforced ?? [])],
      ...(k !== undefined ? { ceilings: create(ResourceCeilingsSchema, { memoryBytes: k.memoryBytes, pids: k.pids, cpuMillicores: k.cpuMillicores }) } : {}),
      cgroupKillUsed: this.#killUsed,
      populatedZeroObserved: this.#populatedZero,
      oomKills: c.oomKills,
      pidLimitHits: c.pidLimitHits,
      memoryLimitHits: BigInt(c.memoryLimitHits),
      memoryPeakBytes: BigInt(c.memoryPeakBytes),
      cgroupsRemoved: this.#removed,
      problem: this.#problem,
      networkIsolated: this.#network !== undefined,
      networkNamespace: this.#network?.namespace ?? "",
      networkInterfaces: [...(this.#network?.interfaces ?? [])],
    });
  }

  /** Why the cgroup oracle did not hold ("" when it did or there is no cgroup). */
  get problem(): string {
    return this.#problem;
  }
}

/** The job cgroup's name: job id, attempt and fence (plain characters only). */
export function cgroupName(spec: SupervisorSpec): string {
  return `job-${spec.jobId.replace(/[^A-Za-z0-9_.-]/g, "_").slice(0, 80)}-a${spec.attempt}-f${spec.fence}`;
}

