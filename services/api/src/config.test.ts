import { ConfigError } from "@seraph/kit";
import { describe, expect, it } from "vitest";
import { loadApiConfig } from "./config.js";

const base = { DATABASE_URL: "postgres://x", NATS_URL: "nats://127.0.0.1:4222", NATS_USER: "api", NATS_PASSWORD: "p", SERAPH_INTERNAL_TOKEN: "a".repeat(64), SERAPH_EXECUTOR_TOKEN: "b".repeat(64) };

describe("api config: separate credentials for jobs and for executor nodes", () => {
  it("reads both, and refuses one secret for both (every node holds the executor token)", () => {
    const c = loadApiConfig(base);
    expect([c.SERAPH_INTERNAL_TOKEN, c.SERAPH_EXECUTOR_TOKEN]).toEqual(["a".repeat(64), "b".repeat(64)]);
    expect(() => loadApiConfig({ ...base, SERAPH_EXECUTOR_TOKEN: base.SERAPH_INTERNAL_TOKEN })).toThrow(ConfigError);
    expect(() => loadApiConfig({ ...base, SERAPH_EXECUTOR_TOKEN: base.SERAPH_INTERNAL_TOKEN })).toThrow(/SERAPH_EXECUTOR_TOKEN must differ from SERAPH_INTERNAL_TOKEN/);
  });
});
