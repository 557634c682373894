import { describe, expect, it } from "vitest";
import { buildJobEnv } from "./job-env.js";

describe("buildJobEnv", () => {
  it("is exactly the documented, job-local map and inherits nothing", () => {
    const env = buildJobEnv("/jobs/j1");
    expect(env).toEqual({
      HOME: "/jobs/j1/home",
      TMPDIR: "/jobs/j1/tmp",
      XDG_CACHE_HOME: "/jobs/j1/home/.cache",
      XDG_CONFIG_HOME: "/jobs/j1/home/.config",
      npm_config_cache: "/jobs/j1/npm-cache",
      npm_config_userconfig: "/jobs/j1/home/.npmrc",
      npm_config_globalconfig: "/jobs/j1/home/.npmrc-global",
      PATH: "/usr/bin:/bin",
      LANG: "C.UTF-8",
      TZ: "UTC",
      NO_COLOR: "1",
    });
  });

  it("ignores the host environment entirely", () => {
    const saved = { ...process.env };
    try {
      Object.assign(process.env, { NODE_OPTIONS: "--require /tmp/evil.js", npm_config_registry: "http://evil", OPENAI_API_KEY: "sk-x", GITHUB_TOKEN: "t", HOME: "/root", PATH: "/evil:/usr/bin" });
      const env = buildJobEnv("/jobs/j2");
      for (const key of ["NODE_OPTIONS", "npm_config_registry", "OPENAI_API_KEY", "GITHUB_TOKEN", "NODE_PATH"]) expect(env).not.toHaveProperty(key);
      expect(env.HOME).toBe("/jobs/j2/home");
      expect(env.PATH).toBe("/usr/bin:/bin");
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  });
});
