// The job-user access check (checkJobUserAccess) as root: one setpriv process per `test` it runs,
// and the same verdicts as before it checked enter + execute in one go.
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { checkJobUserAccess, checkJobUserWrite, jobUserAccessTools } from "./setpriv.js";

const isRoot = process.geteuid?.() === 0;
const tools = jobUserAccessTools();
if (process.env["CI"] === "true" && (!isRoot || !tools.ok)) throw new Error("these tests need root, setpriv (util-linux) and test (coreutils) in CI");

const UID = 64_095;
const dir = mkdtempSync(join(tmpdir(), "seraph-setpriv-"));
chmodSync(dir, 0o755);
const setprivLog = join(dir, "setpriv.log");
const testLog = join(dir, "test.log");
// Wrappers that note each exec, then exec the real tool with the same arguments. The `test` one
// runs as the job user: it and its log must be open to that uid.
const fakeSetpriv = join(dir, "setpriv");
const fakeTest = join(dir, "test");
if (tools.ok) {
  writeFileSync(fakeSetpriv, `#!/bin/sh\nprintf '%s\\n' "$1" >> ${setprivLog}\nexec ${tools.setpriv} "$@"\n`, { mode: 0o755 });
  writeFileSync(fakeTest, `#!/bin/sh\necho test >> ${testLog}\nexec ${tools.test} "$@"\n`, { mode: 0o755 });
}
const lines = (path: string): string[] => readFileSync(path, "utf8").split("\n").filter((l) => l !== "");

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!isRoot || !tools.ok)("checkJobUserAccess as root", () => {
  beforeEach(() => {
    for (const log of [setprivLog, testLog]) {
      writeFileSync(log, "");
      chmodSync(log, 0o666);
    }
  });

  it("runs setpriv once per check: setpriv's first argument is an option, never its own path again", () => {
    // A directory the job user can enter but not write: enter + execute, then the write check.
    const cwd = join(dir, "ro");
    mkdirSync(cwd, { mode: 0o755 });
    const access = checkJobUserAccess(fakeSetpriv, fakeTest, UID, UID, cwd, "/bin/true");
    expect(access.problem).toBe("cannot_write");
    const setprivRuns = lines(setprivLog);
    expect(lines(testLog)).toHaveLength(2);
    expect(setprivRuns).toHaveLength(lines(testLog).length);
    for (const first of setprivRuns) expect(first).toBe(`--regid=${UID}`);
  });

  it("with write: false it stops after enter + execute; checkJobUserWrite asks the write alone, in one setpriv, without blocking", async () => {
    const cwd = join(dir, "ro2");
    mkdirSync(cwd, { mode: 0o755 });
    expect(checkJobUserAccess(fakeSetpriv, fakeTest, UID, UID, cwd, "/bin/true", { write: false }).problem).toBe("ok");
    expect(lines(testLog)).toHaveLength(1);
    const pending = checkJobUserWrite(fakeSetpriv, fakeTest, UID, UID, cwd);
    await expect(pending).resolves.toMatchObject({ problem: "cannot_write", path: cwd, detail: "mode 0755, owner 0:0" });
    const open = join(dir, "rw2");
    mkdirSync(open, { mode: 0o777 });
    chmodSync(open, 0o777);
    await expect(checkJobUserWrite(fakeSetpriv, fakeTest, UID, UID, open)).resolves.toMatchObject({ problem: "ok" });
    expect(lines(testLog)).toHaveLength(3);
    expect(lines(setprivLog)).toEqual(Array.from({ length: 3 }, () => `--regid=${UID}`));
  });

  it("tells a directory it cannot enter (the first component) from a program it cannot execute, as before", () => {
    const closed = join(dir, "closed");
    mkdirSync(join(closed, "inner"), { recursive: true, mode: 0o700 });
    chmodSync(closed, 0o700);
    const enter = checkJobUserAccess(fakeSetpriv, fakeTest, UID, UID, join(closed, "inner"), "/bin/true");
    expect(enter).toMatchObject({ problem: "cannot_enter", path: closed });
    expect(enter.detail).toMatch(/^mode 0700, owner 0:0$/);

    const open = join(dir, "open");
    mkdirSync(open, { mode: 0o777 });
    chmodSync(open, 0o777);
    const program = join(open, "prog");
    writeFileSync(program, "#!/bin/sh\n", { mode: 0o700 });
    expect(checkJobUserAccess(fakeSetpriv, fakeTest, UID, UID, open, program)).toMatchObject({ problem: "cannot_execute", path: program });
    chmodSync(program, 0o755);
    expect(checkJobUserAccess(fakeSetpriv, fakeTest, UID, UID, open, program)).toMatchObject({ problem: "ok" });
    // Still one setpriv per test run over every check above.
    expect(lines(setprivLog)).toHaveLength(lines(testLog).length);
  });
});
