import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { sha256Hex } from "@seraph/kit";
import { SupervisorSpecSchema, type OwnerMarker, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { DEFAULT_CGROUP_FS_ROOT, detectCgroupLayout } from "../native/cgroup.js";
import { jobCgroupPlaces, pidfdKiller, sweepJobCgroup, type PidfdCalls, type SweptCgroupDir } from "../native/cgroup-sweep.js";
import { createNativeSystem } from "../native/libc.js";
import { findInPidNamespace, readPidNamespace } from "../native/pid-namespace.js";
import { isExited, type ProcFs } from "../native/proc-fs.js";
import { verifySupervisorIdentity } from "../supervisor-client/identity.js";
import { cgroupName } from "../supervisor/containment.js";
import { RunDirFiles } from "../supervisor/run-dir.js";

/** The artifact kind (and name) of a cgroup cleanup proof; the jobs service verifies it (recovery/cgroup-proof.ts). */
export const CGROUP_CLEANUP_KIND = "cgroup_cleanup";
export const CGROUP_CLEANUP_NAME = "cgroup-cleanup.json";
/** The recovery reason (Recovery.proof) a verified cgroup proof releases a slot with. */
export const CLEANUP_PROVED_BY_CGROUP = "cleanup_proved_by_cgroup";
/** How long the sweep waits for the job's cgroup to empty after cgroup.kill. */
export const CGROUP_SWEEP_BUDGET_MS = 5000;
/** The most of supervisor.log read for the recorded pids (it holds ~40 lines a job). */
const LOG_READ_LIMIT = 8 * 1024 * 1024;

/** A pid the supervisor recorded (itself in the owner marker, each command in its log), and how it is known gone. */
export interface RecordedPid {
  readonly role: "supervisor" | "command";
  readonly pid: number;
  readonly startTimeTicks: string;
  readonly gone: "absent" | "exited" | "reused";
}

/** What the executor observed and did (stored as JSON, verified by the jobs service). */
export interface CgroupCleanupEvidence {
  readonly jobId: string;
  readonly attempt: number;
  /** The marker's fence (the supervisor's cgroup is named by it). */
  readonly fence: string;
  readonly nodeId: string;
  readonly incarnationId: string;
  readonly bootId: string;
  readonly supervisor: { readonly pid: number; readonly startTimeTicks: string };
  readonly specSha256: string;
  readonly cgroupParent: string;
  readonly cgroupName: string;
  readonly layout: "v2" | "hybrid";
  readonly cgroups: readonly SweptCgroupDir[];
  readonly rounds: number;
  readonly pids: readonly RecordedPid[];
  readonly observedUnixMs: number;
}

/** Why no proof was made (the slot stays held). */
export interface CgroupNoProof {
  readonly code: "no_cgroup" | "spec_unreadable" | "other_boot" | "supervisor_alive" | "cgroup_not_visible" | "cgroup_populated" | "pid_alive" | "log_unreadable";
  readonly message: string;
}

/** What the proof needs of the node; the rest is injectable for tests. */
export interface CgroupProofDeps {
  readonly identity: { readonly nodeId: string; readonly bootId: string; readonly incarnationId: string };
  readonly proc: ProcFs;
  readonly cgroupFsRoot?: string | undefined;
  readonly procRoot?: string | undefined;
  readonly native?: PidfdCalls | undefined;
  readonly budgetMs?: number | undefined;
  readonly now?: (() => number) | undefined;
}

/** The spec the supervisor ran, read from its run directory and bound to the marker's spec hash (recorded in PostgreSQL). */
async function recordedSpec(marker: OwnerMarker): Promise<SupervisorSpec | CgroupNoProof> {
  let bytes: Uint8Array;
  try {
    bytes = await readFile(join(marker.runDir, RunDirFiles.spec));
  } catch (err) {
    return { code: "spec_unreadable", message: `${join(marker.runDir, RunDirFiles.spec)}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
  }
  if (marker.specSha256 === "" || sha256Hex(bytes) !== marker.specSha256) {
    return { code: "spec_unreadable", message: `the run directory's spec hashes to ${sha256Hex(bytes)}, not the recorded ${marker.specSha256 || "(none)"}` };
  }
  return fromBinary(SupervisorSpecSchema, bytes);
}

/** The command pids (with start times) the supervisor logged when it spawned them. */
async function loggedCommandPids(runDir: string): Promise<{ pid: number; startTimeTicks: string }[] | CgroupNoProof> {
  let text: string;
  try {
    const bytes = await readFile(join(runDir, RunDirFiles.log));
    text = bytes.subarray(0, LOG_READ_LIMIT).toString("utf8");
  } catch (err) {
    return { code: "log_unreadable", message: `${join(runDir, RunDirFiles.log)}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
  }
  const out: { pid: number; startTimeTicks: string }[] = [];
  for (const line of text.split("\n")) {
    if (!line.includes('"event":"spawned"')) continue;
    try {
      const e = JSON.parse(line) as { childPid?: unknown; childStartTimeTicks?: unknown };
      if (typeof e.childPid === "number" && e.childPid > 0) out.push({ pid: e.childPid, startTimeTicks: typeof e.childStartTimeTicks === "string" ? e.childStartTimeTicks : "" });
    } catch {
      // A line cut by the supervisor's death: its pid was never logged whole.
    }
  }
  return out;
}

/**
 * How `pid` (a pid in the supervisor's PID namespace, started at `startTimeTicks`) is known gone
 * from here, or undefined while a process with that pid and start time (or, with no recorded
 * start time, any process with that pid) still runs.
 */
function goneHow(marker: OwnerMarker, pid: number, startTimeTicks: string, deps: CgroupProofDeps): RecordedPid["gone"] | undefined {
  const procRoot = deps.procRoot ?? "/proc";
  let here: number | undefined = pid;
  if (marker.pidNamespace !== "" && marker.pidNamespace !== readPidNamespace(procRoot, "self")) here = findInPidNamespace(procRoot, marker.pidNamespace, pid);
  const stat = here === undefined ? undefined : deps.proc.readStat(here);
  if (stat === undefined) return "absent";
  if (isExited(stat)) return "exited";
  if (startTimeTicks !== "" && String(stat.startTimeTicks) !== startTimeTicks) return "reused";
  return undefined;
}

/**
 * For a supervisor that died without a receipt, on this boot: kills whatever is left in the
 * job's own cgroup (cgroup.kill, or pid by pid in v1 hierarchies), waits bounded for it to be
 * empty, removes it, and checks that every pid the supervisor recorded is gone. Returns the
 * evidence, or why there is none. Refuses (never signals anything) while the recorded supervisor
 * still runs, for another boot, without a cgroup in the spec the marker's hash names, or when the
 * cgroup hierarchy the supervisor used is not visible here.
 */
export async function proveCgroupCleanup(deps: CgroupProofDeps, marker: OwnerMarker): Promise<CgroupCleanupEvidence | CgroupNoProof> {
  const spec = await recordedSpec(marker);
  if ("code" in spec) return spec;
  if (spec.cgroup === undefined) return { code: "no_cgroup", message: "the job had no cgroup of its own" };
  const boot = marker.supervisor?.bootId ?? "";
  if (boot !== deps.identity.bootId) return { code: "other_boot", message: "the marker is from another boot (the boot-id proof applies)" };
  const verdict = await verifySupervisorIdentity(marker, deps.proc);
  if (verdict === "alive") return { code: "supervisor_alive", message: `the recorded supervisor (pid ${marker.supervisor?.pid}) still runs` };
  if (verdict === "other_boot") return { code: "other_boot", message: "the host's boot id changed since the marker" };
  const root = deps.cgroupFsRoot ?? DEFAULT_CGROUP_FS_ROOT;
  const layout = detectCgroupLayout(root);
  const name = cgroupName(spec);
  const places = layout && jobCgroupPlaces(layout, spec.cgroup.parent, name);
  if (layout === undefined || places === undefined) return { code: "cgroup_not_visible", message: `the cgroup hierarchy with ${spec.cgroup.parent} is not visible under ${root}` };
  const now = deps.now ?? Date.now;
  const native = deps.native ?? createNativeSystem();
  const sweep = await sweepJobCgroup(places, { killMember: pidfdKiller(native), deadlineMs: now() + (deps.budgetMs ?? CGROUP_SWEEP_BUDGET_MS), now });
  if (!sweep.empty) return { code: "cgroup_populated", message: sweep.problem };
  const commands = await loggedCommandPids(marker.runDir);
  if ("code" in commands) return commands;
  const supervisor = { pid: marker.supervisor?.pid ?? 0, startTimeTicks: String(marker.supervisor?.startTimeTicks ?? "") };
  const pids: RecordedPid[] = [];
  for (const [role, r] of [["supervisor", supervisor] as const, ...commands.map((c) => ["command", c] as const)]) {
    const gone = goneHow(marker, r.pid, r.startTimeTicks, deps);
    if (gone === undefined) return { code: "pid_alive", message: `recorded ${role} pid ${r.pid}${r.startTimeTicks === "" ? " (no start time recorded)" : ` (start ${r.startTimeTicks})`} still runs` };
    pids.push({ role, pid: r.pid, startTimeTicks: r.startTimeTicks, gone });
  }
  return {
    jobId: marker.jobId,
    attempt: marker.attempt,
    fence: String(marker.fence),
    nodeId: deps.identity.nodeId,
    incarnationId: deps.identity.incarnationId,
    bootId: deps.identity.bootId,
    supervisor,
    specSha256: marker.specSha256,
    cgroupParent: spec.cgroup.parent,
    cgroupName: name,
    layout: layout.kind,
    cgroups: sweep.dirs,
    rounds: sweep.rounds,
    pids,
    observedUnixMs: now(),
  };
}

/** The evidence as the artifact's bytes (one JSON line). */
export function cgroupEvidenceBytes(e: CgroupCleanupEvidence): Uint8Array {
  return Buffer.from(`${JSON.stringify(e)}\n`, "utf8");
}
