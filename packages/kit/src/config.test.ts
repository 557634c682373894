import { describe, expect, it } from "vitest";
import { bool, ConfigError, int, oneOf, optionalStr, readConfig, str } from "./config.js";

describe("readConfig", () => {
  const spec = { HOST: str("127.0.0.1"), PORT: int(7400, 0, 65535), URL: str(), DEBUG: bool(false), MODE: oneOf(["a", "b"] as const, "a"), OPT: optionalStr() };

  it("applies defaults and returns a frozen object", () => {
    const c = readConfig({ URL: "postgres://x" }, spec);
    expect(c).toEqual({ HOST: "127.0.0.1", PORT: 7400, URL: "postgres://x", DEBUG: false, MODE: "a", OPT: undefined });
    expect(Object.isFrozen(c)).toBe(true);
  });

  it("names every problem at once", () => {
    try {
      readConfig({ PORT: "70000", DEBUG: "yes", MODE: "c" }, spec);
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      const problems = (err as ConfigError).problems;
      expect(problems).toContain("URL is required");
      expect(problems.some((p) => p.startsWith("PORT must be between 0 and 65535"))).toBe(true);
      expect(problems.some((p) => p.startsWith("DEBUG must be true or false"))).toBe(true);
      expect(problems.some((p) => p.startsWith("MODE must be one of a, b"))).toBe(true);
    }
  });

  it("rejects non-integers", () => {
    expect(() => readConfig({ URL: "u", PORT: "12ab" }, spec)).toThrow(/PORT must be an integer/);
  });
});
