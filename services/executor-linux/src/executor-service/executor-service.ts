import type { ServiceImpl } from "@connectrpc/connect";
import { InvalidArgumentError } from "@seraph/kit";
import type { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { DEFAULT_LIMIT_VALUES, checkRelativePath } from "../profile/index.js";
import { readFacilityReport } from "../supervisor-client/index.js";
import { defaultContainmentSettings, nodeContainment } from "../supervisor-client/node-containment.js";
import { inspect } from "./inspect.js";
import { checkPrerequisites } from "./prerequisites.js";
import { checkProposal } from "./proposal-check.js";
import { checkRepositoryPath, hostIdOf, readInspectedFile, requireRepository } from "./repository-roots.js";
import type { ExecutorServiceContext, ExecutorServiceDeps } from "./service-context.js";

export type { ExecutorServiceDeps, SlotJobUser } from "./service-context.js";
export { effectiveLimits } from "./inspect.js";

/**
 * The executor node API: read-only inspection against the request's execution profile (with the supervisor
 * source hash the approval binds), prerequisite checks (runtime version and hash, the compiled
 * supervisor and its source hash, Linux facilities probed in a child process),
 * owner source reads bound to inspected hashes, proposal checks against the inspected snapshot,
 * and repository path checks. Every repository path must lie under this node's roots. Each RPC
 * is its own module; this is the table.
 */
export function createExecutorService(deps: ExecutorServiceDeps): Partial<ServiceImpl<typeof ExecutorService>> {
  const readFacilities = deps.readFacilities ?? (() => readFacilityReport({ nodePath: deps.supervisorRuntime }));
  const c: ExecutorServiceContext = {
    deps,
    roots: deps.repositoryRoots,
    readFacilities,
    containment: deps.containment ?? (async () => nodeContainment(defaultContainmentSettings(), (await readFacilities()).containment)),
    digestCache: deps.runtimeDigests ?? new Map(),
  };
  return {
    ...(deps.cancelJob === undefined ? {} : { cancelJob: deps.cancelJob }),
    ...(deps.readJobOutput === undefined ? {} : { readJobOutput: deps.readJobOutput }),
    checkRepository: (req) => checkRepository(c, req.repositoryPath),
    inspect: (req) => inspect(c, req),
    checkPrerequisites: (req) => checkPrerequisites(c, req),
    readSource: (req) => readSource(c, req.repositoryPath, req.path, req.expectedSha256),
    checkProposal: (req) => checkProposal(c, req),
  };
}

/** CheckRepository: whether a path is a directory under this node's roots, and its identities. */
async function checkRepository(c: ExecutorServiceContext, repositoryPath: string) {
  const roots = c.roots;
  const checked = await checkRepositoryPath(repositoryPath, roots);
  if (!checked.ok) return { ok: false, code: checked.code, message: checked.message, repositoryRoots: [...roots] };
  return {
    ok: true,
    code: "ok",
    message: `${checked.path} is a directory under this node's repository roots.`,
    repositoryRoots: [...roots],
    hasPackageJson: checked.hasPackageJson,
    realPath: checked.realPath,
    directoryIds: [...checked.directoryIds],
    hostId: hostIdOf(),
  };
}

/** ReadSource: one repository file, only while it still has the inspected hash. */
async function readSource(c: ExecutorServiceContext, repositoryPath: string, path: string, expectedSha256: string) {
  const repo = await requireRepository(repositoryPath, c.roots);
  const checked = checkRelativePath(path, "source path");
  if (!checked.ok) throw new InvalidArgumentError("path", checked.reason.code, checked.reason.message);
  const { content, sha256 } = await readInspectedFile(repo.realPath, checked.path, expectedSha256, DEFAULT_LIMIT_VALUES.source_file_bytes);
  return { content, sha256 };
}
