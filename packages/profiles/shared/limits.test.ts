import { describe, expect, it } from "vitest";
import { LimitOverrideError } from "./errors.js";
import { DEFAULT_LIMITS, DEFAULT_LIMIT_VALUES, limitValues, limitsChanged, parseLimitOverrides } from "./limits.js";

describe("limits", () => {
  it("defaults are the ADR-007 values", () => {
    expect(limitValues(DEFAULT_LIMITS as never)).toEqual({
      snapshot_bytes: 64 * 1024 * 1024,
      source_files: 2000,
      source_file_bytes: 2 * 1024 * 1024,
      dependency_files: 512,
      dependency_file_bytes: 16 * 1024 * 1024,
      patch_bytes: 1024 * 1024,
      output_bytes: 16 * 1024 * 1024,
      stream_bytes: 1024 * 1024,
      wall_ms: 180_000,
    });
    expect(Object.isFrozen(DEFAULT_LIMITS)).toBe(true);
    expect(Object.isFrozen(DEFAULT_LIMIT_VALUES)).toBe(true);
  });

  it("applies overrides and lists what changed", () => {
    const limits = parseLimitOverrides(["dependency_files=1_000", "wall_ms=60,000"]);
    expect(limitValues(limits).dependency_files).toBe(1000);
    expect(limitValues(limits).wall_ms).toBe(60000);
    expect(limitsChanged(limits)).toEqual(["dependency_files", "wall_ms"]);
    expect(limitsChanged(parseLimitOverrides(["wall_ms=180000"]))).toEqual([]);
  });

  it("reports every bad override", () => {
    try {
      parseLimitOverrides(["snapshot=1", "wall_ms=-5", "source_files=abc", "patch_bytes=0", "wall_ms"]);
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(LimitOverrideError);
      expect((err as LimitOverrideError).reasons.map((r) => r.code)).toEqual(["limit_unknown", "limit_invalid", "limit_invalid", "limit_invalid", "limit_invalid"]);
    }
  });
});
