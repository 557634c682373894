// The registry of execution profiles: the one place that lists them. A new profile is a new
// folder beside python3/ and node24-npm/ exporting an ExecutionProfile, plus one line in
// EXECUTION_PROFILES below (see README.md, "Adding a profile").
import type { Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { NODE24_NPM_PROFILE } from "../node24-npm/profile.js";
import { PYTHON3_PROFILE } from "../python3/profile.js";
import { inspectionHashInput as sharedHashInput } from "../shared/inspection-hash.js";
import { sha256Hex } from "../shared/digest.js";
import type { ExecutionProfile } from "./execution-profile.js";

export type { BlockedBackend, ExecutionProfile, ParsedSelection, SelectionMetadata } from "./execution-profile.js";

/** Every server-selectable profile, in the order settings list them; the first is a new instance's default. */
export const EXECUTION_PROFILES: readonly ExecutionProfile[] = Object.freeze([
  PYTHON3_PROFILE, // the seeds' default, listed first
  NODE24_NPM_PROFILE,
]);

/** The profile of a new instance (settings never saved): the first registered. */
export const DEFAULT_PROFILE: ExecutionProfile = EXECUTION_PROFILES[0] as ExecutionProfile;

/**
 * The profile records read as when they name none: inspections, settings and requests written
 * before there was more than one profile carry "" and were Node's. Never a fallback for a name
 * that is set: findProfile refuses those.
 */
export const LEGACY_PROFILE: ExecutionProfile = NODE24_NPM_PROFILE;

/** The registered profile called `name`, or undefined. */
export function findProfile(name: string): ExecutionProfile | undefined {
  return EXECUTION_PROFILES.find((p) => p.name === name);
}

/**
 * The profile a stored record or request belongs to: the registered one of that name, or
 * LEGACY_PROFILE for a record that names none or a name no longer registered (as every
 * non-Python inspection was read before profiles were a type). Callers that must refuse an
 * unknown name check findProfile first.
 */
export function profileOf(name: string): ExecutionProfile {
  return findProfile(name) ?? LEGACY_PROFILE;
}

/** The registered names, in registry order. */
export function profileNames(): string[] {
  return EXECUTION_PROFILES.map((p) => p.name);
}

/** The registered names as a sentence ("a, b and c"), for refusals. */
export function profileNamesText(conjunction = "and"): string {
  const names = profileNames();
  return names.length <= 1 ? names.join("") : `${names.slice(0, -1).join(", ")} ${conjunction} ${names[names.length - 1] ?? ""}`;
}

/**
 * The exact bytes the inspection hash covers (see shared/inspection-hash.ts), with the
 * inspection's profile adding its own inputs.
 */
export function inspectionHashInput(inspection: Inspection): string {
  return sharedHashInput(inspection, profileOf(inspection.profile).hashInputs(inspection));
}

/** SHA-256 of inspectionHashInput(inspection). */
export function computeInspectionHash(inspection: Inspection): string {
  return sha256Hex(inspectionHashInput(inspection));
}
