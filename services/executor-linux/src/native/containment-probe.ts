import { create } from "@bufbuild/protobuf";
import { ContainmentFacilitiesSchema, type ContainmentFacilities } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { readFileSync } from "node:fs";
import { CEILING_NAMES, DEFAULT_CGROUP_FS_ROOT, JobCgroup, detectCgroupLayout } from "./cgroup.js";
import { createNetworkNamespaceCalls } from "./libc.js";
import { networkNamespaceProblem } from "./network-namespace.js";
import { findTrustedSetpriv, SETPRIV_CANDIDATES } from "./setpriv.js";

/** What probeContainment needs; injectable so tests can lay out a fake cgroup root. */
export interface ContainmentProbeDeps {
  readonly cgroupFsRoot?: string;
  readonly euid?: number;
  readonly setprivCandidates?: readonly string[];
  /** /proc/self/cgroup text (default: read it). */
  readonly selfCgroup?: string;
  /** Parent of the probe cgroup, relative to each hierarchy root (default "/seraph"). */
  readonly cgroupParent?: string;
  /** Makes and drops a job network namespace: undefined when it worked, else why not (default: the real one, as root). */
  readonly networkProbe?: () => string | undefined;
}

/**
 * Probes what this host offers for containment: whether this process is root (and so can run
 * commands as a job user), a trusted setpriv, the cgroup layout, and which ceilings can really be
 * enforced: as root it creates a probe cgroup under the parent with every available ceiling
 * written, then removes it, and makes a network namespace with its loopback up, then lets it go.
 * Nothing here blocks supervision; it decides what a node may claim.
 */
export function probeContainment(deps: ContainmentProbeDeps = {}): ContainmentFacilities {
  const fsRoot = deps.cgroupFsRoot ?? DEFAULT_CGROUP_FS_ROOT;
  const euid = deps.euid ?? process.geteuid?.() ?? -1;
  const notes: string[] = [];
  const root = euid === 0;
  if (!root) notes.push(`This process runs as uid ${euid}, not root: commands run as this user, and no per-job cgroup is created.`);
  const setpriv = findTrustedSetpriv(deps.setprivCandidates ?? SETPRIV_CANDIDATES);
  if (!setpriv.ok) notes.push(setpriv.reason);
  const layout = detectCgroupLayout(fsRoot);
  let controllers: string[] = [];
  let usable = layout !== undefined;
  if (layout === undefined) {
    notes.push(`No cgroup v2 hierarchy under ${fsRoot} (neither ${fsRoot}/cgroup.controllers nor ${fsRoot}/unified/cgroup.controllers).`);
  } else {
    notes.push(...layout.notes);
    const available = CEILING_NAMES.filter((c) => layout.controllers.has(c));
    if (root) {
      try {
        const cg = JobCgroup.create({
          layout,
          parent: deps.cgroupParent ?? "/seraph",
          name: `probe-${process.pid}`,
          ...(available.includes("cpu") ? { cpuMillicores: 1000 } : {}),
          ...(available.includes("memory") ? { memoryBytes: 256 * 1024 * 1024 } : {}),
          ...(available.includes("pids") ? { pids: 64 } : {}),
          selfCgroup: deps.selfCgroup ?? readFileSync("/proc/self/cgroup", "utf8"),
        });
        cg.remove();
        controllers = available;
      } catch (err) {
        usable = false;
        notes.push(`A probe cgroup could not be created with its ceilings: ${(err as Error).message}.`);
      }
    }
  }
  let networkNamespace = false;
  if (!root) {
    notes.push("A network namespace of the job's own needs root: jobs have the host's network.");
  } else {
    const problem = (deps.networkProbe ?? (() => networkNamespaceProblem(createNetworkNamespaceCalls)))();
    networkNamespace = problem === undefined;
    if (problem !== undefined) notes.push(problem);
  }
  return create(ContainmentFacilitiesSchema, {
    root,
    setprivPath: setpriv.ok ? setpriv.path : "",
    // A layout the probe could not use is reported as none (the notes say why).
    cgroupLayout: usable ? (layout?.kind ?? "") : "",
    cgroupV2Mount: usable ? (layout?.v2Mount ?? "") : "",
    controllers,
    notes,
    networkNamespace,
  });
}
