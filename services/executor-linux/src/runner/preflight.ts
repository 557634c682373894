import { create } from "@bufbuild/protobuf";
import { JobPreflightSchema, type JobPreflight } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentityKind, type BlockReason, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { call, type Ctx } from "./attempt.js";

/** The only execution backend: the local host under a per-job supervisor. */
export const LOCAL_BACKEND = "local";

/** Ceilings that the local backend does not enforce under `admission_and_wall_timeout_only`. */
const UNENFORCED_LOCAL = ["cpu", "memory", "pids"] as const;

/** The node repository root `path` is under, or "" when none. */
export function rootOf(roots: readonly string[], path: string): string {
  return roots.find((root) => path === root || path.startsWith(root.endsWith("/") ? root : `${root}/`)) ?? "";
}

/**
 * Starts the preparation evidence of one attempt: the node, its boot, its facility report, the
 * repository root check, the approved runtime path, limits and claims, and the deadline.
 * Runtime and compiler identities are filled in once staging re-checked them.
 */
export function beginPreflight(ctx: Ctx): JobPreflight {
  const { bundle, deps } = ctx;
  const root = rootOf(deps.repositoryRoots, bundle.repositoryPath);
  const resourceEnforcement = bundle.resourceEnforcement || "admission_and_wall_timeout_only";
  return create(JobPreflightSchema, {
    nodeId: deps.identity.nodeId,
    bootId: deps.identity.bootId,
    facilities: deps.facilities(),
    runtimePath: bundle.runtimePath || bundle.inspection?.nodePath || bundle.inspection?.pythonPath || "",
    repositoryPath: bundle.repositoryPath,
    repositoryRoot: root,
    repositoryRootOk: root !== "",
    limits: bundle.inspection?.limits ?? bundle.limits,
    backend: LOCAL_BACKEND,
    isolationClaim: bundle.isolationClaim || "none",
    resourceEnforcement,
    unenforced: resourceEnforcement === "admission_and_wall_timeout_only" ? [...UNENFORCED_LOCAL] : [],
    supervisorSourceSha256: bundle.supervisorSourceSha256,
    startedUnixMs: BigInt(Date.now()),
    deadlineUnixMs: BigInt(ctx.deadlineMs),
  });
}

/** Adds the runtime and compiler identities staging re-checked for this job. */
export function withStagedIdentities(p: JobPreflight, staged: Inspection): JobPreflight {
  const python = staged.pythonPath !== "";
  const node = staged.identities.find((i) => i.kind === (python ? IdentityKind.PYTHON_EXECUTABLE : IdentityKind.NODE_EXECUTABLE));
  const tsc = staged.identities.find((i) => i.kind === IdentityKind.TYPESCRIPT_COMPILER);
  return create(JobPreflightSchema, {
    ...p,
    runtimePath: (python ? staged.pythonPath : staged.nodePath) || p.runtimePath,
    runtimeVersion: python ? staged.pythonVersion : staged.nodeVersion,
    runtimeSha256: node?.sha256 ?? "",
    compilerVersion: tsc ? staged.typescriptVersion : "",
    compilerSha256: tsc?.sha256 ?? "",
    driftChecked: true,
  });
}

/**
 * Records the evidence durably (RecordPreflight, fenced, retried until the deadline), blocked
 * with `reasons` when preparation stopped the job. Throws when it cannot be recorded.
 */
export async function recordPreflight(ctx: Ctx, p: JobPreflight, reasons: readonly BlockReason[] = []): Promise<void> {
  const done = finishedPreflight(p, reasons);
  await call(ctx, "RecordPreflight", () => ctx.deps.jobs.recordPreflight({ jobId: ctx.active.jobId, fence: ctx.active.fence, preflight: done }));
}

/** The evidence as recorded: finished now, blocked with `reasons` when there are any. */
export function finishedPreflight(p: JobPreflight, reasons: readonly BlockReason[] = []): JobPreflight {
  return create(JobPreflightSchema, { ...p, blocked: reasons.length > 0, reasons: [...reasons], finishedUnixMs: BigInt(Date.now()) });
}
