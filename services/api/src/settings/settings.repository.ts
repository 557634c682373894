import { clone, create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { SandboxBackend, SandboxSettingsSchema, type SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { sql } from "kysely";
import type { Db } from "../common.js";
import { DEFAULT_APPROVAL_TTL_SECONDS, DEFAULT_LIMITS, DEFAULT_PROFILE, limitsMessage } from "./defaults.js";

/** The stored settings, secrets included (never return this to a client as is). */
export interface StoredSettings {
  readonly settings: SandboxSettings;
  readonly revision: bigint;
}

/** The settings before an operator saved any: local backend, the Python profile with its runtime when installed, disabled. */
export function defaultSettings(runtimePath: string | undefined): SandboxSettings {
  return create(SandboxSettingsSchema, {
    backend: SandboxBackend.LOCAL,
    profile: DEFAULT_PROFILE,
    runtimePath: runtimePath ?? "",
    enabled: false,
    repositoryRoots: [],
    limits: limitsMessage(DEFAULT_LIMITS),
    modelRoutes: [],
    approvalTtlSeconds: DEFAULT_APPROVAL_TTL_SECONDS,
    revision: 0n,
  });
}

/**
 * The current settings (revision 0 and the defaults when none were saved). With `forUpdate` the
 * row is locked until the transaction ends, so a concurrent save waits and then fails its CAS.
 */
export async function loadSettings(db: Db, defaults: () => SandboxSettings, forUpdate = false): Promise<StoredSettings> {
  let q = db.selectFrom("sandbox_settings").selectAll().where("id", "=", 1);
  if (forUpdate) q = q.forUpdate();
  const row = await q.executeTakeFirst();
  if (!row) return { settings: defaults(), revision: 0n };
  const settings = fromBinary(SandboxSettingsSchema, row.settings);
  settings.revision = BigInt(row.revision);
  settings.updatedUnixMs = BigInt(row.updated_at.getTime());
  return { settings, revision: BigInt(row.revision) };
}

/**
 * Saves settings at `expected + 1` when the stored revision is still `expected` (0 = never saved);
 * returns the new revision, or undefined when the compare-and-set lost.
 */
export async function saveSettingsCas(db: Db, settings: SandboxSettings, expected: bigint): Promise<bigint | undefined> {
  const next = expected + 1n;
  const toStore = clone(SandboxSettingsSchema, settings);
  toStore.revision = next;
  const bytes = toBinary(SandboxSettingsSchema, toStore);
  if (expected === 0n) {
    const inserted = await db
      .insertInto("sandbox_settings")
      .values({ id: 1, settings: bytes, revision: next.toString(), updated_at: new Date() })
      .onConflict((oc) => oc.column("id").doNothing())
      .returning("revision")
      .executeTakeFirst();
    return inserted ? next : undefined;
  }
  const updated = await db
    .updateTable("sandbox_settings")
    .set({ settings: bytes, revision: next.toString(), updated_at: sql`now()` })
    .where("id", "=", 1)
    .where("revision", "=", expected.toString())
    .returning("revision")
    .executeTakeFirst();
  return updated ? next : undefined;
}

/** The settings as a client may see them: every model route's key removed, api_key_set telling whether one is stored. */
export function redactSettings(settings: SandboxSettings): SandboxSettings {
  const out = clone(SandboxSettingsSchema, settings);
  for (const r of out.modelRoutes) {
    r.apiKeySet = r.apiKey !== "";
    r.apiKey = "";
  }
  return out;
}
