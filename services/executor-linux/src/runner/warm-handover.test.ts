// A claim's hand-over to a warm supervisor (runner/job-execution.ts handOverWarm): taken, the
// warm process is the step's supervisor in the step's own run directory; refused, the directory
// is moved aside, the warm supervisor retired, and the caller launches cold.
import { existsSync, readdirSync, rmSync, rmdirSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { createRootLogger } from "@seraph/kit";
import { afterAll, describe, expect, test } from "vitest";
import { createProcFs } from "../native/proc-fs.js";
import { facilityGate, newTag, removeScenarioRunDirs, scenarioSpec } from "../../testing/supervisor-test-kit.js";
import { startWarmSupervisor } from "../supervisor-client/warm.js";
import { handOverWarm } from "./job-execution.js";
import type { Ctx } from "./attempt.js";

const skipReason = await facilityGate();
const log = createRootLogger({ name: "warm-handover-test", level: "silent" });
const ctx = { log, deps: { proc: createProcFs("/proc") } } as unknown as Pick<Ctx, "log" | "deps">;

describe.skipIf(skipReason !== undefined)("hand-over to a warm supervisor", () => {
  afterAll(() => removeScenarioRunDirs());

  test("taken: the warm process is the step's supervisor, in the step's run directory", async () => {
    const spec = scenarioSpec({ tag: newTag(), commands: [{ argv: ["/bin/true"] }] });
    rmdirSync(spec.runDir);
    const warm = await startWarmSupervisor(`${spec.runDir}-warm`);
    const handle = await handOverWarm(ctx, warm, spec);
    expect(handle?.pid).toBe(warm.pid);
    expect(handle?.marker.runDir).toBe(spec.runDir);
    const conn = await handle!.connect();
    await conn.cancel("test");
    await conn.receipt(true);
    await conn.close();
    expect(await handle!.waitGone(5000)).toBe(true);
  });

  test("refused (another boot-id source): the run directory is free again, the warm supervisor retired", async () => {
    const spec = scenarioSpec({ tag: newTag(), commands: [{ argv: ["/bin/true"] }] });
    rmdirSync(spec.runDir);
    const warm = await startWarmSupervisor(`${spec.runDir}-warm`, { testBootIdFile: "/proc/sys/kernel/random/boot_id" });
    expect(await handOverWarm(ctx, warm, spec)).toBeUndefined();
    // Where a cold launch makes the run directory, nothing is left; the warm one was moved aside.
    expect(existsSync(spec.runDir)).toBe(false);
    const aside = readdirSync(dirname(spec.runDir)).filter((n) => n.startsWith(`${basename(spec.runDir)}.stale-warm-`));
    expect(aside).toHaveLength(1);
    await warm.exited;
    rmSync(join(dirname(spec.runDir), aside[0]!), { recursive: true, force: true });
  });
});
