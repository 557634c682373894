import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createSupervisorLogger } from "./log.js";
import { StorageNotes, storageErrno } from "./storage.js";

const scratch = mkdtempSync(join(tmpdir(), "sx-log-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const lines = (path: string) =>
  readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe("the supervisor's log", () => {
  it("appends one JSON line per call, on disk when the call returns, with pino's fields", () => {
    const path = join(scratch, "a.log");
    const log = createSupervisorLogger(path, { jobId: "j1", attempt: 2 });
    log.info({ event: "starting", specSha256: "ab" }, "supervisor starting");
    // Synchronous: the line is in the file before the next statement runs.
    expect(lines(path)).toHaveLength(1);
    log.warn({ event: "refused", code: "peer_uid", peerPid: 7 }, "refused: \"quoted\"\nnext line");
    log.error({ event: "no_message" });
    const [a, b, c] = lines(path);
    expect(a).toMatchObject({ level: 30, pid: process.pid, jobId: "j1", attempt: 2, event: "starting", specSha256: "ab", msg: "supervisor starting" });
    expect(typeof a?.["mono"]).toBe("number");
    expect(Date.parse(String(a?.["time"]))).toBeGreaterThan(Date.now() - 60_000);
    expect(b).toMatchObject({ level: 40, code: "peer_uid", peerPid: 7, msg: 'refused: "quoted"\nnext line' });
    expect(c).toMatchObject({ level: 50, event: "no_message" });
    expect(c).not.toHaveProperty("msg");
    expect(readFileSync(path, "utf8")).toContain('"code":"peer_uid"');
  });

  it("creates the file 0600, appends to an existing one, and writes nothing below info", () => {
    const path = join(scratch, "b.log");
    writeFileSync(path, '{"earlier":true}\n', { mode: 0o600 });
    const log = createSupervisorLogger(path, {});
    log.debug({ event: "drain_started" }, "not written");
    log.trace({ event: "x" }, "not written");
    log.fatal({ event: "uncaught_exception" }, "written");
    expect(lines(path).map((l) => l["event"] ?? "earlier")).toEqual(["earlier", "uncaught_exception"]);
    expect(lines(path)[1]?.["level"]).toBe(60);
    const fresh = join(scratch, "c.log");
    createSupervisorLogger(fresh, {}).info({ event: "e" }, "m");
    expect(statSync(fresh).mode & 0o777).toBe(0o600);
  });

  it("a child carries its bindings after the root's; bigints as decimal strings; errors as type, message, stack and their own fields", () => {
    const path = join(scratch, "d.log");
    const root = createSupervisorLogger(path, { warm: true });
    const job = root.child({ jobId: "j9", attempt: 1 });
    const err = Object.assign(new TypeError("boom", { cause: new Error("inner") }), { code: "EPERM", errno: -1 });
    job.warn({ event: "cgroup_kill_failed", err, ticks: 12345678901234567890n }, "cgroup.kill failed");
    root.info({ event: "root_again" }, "root");
    const [w, r] = lines(path);
    expect(w).toMatchObject({ warm: true, jobId: "j9", attempt: 1, ticks: "12345678901234567890" });
    expect(w?.["err"]).toMatchObject({ type: "TypeError", message: "boom", code: "EPERM", errno: -1, cause: { type: "Error", message: "inner" } });
    expect(String((w?.["err"] as { stack: string }).stack)).toContain("TypeError: boom");
    expect(r).not.toHaveProperty("jobId");
  });

  it("a line the storage refuses (ENOSPC: /dev/full) is dropped and counted in the storage notes, never thrown", () => {
    const notes = new StorageNotes();
    const log = createSupervisorLogger("/dev/full", {}, notes);
    expect(() => log.info({ event: "e" }, "m")).not.toThrow();
    log.child({ jobId: "j" }).error({ event: "f" }, "n");
    expect(notes.lines()).toEqual(["full: ENOSPC (2 lines dropped)"]);
  });

  it("only ENOSPC, EDQUOT and EIO count as the storage refusing a write", () => {
    expect(storageErrno(Object.assign(new Error("x"), { code: "EBADF" }))).toBeUndefined();
    expect(storageErrno(new Error("no code"))).toBeUndefined();
    for (const code of ["ENOSPC", "EDQUOT", "EIO"]) expect(storageErrno(Object.assign(new Error("x"), { code }))).toBe(code);
  });
});
