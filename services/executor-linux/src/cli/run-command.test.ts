import { execFile } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { MAX_ARGV_ENTRIES } from "../supervisor/spec.js";

// `seraph-exec run` through the compiled bin (tests spawn dist/).
const BIN = fileURLToPath(new URL("../../bin/seraph-exec.js", import.meta.url));

/** Live processes with an argument under `dir` (a warm supervisor has `--warm <dir>/…`). */
function processesUnder(dir: string): number[] {
  return readdirSync("/proc")
    .filter((n) => /^\d+$/.test(n))
    .filter((n) => {
      try {
        return readFileSync(`/proc/${n}/cmdline`, "latin1").split("\0").some((a) => a.startsWith(`${dir}/`));
      } catch {
        return false;
      }
    })
    .map(Number);
}

function cli(args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { timeout: 60_000, env }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      resolve({ code: typeof code === "number" ? code : 1, stdout, stderr });
    });
  });
}

describe("seraph-exec run argument checks", () => {
  it("refuses an argv longer than the supervisor accepts as a usage error (exit 2), leaving no run dir", async () => {
    // A temporary directory of its own (run directories go under TMPDIR): other test files
    // running at the same time create seraph-exec-* directories in the shared one.
    const tmp = await mkdtemp(join(tmpdir(), "seraph-exec-argv-"));
    try {
      const r = await cli(["run", "--json", "--", "/bin/true", ...Array.from({ length: MAX_ARGV_ENTRIES }, (_, i) => `a${i}`)], { ...process.env, TMPDIR: tmp });
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`at most ${MAX_ARGV_ENTRIES}`);
      expect(r.stdout).toBe("");
      // The supervisor run started ahead (warm, owning nothing) is ended and its run directory
      // removed: nothing is left behind.
      expect(await readdir(tmp)).toEqual([]);
      expect(processesUnder(tmp)).toEqual([]);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  });
});

describe("seraph-exec run's supervisor", () => {
  it("is started ahead, warm, and handed the spec: the kept run directory's log begins with the warm supervisor", async () => {
    const r = await cli(["run", "--json", "--keep-run-dir", "--job-user", "none", "--", "/bin/echo", "ahead"]);
    expect(r.code, r.stderr).toBe(0);
    const receipt = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { runDir: string; outcome: string };
    try {
      expect(receipt.outcome).toBe("succeeded");
      const events = (await readFile(join(receipt.runDir, "supervisor.log"), "utf8")).trim().split("\n").map((l) => (JSON.parse(l) as { event: string }).event);
      expect(events.slice(0, 3)).toEqual(["warm_ready", "warm_spec_taken", "starting"]);
      expect(events).toContain("receipt_written");
    } finally {
      await rm(receipt.runDir, { recursive: true, force: true });
    }
  });
});

describe("seraph-exec run with a command that does not exist", () => {
  it("exits 127 and still ends stdout with one JSON object saying nothing started", async () => {
    const r = await cli(["run", "--json", "--", "seraph-no-such-command-7f3a", "x"]);
    expect(r.code).toBe(127);
    const last = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as Record<string, unknown>;
    expect(last).toMatchObject({ outcome: "failed", reason: "command_not_found", exitCode: null, echildObserved: false });
    expect(last["commands"]).toEqual([{ name: "command", argv: ["seraph-no-such-command-7f3a", "x"], started: false }]);
  });
});
