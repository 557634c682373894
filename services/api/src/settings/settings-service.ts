import { clone, create, type MessageInitShape } from "@bufbuild/protobuf";
import type { Client, HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  ConflictError,
  FailedPreconditionError,
  InvalidArgumentError,
  PermissionDeniedError,
  requirePrincipal,
  UnavailableError,
  type AuthenticatedPrincipal,
  type Logger,
  type Signals,
} from "@seraph/kit";
import { PrerequisiteItemSchema, PrerequisiteReportSchema, type PrerequisiteItem, type PrerequisiteReport } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import {
  SandboxBackend,
  SandboxSettingsSchema,
  SettingsService,
  SlotStatusSchema,
  type CheckPrerequisitesRequest,
  type CheckPrerequisitesResponseSchema,
  type ListSlotsResponseSchema,
  type SandboxSettings,
  type UpdateSandboxSettingsRequest,
  type UpdateSandboxSettingsResponseSchema,
} from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState, SlotState, type JobsService, type Slot } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import { isNormalizedAbsolute } from "../common.js";
import type { ApiDatabase } from "../db/schema.js";
import { callNode, type NodeDirectory } from "../nodes/node-directory.js";
import { publishRepairEvents } from "../repairs/repair-events.js";
import { markRepairsStale } from "../repairs/repair.repository.js";
import {
  APPROVAL_TTL_BOUNDS,
  DEFAULT_APPROVAL_TTL_SECONDS,
  DEFAULT_LIMITS,
  DEFAULT_MODEL_ATTEMPTS,
  DEFAULT_MODEL_TIMEOUT_MS,
  LIMIT_FIELDS,
  limitName,
  limitNumbers,
  limitsMessage,
  DEFAULT_PROFILE,
  PROFILES,
  runtimeWords,
  profileOptions,
} from "./defaults.js";
import { profileCatalog } from "./profile-catalog.js";
import { loadSettings, redactSettings, saveSettingsCas } from "./settings.repository.js";
import { isInstanceOperator } from "../principals/principal.repository.js";

/** What the settings service depends on. */
export interface SettingsServiceDeps {
  readonly db: Kysely<ApiDatabase>;
  readonly signals: Signals;
  readonly log: Logger;
  readonly nodes: NodeDirectory;
  /** The jobs service (ListSlots reads slots and their jobs from it). */
  readonly jobs: Client<typeof JobsService>;
  /** Settings before any save (see defaultSettings). */
  readonly defaults: () => SandboxSettings;
}

/**
 * Whether repositories can be registered on a node with `nodeRoots` under the settings' roots.
 * There are two lists: the node's (SERAPH_REPOSITORY_ROOTS of that executor: the only
 * directories it touches) and the settings' (`settings set --root`: the instance operator's
 * narrowing; empty means whatever the node offers). A repository must lie under both.
 */
export function rootsItem(nodeRoots: readonly string[], settingsRoots: readonly string[]): PrerequisiteItem {
  const under = (p: string, root: string) => p === root || p.startsWith(root.endsWith("/") ? root : `${root}/`);
  const item = (ok: boolean, code: string, message: string) => create(PrerequisiteItemSchema, { name: "repository_roots", ok, code: ok ? "ok" : code, message });
  if (nodeRoots.length === 0) return item(false, "node_has_no_roots", "This node serves no repository root: start it with SERAPH_REPOSITORY_ROOTS (embedded mode uses <data dir>/repos by default).");
  if (settingsRoots.length === 0) return item(true, "ok", `Repositories may be registered under the node's roots ${nodeRoots.join(", ")} (the settings name no roots of their own, so all of the node's apply).`);
  const usable = settingsRoots.filter((r) => nodeRoots.some((n) => under(r, n)));
  const outside = settingsRoots.filter((r) => !usable.includes(r));
  if (usable.length === 0) {
    return item(false, "roots_disjoint", `None of the settings' roots (${settingsRoots.join(", ")}) lies under this node's roots (${nodeRoots.join(", ")}): nothing can be registered here. Add a root under ${nodeRoots[0] ?? "a node root"} with \`seraph settings set --root\`, or start the node with that directory in SERAPH_REPOSITORY_ROOTS.`);
  }
  const note = outside.length ? `; ${outside.join(", ")} not under this node's roots, so not usable here` : "";
  return item(true, "ok", `Repositories may be registered under ${usable.join(", ")} (the settings' roots that lie under this node's roots ${nodeRoots.join(", ")})${note}.`);
}

/**
 * Only the instance operator (the root principal created on first start) may change the sandbox
 * settings: they apply to every principal, and saving them makes every pending repair stale.
 */
