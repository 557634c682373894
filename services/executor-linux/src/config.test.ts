import { ConfigError } from "@seraph/kit";
import { describe, expect, it } from "vitest";
import { loadExecutorConfig } from "./config.js";
import { KERNEL_BOOT_ID_FILE } from "./native/proc-fs.js";

const base = { SERAPH_EXECUTOR_DATA_DIR: "/var/lib/seraph", NATS_URL: "nats://127.0.0.1:4222", SERAPH_EXECUTOR_TOKEN: "t", NATS_USER: "executor", NATS_PASSWORD: "p" };

describe("executor config: the boot-id file is a test-only setting", () => {
  it("defaults to the kernel's boot id", () => {
    expect(loadExecutorConfig(base).SERAPH_BOOT_ID_FILE).toBe(KERNEL_BOOT_ID_FILE);
  });
  it("refuses another boot-id file unless SERAPH_TEST_ALLOW_BOOT_ID_FILE=1 (a file fakes a reboot)", () => {
    let err: unknown;
    try {
      loadExecutorConfig({ ...base, SERAPH_BOOT_ID_FILE: "/tmp/fake-boot" });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect(String(err)).toMatch(/SERAPH_BOOT_ID_FILE.*test-only.*SERAPH_TEST_ALLOW_BOOT_ID_FILE=1/);
    expect(() => loadExecutorConfig({ ...base, SERAPH_BOOT_ID_FILE: "/tmp/fake-boot", SERAPH_TEST_ALLOW_BOOT_ID_FILE: "0" })).toThrow(ConfigError);
    expect(loadExecutorConfig({ ...base, SERAPH_BOOT_ID_FILE: "/tmp/fake-boot", SERAPH_TEST_ALLOW_BOOT_ID_FILE: "1" }).SERAPH_BOOT_ID_FILE).toBe("/tmp/fake-boot");
    expect(() => loadExecutorConfig({ ...base, SERAPH_BOOT_ID_FILE: "relative", SERAPH_TEST_ALLOW_BOOT_ID_FILE: "1" })).toThrow(/not an absolute path/);
  });
});

describe("executor config: the free-space floor", () => {
  it("SERAPH_MIN_FREE_BYTES defaults to 256 MiB and refuses less than 16 MiB, naming the variable", () => {
    expect(loadExecutorConfig(base).SERAPH_MIN_FREE_BYTES).toBe(256 * 1024 * 1024);
    expect(loadExecutorConfig({ ...base, SERAPH_MIN_FREE_BYTES: String(64 * 1024 * 1024) }).SERAPH_MIN_FREE_BYTES).toBe(64 * 1024 * 1024);
    expect(() => loadExecutorConfig({ ...base, SERAPH_MIN_FREE_BYTES: "1048576" })).toThrow(/SERAPH_MIN_FREE_BYTES/);
    expect(() => loadExecutorConfig({ ...base, SERAPH_MIN_FREE_BYTES: "lots" })).toThrow(ConfigError);
  });
});

describe("executor config: a node never holds the API's jobs credential", () => {
  it("requires SERAPH_EXECUTOR_TOKEN and refuses SERAPH_INTERNAL_TOKEN, naming both", () => {
    expect(loadExecutorConfig(base).SERAPH_EXECUTOR_TOKEN).toBe("t");
    expect(() => loadExecutorConfig({ ...base, SERAPH_INTERNAL_TOKEN: "x".repeat(64) })).toThrow(/SERAPH_INTERNAL_TOKEN must not be set on an executor node.*SERAPH_EXECUTOR_TOKEN/);
    const { SERAPH_EXECUTOR_TOKEN: _, ...without } = base;
    expect(() => loadExecutorConfig(without)).toThrow(/SERAPH_EXECUTOR_TOKEN/);
  });
});
