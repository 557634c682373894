import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { defaultSupervisorEntry, defaultSupervisorRuntime } from "../supervisor-client/paths.js";
import { checkNodeReadiness, NodeNotReadyError } from "./readiness.js";

describe("checkNodeReadiness", () => {
  const dir = mkdtempSync(join(tmpdir(), "seraph-readiness-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const refusal = (entry: string, runtime: string | undefined): NodeNotReadyError => {
    try {
      checkNodeReadiness(entry, runtime);
    } catch (err) {
      expect(err).toBeInstanceOf(NodeNotReadyError);
      return err as NodeNotReadyError;
    }
    throw new Error("expected the node not to be ready");
  };

  it("names the missing bundle and `npm run build`", () => {
    const err = refusal(join(dir, "absent.mjs"), process.execPath);
    expect([err.reason, err.path]).toEqual(["supervisor_missing", join(dir, "absent.mjs")]);
    expect(err.message).toContain("run `npm run build`");
  });

  it("names the missing runtime and how to provide one", () => {
    const entry = join(dir, "present.mjs");
    writeFileSync(entry, "");
    const err = refusal(entry, undefined);
    expect(err.reason).toBe("supervisor_runtime_missing");
    expect(err.message).toContain("SERAPH_SUPERVISOR_RUNTIME");
  });

  it("refuses a bundle that does not report its source", () => {
    const entry = join(dir, "not-a-supervisor.mjs");
    writeFileSync(entry, "process.stdout.write('not json');\n");
    const err = refusal(entry, process.execPath);
    expect(err.reason).toBe("supervisor_unrunnable");
    expect(err.message).toContain(`${entry} --source`);
  });

  it("returns the source hash of the built bundle", () => {
    expect(checkNodeReadiness(defaultSupervisorEntry(), defaultSupervisorRuntime())).toMatch(/^[0-9a-f]{64}$/);
  });
});
