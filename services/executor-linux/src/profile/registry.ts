// The executor's registry of execution profiles: the one place that lists them on this host. A
// new profile is a folder beside node/ and python/ exporting a HostProfile, plus one line below;
// its pure rules are registered in @seraph/profiles/registry (registry.test.ts checks the two agree).
import { LEGACY_PROFILE, profileNamesText } from "@seraph/profiles/registry";
import type { HostProfile } from "./host-profile.js";
import { NODE_HOST_PROFILE } from "./node/host.js";
import { PYTHON_HOST_PROFILE } from "./python/host.js";

/** Every profile this executor runs, in the registry's order. */
export const HOST_PROFILES: readonly HostProfile[] = Object.freeze([
  PYTHON_HOST_PROFILE, // the seeds' default, listed first
  NODE_HOST_PROFILE,
]);

/** The host profile called `name`, or undefined. */
export function findHostProfile(name: string): HostProfile | undefined {
  return HOST_PROFILES.find((p) => p.rules.name === name);
}

/**
 * The host profile of a stored inspection or request: the registered one of that name, or the
 * legacy profile's for a record that names none (written before profiles had names) or an
 * unregistered name, as every non-Python inspection was read before profiles were a type.
 */
export function hostProfileOf(name: string): HostProfile {
  return findHostProfile(name) ?? (findHostProfile(LEGACY_PROFILE.name) as HostProfile);
}

/** The registered names as a sentence ("a and b"; "a or b" with conjunction "or"). */
export const hostProfileNames = profileNamesText;
