import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";

/** Base class of the profile's errors: each carries the BlockReason(s) a caller can show. */
export class ProfileError extends Error {
  override readonly name: string = "ProfileError";
  /** The reasons, with stable codes, that explain this error. */
  readonly reasons: readonly BlockReason[];

  constructor(reasons: readonly BlockReason[], options?: { cause?: unknown }) {
    super(reasons.map((r) => `${r.code}: ${r.message}`).join("; ") || "profile error", options);
    this.reasons = reasons;
  }
}

/** A selection text that is not one of the three finite selections. */
export class SelectionError extends ProfileError {
  override readonly name = "SelectionError";
}

/** A `--limit NAME=VALUE` override that names no limit or has a bad value. */
export class LimitOverrideError extends ProfileError {
  override readonly name = "LimitOverrideError";
}
