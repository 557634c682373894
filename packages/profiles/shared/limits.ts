import { create } from "@bufbuild/protobuf";
import { LimitsSchema, type Limits } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { LimitOverrideError } from "./errors.js";
import { blockReason } from "./reasons.js";

const MiB = 1024 * 1024;

/** The names accepted by `--limit NAME=VALUE`, in the order of the Limits message. */
export const LIMIT_NAMES = [
  "snapshot_bytes",
  "source_files",
  "source_file_bytes",
  "dependency_files",
  "dependency_file_bytes",
  "patch_bytes",
  "output_bytes",
  "stream_bytes",
  "wall_ms",
] as const;

/** One limit name. */
export type LimitName = (typeof LIMIT_NAMES)[number];

const FIELD: Record<LimitName, keyof Omit<Limits, "$typeName" | "$unknown">> = {
  snapshot_bytes: "snapshotBytes",
  source_files: "sourceFiles",
  source_file_bytes: "sourceFileBytes",
  dependency_files: "dependencyFiles",
  dependency_file_bytes: "dependencyFileBytes",
  patch_bytes: "patchBytes",
  output_bytes: "outputBytes",
  stream_bytes: "streamBytes",
  wall_ms: "wallMs",
};

/** Limits stored as uint32 in the schema (the rest are uint64 bigints). */
const UINT32: ReadonlySet<LimitName> = new Set(["source_files", "dependency_files", "wall_ms"]);

/** The profile defaults from ADR-007 as a plain frozen record (numbers, for arithmetic). */
export const DEFAULT_LIMIT_VALUES: Readonly<Record<LimitName, number>> = Object.freeze({
  snapshot_bytes: 64 * MiB,
  source_files: 2000,
  source_file_bytes: 2 * MiB,
  dependency_files: 512,
  dependency_file_bytes: 16 * MiB,
  patch_bytes: 1 * MiB,
  output_bytes: 16 * MiB,
  stream_bytes: 1 * MiB,
  wall_ms: 180_000,
});

/** Builds a fresh Limits message from a record of values. */
export function limitsFromValues(values: Readonly<Record<LimitName, number>>): Limits {
  const init: Record<string, number | bigint> = {};
  for (const name of LIMIT_NAMES) init[FIELD[name]] = UINT32.has(name) ? values[name] : BigInt(values[name]);
  return create(LimitsSchema, init);
}

/** The profile default limits (a fresh message each call; callers may not share mutable state). */
export function defaultLimits(): Limits {
  return limitsFromValues(DEFAULT_LIMIT_VALUES);
}

/** The default limits as a Limits message. Treat as read-only; use defaultLimits() for a copy. */
export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze(defaultLimits());

/** Reads a Limits message into a record of numbers. */
export function limitValues(limits: Limits): Record<LimitName, number> {
  const out = {} as Record<LimitName, number>;
  for (const name of LIMIT_NAMES) out[name] = Number(limits[FIELD[name]]);
  return out;
}

/** The names of limits in `limits` that differ from the profile defaults, in schema order. */
export function limitsChanged(limits: Limits): string[] {
  const values = limitValues(limits);
  return LIMIT_NAMES.filter((n) => values[n] !== DEFAULT_LIMIT_VALUES[n]);
}

/**
 * Parses operator overrides written `NAME=VALUE` (VALUE a positive decimal integer, optionally with
 * `_` or `,` digit separators) into a Limits message over the defaults. Throws LimitOverrideError with
 * `limit_unknown` / `limit_invalid` reasons; every bad override is reported, not only the first.
 */
export function parseLimitOverrides(overrides: readonly string[], base?: Limits): Limits {
  const values = limitValues(base ?? defaultLimits());
  const reasons = [];
  for (const item of overrides) {
    const eq = item.indexOf("=");
    const name = (eq < 0 ? item : item.slice(0, eq)).trim();
    const raw = eq < 0 ? "" : item.slice(eq + 1).trim();
    if (!(LIMIT_NAMES as readonly string[]).includes(name)) {
      reasons.push(blockReason("limit_unknown", `"${name}" is not a profile limit; the limits are ${LIMIT_NAMES.join(", ")}.`, name));
      continue;
    }
    const limitName = name as LimitName;
    const digits = raw.replace(/[_,]/g, "");
    const max = UINT32.has(limitName) ? 0xffffffff : Number.MAX_SAFE_INTEGER;
    if (!/^[0-9]{1,16}$/.test(digits) || Number(digits) <= 0 || Number(digits) > max) {
      reasons.push(blockReason("limit_invalid", `The limit ${name} needs a positive whole number at most ${max}, got "${raw}".`, name));
      continue;
    }
    values[limitName] = Number(digits);
  }
  if (reasons.length > 0) throw new LimitOverrideError(reasons);
  return limitsFromValues(values);
}