async function requireOperator(db: Kysely<ApiDatabase>, p: AuthenticatedPrincipal): Promise<void> {
  if (p.id !== p.rootId || !(await isInstanceOperator(db, p.id))) {
    throw new PermissionDeniedError("operator_required", "Only the instance operator may change the repository sandbox settings.");
  }
}

/**
 * Validates settings from a client and returns what to store: defaults filled in, limits at most
 * the profile's, model route keys write-only (an empty key keeps the stored one when api_key_set is
 * true, and clears it otherwise).
 */
export function normalizeSettings(input: SandboxSettings, previous: SandboxSettings): SandboxSettings {
  const s = clone(SandboxSettingsSchema, input);
  normalizeBackendAndRuntime(s);
  normalizeRepositoryRoots(s);
  s.modelRouteHosts = normalizeHosts(s.modelRouteHosts);
  s.limits = limitsMessage(narrowedLimits(limitNumbers(s.limits)));
  if (s.approvalTtlSeconds === 0) s.approvalTtlSeconds = DEFAULT_APPROVAL_TTL_SECONDS;
  if (s.approvalTtlSeconds < APPROVAL_TTL_BOUNDS.min || s.approvalTtlSeconds > APPROVAL_TTL_BOUNDS.max) {
    throw new InvalidArgumentError("settings.approval_ttl_seconds", "ttl_out_of_range", `The approval validity must be between ${APPROVAL_TTL_BOUNDS.min} and ${APPROVAL_TTL_BOUNDS.max} seconds.`);
  }
  normalizeModelRoutes(s, previous);
  s.revision = 0n;
  s.updatedUnixMs = 0n;
  return s;
}

/** Backend (local only), profile (a registered one), runtime hash and path. */
function normalizeBackendAndRuntime(s: SandboxSettings): void {
  if (s.backend === SandboxBackend.UNSPECIFIED) s.backend = SandboxBackend.LOCAL;
  if (s.backend === SandboxBackend.DOCKER) {
    throw new FailedPreconditionError("node_docker_unverified", "The Docker backend for Node is blocked until profile-specific proof exists; choose the local backend.", { field: "settings.backend" });
  }
  if (s.profile === "") s.profile = DEFAULT_PROFILE;
  if (!PROFILES.includes(s.profile)) throw new InvalidArgumentError("settings.profile", "profile_unknown", `"${s.profile}" is not a profile; the profiles are ${PROFILES.join(" and ")}.`);
  s.runtimeSha256 = s.runtimeSha256.toLowerCase();
  if (s.runtimeSha256 !== "" && !/^[0-9a-f]{64}$/.test(s.runtimeSha256)) {
    throw new InvalidArgumentError("settings.runtime_sha256", "runtime_sha256_invalid", "The runtime SHA-256 must be 64 hex digits (or empty for any hash).");
  }
  if (s.runtimePath !== "" && !isNormalizedAbsolute(s.runtimePath)) {
    throw new InvalidArgumentError("settings.runtime_path", "runtime_path_not_absolute", `The runtime path must be an absolute, normalized path; "${s.runtimePath}" is not.`);
  }
  if (s.enabled && s.runtimePath === "") throw new InvalidArgumentError("settings.runtime_path", "runtime_path_required", `Enabling the sandbox needs the absolute path of the profile runtime (${runtimeWords(s.profile)}) for ${s.profile}.`);
}

/** Absolute, normalized paths, each once; every operator root listed at most once. */
function normalizeRepositoryRoots(s: SandboxSettings): void {
  const unique = (paths: readonly string[], field: (i: number) => string): string[] => {
    const out: string[] = [];
    for (const [i, r] of paths.entries()) {
      if (!isNormalizedAbsolute(r)) throw new InvalidArgumentError(field(i), "root_not_absolute", `Repository root "${r}" must be an absolute, normalized path.`);
      if (!out.includes(r)) out.push(r);
    }
    return out;
  };
  s.repositoryRoots = unique(s.repositoryRoots, (i) => `settings.repository_roots[${i}]`);
  const assignedTo = new Set<string>();
  for (const [i, entry] of s.rootRepositoryRoots.entries()) {
    const field = `settings.root_repository_roots[${i}]`;
    if (assignedTo.has(entry.rootId)) throw new InvalidArgumentError(`${field}.root_id`, "root_assigned_twice", `Operator root ${entry.rootId} is listed twice; give it one list.`);
    assignedTo.add(entry.rootId);
    entry.repositoryRoots = unique(entry.repositoryRoots, (j) => `${field}.repository_roots[${j}]`);
  }
}

