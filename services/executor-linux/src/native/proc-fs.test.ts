import { describe, expect, test } from "vitest";
import { decodeWaitStatus } from "./native-system.js";
import { createProcFs, isDeadState, isExited, parseProcStat, signalDisposition } from "./proc-fs.js";

describe("parseProcStat", () => {
  test("takes the fixed fields after the LAST ')' even when comm contains ') ' and spaces", () => {
    const fields = ["S", "4242", "4300", "4301", "0", "-1", "4194560", "1", "0", "0", "0", "5", "6", "0", "0", "20", "0", "3", "0", "987654321", "1000"];
    const stat = parseProcStat(`1234 (evil) S 1 1 1 (x) ) ${fields.join(" ")}\n`);
    expect(stat.pid).toBe(1234);
    expect(stat.comm).toBe("evil) S 1 1 1 (x) ");
    expect(stat.state).toBe("S");
    expect(stat.ppid).toBe(4242);
    expect(stat.pgrp).toBe(4300);
    expect(stat.session).toBe(4301);
    expect(stat.threads).toBe(3);
    expect(stat.startTimeTicks).toBe(987654321n);
  });

  test("isExited: a zombie leader with threads left is not exited; a zombie alone is", () => {
    expect(isExited({ state: "Z", threads: 2 })).toBe(false);
    expect(isExited({ state: "Z", threads: 1 })).toBe(true);
    expect(isExited({ state: "X", threads: 1 })).toBe(true);
    expect(isExited({ state: "S", threads: 1 })).toBe(false);
  });

  test("rejects truncated text", () => {
    expect(() => parseProcStat("12 (x) S 1 2")).toThrow(/field/);
    expect(() => parseProcStat("garbage")).toThrow(/malformed/);
  });

  test("reads this process from the real /proc", () => {
    const proc = createProcFs();
    const self = proc.readStat(process.pid);
    expect(self?.pid).toBe(process.pid);
    expect(self?.ppid).toBe(process.ppid);
    expect(self?.startTimeTicks).toBeGreaterThan(0n);
    expect(proc.readStat(2 ** 30)).toBeUndefined();
    expect(proc.readBootId()).toMatch(/^[0-9a-f-]{36}$/);
    expect(proc.listPids()).toContain(process.pid);
  });
});

describe("signalDisposition", () => {
  const status = (cgt: string, ign: string) => `Name:\tx\nSigBlk:\t0000000000000000\nSigIgn:\t${ign}\nSigCgt:\t${cgt}\n`;
  test("SIGCHLD (17) is bit 16", () => {
    expect(signalDisposition(status("0000000000000000", "0000000000000000"), 17)).toBe("default");
    expect(signalDisposition(status("0000000000010000", "0000000000000000"), 17)).toBe("caught");
    expect(signalDisposition(status("0000000000000000", "0000000000010000"), 17)).toBe("ignored");
    expect(signalDisposition(status("0000000000004000", "0000000000000000"), 15)).toBe("caught");
  });
});

describe("wait status and states", () => {
  test("decodeWaitStatus follows the W* macros", () => {
    expect(decodeWaitStatus(3 << 8)).toEqual({ kind: "exited", code: 3 });
    expect(decodeWaitStatus(0)).toEqual({ kind: "exited", code: 0 });
    expect(decodeWaitStatus(9)).toEqual({ kind: "signaled", signal: 9, coreDumped: false });
    expect(decodeWaitStatus(0x80 | 11)).toEqual({ kind: "signaled", signal: 11, coreDumped: true });
  });
  test("zombies and dead tasks are dead", () => {
    expect(isDeadState("Z")).toBe(true);
    expect(isDeadState("X")).toBe(true);
    expect(isDeadState("T")).toBe(false);
    expect(isDeadState("S")).toBe(false);
  });
});
