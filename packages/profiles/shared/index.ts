// The rules every execution profile shares: reason codes, limits, path rules, canonical JSON, the
// inspection hash, drift, the owner-marker identity and the approval-document digest. Pure: no host I/O, no native code.
export { blockReason, formatCount, REASON_CODES } from "./reasons.js";
export type { ReasonCode } from "./reasons.js";
export { LimitOverrideError, ProfileError, SelectionError } from "./errors.js";
export {
  DEFAULT_LIMITS,
  DEFAULT_LIMIT_VALUES,
  LIMIT_NAMES,
  defaultLimits,
  limitValues,
  limitsChanged,
  limitsFromValues,
  parseLimitOverrides,
} from "./limits.js";
export type { LimitName } from "./limits.js";
export { checkRelativePath, isWithin, checkFileName, escapePathBytes, MAX_RELATIVE_PATH_BYTES } from "./path-rules.js";
export type { RelativePathResult, FileNameProblem } from "./path-rules.js";
export { canonicalJson } from "./canonical-json.js";
export type { CanonicalValue } from "./canonical-json.js";
export { isSha256Hex, sha256Hex } from "./digest.js";
export { sortIdentities, INSPECTION_HASH_DOMAIN } from "./inspection-hash.js";
export { checkDrift, describeDrift } from "./drift.js";
export { sameMarkerIdentity } from "./marker-identity.js";
export { approvalDocumentSha256 } from "./approval-digest.js";
export { LATE_EVIDENCE_MS, provedBeforeDeadline } from "./late-proof.js";