/** Model route hosts: lower-case host names or IP literals, each once. */
function normalizeHosts(given: readonly string[]): string[] {
  const hosts: string[] = [];
  for (const [i, h] of given.entries()) {
    const host = h.toLowerCase();
    if (!/^(\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*)$/.test(host)) {
      throw new InvalidArgumentError(`settings.model_route_hosts[${i}]`, "host_invalid", `"${h}" is not a host name or IP literal (no scheme, port or path).`);
    }
    if (!hosts.includes(host)) hosts.push(host);
  }
  return hosts;
}

/** The profile's limits, each narrowed where the settings give a smaller non-zero value. */
function narrowedLimits(given: ReturnType<typeof limitNumbers>): typeof DEFAULT_LIMITS {
  const values = { ...DEFAULT_LIMITS };
  for (const f of LIMIT_FIELDS) {
    if (given[f] === 0) continue;
    if (given[f] > DEFAULT_LIMITS[f]) {
      throw new InvalidArgumentError(`settings.limits.${limitName(f)}`, "limit_widened", `${limitName(f)}=${given[f]} is above the profile's ${DEFAULT_LIMITS[f]}; limits may only be narrowed.`);
    }
    values[f] = given[f];
  }
  return values;
}

/** Model routes: unique ids, http(s) URLs without credentials on allowed hosts, defaults, write-only keys. */
function normalizeModelRoutes(s: SandboxSettings, previous: SandboxSettings): void {
  const ids = new Set<string>();
  for (const [i, r] of s.modelRoutes.entries()) {
    const field = `settings.model_routes[${i}]`;
    if (r.id === "") throw new InvalidArgumentError(`${field}.id`, "route_id_required", "Every model route needs an id.");
    if (ids.has(r.id)) throw new InvalidArgumentError(`${field}.id`, "route_id_duplicate", `Model route id "${r.id}" is used twice.`);
    ids.add(r.id);
    checkRouteUrl(r.baseUrl, `${field}.base_url`, s.modelRouteHosts);
    if (r.model === "") throw new InvalidArgumentError(`${field}.model`, "model_required", "Every model route names its model.");
    if (r.timeoutMs === 0) r.timeoutMs = DEFAULT_MODEL_TIMEOUT_MS;
    if (r.maxAttempts === 0) r.maxAttempts = DEFAULT_MODEL_ATTEMPTS;
    if (r.apiKey === "") {
      const old = previous.modelRoutes.find((o) => o.id === r.id);
      r.apiKey = r.apiKeySet && old ? old.apiKey : "";
    }
    r.apiKeySet = r.apiKey !== "";
  }
}

