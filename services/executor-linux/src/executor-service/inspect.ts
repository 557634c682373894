import type { MessageInitShape } from "@bufbuild/protobuf";
import { InvalidArgumentError } from "@seraph/kit";
import type { InspectRequest, InspectResponseSchema } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import type { Limits } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { DEFAULT_LIMIT_VALUES, LIMIT_NAMES, checkRelativePath, hostProfileOf, inspectRepository, limitValues, limitsFromValues } from "../profile/index.js";
import { defaultSupervisorEntry, defaultSupervisorRuntime } from "../supervisor-client/index.js";
import { requireRepository } from "./repository-roots.js";
import type { ExecutorServiceContext } from "./service-context.js";
import { supervisorSourceOf } from "./supervisor-source.js";

/**
 * Inspect: read-only inspection against the request's execution profile, with the supervisor
 * source hash the approval binds and how this node contains jobs now.
 */
export async function inspect(c: ExecutorServiceContext, req: InspectRequest): Promise<MessageInitShape<typeof InspectResponseSchema>> {
  const { deps } = c;
  await requireRepository(req.repositoryPath, c.roots);
  const limits = effectiveLimits(req.limits);
  for (const [i, p] of req.sourcePaths.entries()) {
    const checked = checkRelativePath(p.replace(/\/+$/, ""), "source path");
    if (!checked.ok) throw new InvalidArgumentError(`source_paths[${i}]`, checked.reason.code, checked.reason.message);
  }
  // The server selected the profile; its runtime is the one configured for it, never another's.
  const profile = hostProfileOf(req.profile);
  const runtime = { digestCache: c.digestCache, ...(req.runtimeSha256 !== "" ? { expectedSha256: req.runtimeSha256 } : {}) };
  const inspection = await inspectRepository(
    profile.requestOptions({ repositoryPath: req.repositoryPath, selection: req.selection, testPaths: req.testPaths, runtimePath: req.runtimePath, sourcePaths: req.sourcePaths, limits, runtime, digests: deps.fileDigests }),
  );
  // The supervisor code this node would run the job under: the approval binds it.
  const supervisorSourceSha256 = supervisorSourceOf(deps.supervisorEntry ?? defaultSupervisorEntry(), deps.supervisorRuntime ?? defaultSupervisorRuntime());
  deps.log.info({ repository: req.repositoryPath, admitted: inspection.admitted, reasons: inspection.reasons.map((r) => r.code), supervisorSourceSha256 }, "inspected");
  return { inspection, supervisorSourceSha256, containment: await c.containment() };
}

/**
 * Fills unset (zero) limit fields with the profile defaults and refuses any limit above its
 * default: operator limits may narrow the profile, never widen it (ADR-007).
 */
export function effectiveLimits(limits: Limits | undefined): Limits {
  const values = { ...DEFAULT_LIMIT_VALUES };
  if (limits !== undefined) {
    const given = limitValues(limits);
    for (const name of LIMIT_NAMES) {
      const v = given[name];
      if (v === 0) continue;
      if (v > DEFAULT_LIMIT_VALUES[name]) {
        throw new InvalidArgumentError(`limits.${name}`, "limit_widened", `The limit ${name}=${v} is above the profile's ${DEFAULT_LIMIT_VALUES[name]}; limits may only be narrowed.`);
      }
      values[name] = v;
    }
  }
  return limitsFromValues(values);
}
