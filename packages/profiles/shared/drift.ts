import { create } from "@bufbuild/protobuf";
import { DriftSchema, IdentityKind, type Drift, type Identity, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";

function key(i: Identity): string {
  // There is one runtime per inspection; a re-inspection may reach it by another path.
  return i.kind === IdentityKind.NODE_EXECUTABLE || i.kind === IdentityKind.PYTHON_EXECUTABLE ? `${i.kind}` : `${i.kind}\u0000${i.name}`;
}

/**
 * Compares every identity of `inspection` with a re-inspection of the same inputs and returns one
 * Drift per difference: "changed" (same input, other SHA-256), "missing" (no longer present) or
 * "added" (a new execution input). Empty means the re-inspection reproduced every identity.
 */
export function checkDrift(inspection: Inspection, reinspection: Inspection): Drift[] {
  const before = new Map(inspection.identities.map((i) => [key(i), i]));
  const after = new Map(reinspection.identities.map((i) => [key(i), i]));
  const drift: Drift[] = [];
  for (const [k, was] of before) {
    const now = after.get(k);
    if (!now) drift.push(create(DriftSchema, { kind: was.kind, name: was.name, expectedSha256: was.sha256, actualSha256: "", change: "missing" }));
    else if (now.sha256 !== was.sha256) drift.push(create(DriftSchema, { kind: was.kind, name: was.name, expectedSha256: was.sha256, actualSha256: now.sha256, change: "changed" }));
  }
  for (const [k, now] of after) {
    if (!before.has(k)) drift.push(create(DriftSchema, { kind: now.kind, name: now.name, expectedSha256: "", actualSha256: now.sha256, change: "added" }));
  }
  return drift;
}

const KIND_WORDS: Record<number, string> = {
  [IdentityKind.SOURCE_FILE]: "source file",
  [IdentityKind.PACKAGE_JSON]: "package.json",
  [IdentityKind.LOCKFILE]: "lockfile",
  [IdentityKind.TSCONFIG]: "tsconfig",
  [IdentityKind.SCRIPT_BODY]: "script",
  [IdentityKind.NODE_EXECUTABLE]: "Node executable",
  [IdentityKind.TYPESCRIPT_COMPILER]: "TypeScript compiler",
  [IdentityKind.BIN_ALIAS_MAP]: ".bin alias map",
  [IdentityKind.DEPENDENCY_MANIFEST]: "dependency manifest",
  [IdentityKind.PYTHON_EXECUTABLE]: "Python interpreter",
  [IdentityKind.PYTHON_CONFIG]: "Python configuration file",
};

/** One sentence for a drift ("the source file src/a.js changed since inspection"). */
export function describeDrift(d: Drift): string {
  const what = `the ${KIND_WORDS[d.kind] ?? "input"} ${d.name}`;
  switch (d.change) {
    case "missing":
      return `${what} is no longer present (inspected ${d.expectedSha256.slice(0, 12)}…).`;
    case "added":
      return `${what} is a new execution input that was not inspected.`;
    default:
      return `${what} changed since inspection (${d.expectedSha256.slice(0, 12)}… → ${d.actualSha256.slice(0, 12)}…).`;
  }
}