/** A model route's base URL: http or https, no credentials, on an allowed host when a list is set. */
function checkRouteUrl(baseUrl: string, field: string, allowedHosts: readonly string[]): void {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new InvalidArgumentError(field, "base_url_invalid", `"${baseUrl}" is not a URL.`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new InvalidArgumentError(field, "base_url_invalid", "The base URL must be http or https.");
  if (url.username !== "" || url.password !== "") throw new InvalidArgumentError(field, "base_url_invalid", "The base URL must not carry credentials; use api_key.");
  if (allowedHosts.length > 0 && !allowedHosts.includes(url.hostname.toLowerCase())) {
    throw new InvalidArgumentError(field, "model_route_host_not_allowed", `The host ${url.hostname} is not in model_route_hosts (${allowedHosts.join(", ")}).`);
  }
}

/**
 * The repository sandbox settings: read by every principal (keys redacted), changed only by an
 * operator root with a compare-and-set on the revision. Saving starts nothing and grants nothing;
 * it makes not-yet-approved repairs stale, because their approval binds the settings revision.
 * CheckPrerequisites asks each executor node to check the configured runtime and its facilities.
 * ListProfiles serves the profile registry's metadata to every principal.
 */
export function createSettingsService(deps: SettingsServiceDeps): ServiceImpl<typeof SettingsService> {
  const { db, nodes } = deps;
  return {
    async getSandboxSettings(_req, ctx) {
      requirePrincipal(ctx);
      const { settings } = await loadSettings(db, deps.defaults);
      const known = await nodes.list().catch(() => []);
      return { settings: redactSettings(settings), profiles: profileOptions(known, { platform: process.platform, arch: process.arch }) };
    },
    updateSandboxSettings: (req, ctx) => updateSandboxSettings(deps, req, ctx),
    checkPrerequisites: (req, ctx) => checkPrerequisites(deps, req, ctx),
    listProfiles(_req, ctx) {
      requirePrincipal(ctx);
      return { profiles: profileCatalog() };
    },
    listSlots: (_req, ctx) => listSlots(deps, ctx),
  };
}

/** UpdateSandboxSettings: operator only, compare-and-set on the revision; stales open repairs. */
async function updateSandboxSettings(deps: SettingsServiceDeps, req: UpdateSandboxSettingsRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof UpdateSandboxSettingsResponseSchema>> {
  const { db, signals } = deps;
  const p = requirePrincipal(ctx);
  await requireOperator(db, p);
  const input = req.settings;
  if (input === undefined) throw new InvalidArgumentError("settings", "required", "settings is required.");
  const { saved, stale } = await db.transaction().execute(async (trx) => {
    const current = await loadSettings(trx, deps.defaults, true);
    if (current.revision !== req.expectedRevision) {
      throw new ConflictError("revision_conflict", `The settings are at revision ${current.revision}, not ${req.expectedRevision}; read them again and retry.`);
    }
    const next = normalizeSettings(input, current.settings);
    for (const [i, entry] of next.rootRepositoryRoots.entries()) {
      const root = await trx.selectFrom("principals").select("id").where("id", "=", entry.rootId).where("root_id", "=", entry.rootId).executeTakeFirst();
      if (!root) throw new InvalidArgumentError(`settings.root_repository_roots[${i}].root_id`, "root_unknown", `${entry.rootId} is not an operator root.`);
    }
    const revision = await saveSettingsCas(trx, next, current.revision);
    if (revision === undefined) throw new ConflictError("revision_conflict", "The settings changed concurrently; read them again and retry.");
    const stale = await markRepairsStale(trx, {}, "settings_changed");
    return { saved: (await loadSettings(trx, deps.defaults)).settings, stale };
  });
  publishRepairEvents(signals, stale);
  deps.log.info({ revision: saved.revision.toString(), enabled: saved.enabled, by: p.id }, "sandbox settings saved");
  return { settings: redactSettings(saved) };
}

/** CheckPrerequisites: each node (or the one named) checks the runtime, its facilities and roots. */
async function checkPrerequisites(deps: SettingsServiceDeps, req: CheckPrerequisitesRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof CheckPrerequisitesResponseSchema>> {
  const { db, nodes } = deps;
  requirePrincipal(ctx);
  const { settings } = await loadSettings(db, deps.defaults);
  const targets = req.nodeId === "" ? await nodes.list() : [await nodes.get(req.nodeId)];
  const reports = await Promise.all(
    targets.map(async (node): Promise<PrerequisiteReport> => {
      try {
        const res = await callNode(node, "check prerequisites", () => nodes.executor(node).checkPrerequisites({ runtimePath: settings.runtimePath, profile: settings.profile, runtimeSha256: settings.runtimeSha256 }, { timeoutMs: 30_000 }));
        if (res.report) {
          const roots = rootsItem(node.repositoryRoots, settings.repositoryRoots);
          res.report.items.push(roots);
          res.report.ok = res.report.ok && roots.ok;
          return res.report;
        }
        throw new Error("empty report");
      } catch (err) {
        return create(PrerequisiteReportSchema, {
          ok: false,
          nodeId: node.nodeId,
          runtimePath: settings.runtimePath,
          items: [create(PrerequisiteItemSchema, { name: "node_reachable", ok: false, code: "node_unavailable", message: (err as Error).message })],
        });
      }
    }),
  );
  return { reports };
}

/** ListSlots: the instance operator's view of every node's physical slots and their jobs. */
async function listSlots(deps: SettingsServiceDeps, ctx: HandlerContext): Promise<MessageInitShape<typeof ListSlotsResponseSchema>> {
  const { db } = deps;
  const p = requirePrincipal(ctx);
  if (p.id !== p.rootId || !(await isInstanceOperator(db, p.id))) {
    throw new PermissionDeniedError("operator_required", "Only the instance operator may list the physical slots of every node.");
  }
  let slots: Slot[];
  try {
    slots = (await deps.jobs.listSlots({}, { timeoutMs: 10_000 })).slots;
  } catch (err) {
    throw new UnavailableError("jobs_unavailable", "The jobs service could not list the slots; retry.", err);
  }
  const out = await Promise.all(
    slots.map(async (s) => {
      const job = s.jobId ? await deps.jobs.getJob({ jobId: s.jobId }, { timeoutMs: 10_000 }).then((r) => r.job, () => undefined) : undefined;
      return create(SlotStatusSchema, {
        nodeId: s.nodeId,
        slotIndex: s.slotIndex,
        state: (SlotState[s.state] ?? "unspecified").toLowerCase(),
        jobId: s.jobId,
        repairId: job?.repairId ?? "",
        jobState: job?.state ?? JobState.UNSPECIFIED,
        jobOutcome: job?.outcome ?? "",
      });
    }),
  );
  return { slots: out };
}
