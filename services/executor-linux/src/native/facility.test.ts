import { describe, expect, test } from "vitest";
import { probeFacilitiesInThisProcess, facilityBlocker } from "./facility.js";
import { NativeCallError, type NativeSystem } from "./native-system.js";
import type { ProcFs } from "./proc-fs.js";

const okStatus = "SigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\n";

function fakeProc(overrides: Partial<ProcFs> = {}): ProcFs {
  return {
    listPids: () => [1, process.pid],
    readStat: (pid) => ({ pid, comm: "node", state: "S", ppid: 1, pgrp: pid, session: pid, threads: 1, startTimeTicks: 5n }),
    readBootId: () => "4bf97e8a-fc4c-4b0b-9c08-64ccba3e447d",
    readSelfStatus: () => okStatus,
    ...overrides,
  };
}

function fakeNative(overrides: Partial<NativeSystem> = {}): NativeSystem {
  let subreaper = false;
  const base = {
    getpid: () => process.pid,
    getuid: () => 1000,
    getsid: () => process.pid,
    setsid: () => process.pid,
    setChildSubreaper: (on: boolean) => {
      subreaper = on;
    },
    isChildSubreaper: () => subreaper,
    pidfdOpen: () => ({ ok: true as const, fd: 99 }),
    pidfdSendSignal: () => ({ ok: true as const }),
    close: () => undefined,
    waitAny: () => ({ kind: "echild" as const }),
    pipe: () => [3, 4] as const,
    spawn: () => ({ ok: false as const, errno: 38 }),
    peerCredentials: () => ({ pid: 1, uid: 1000, gid: 1000 }),
    watchReadable: () => ({ close: () => undefined }),
  };
  return { ...base, ...overrides };
}

const linux = { platform: "linux", arch: "x64", kernelRelease: "6.1.0" };

describe("probeFacilitiesInThisProcess (fakes)", () => {
  test("everything present → ok, with a native layer", () => {
    const { report, native } = probeFacilitiesInThisProcess({ ...linux, loadNative: () => fakeNative(), proc: fakeProc() });
    expect(report.ok).toBe(true);
    expect(report.items.map((i) => i.name)).toEqual(["platform", "arch", "kernel", "proc", "libc", "pidfd", "subreaper", "sigchld"]);
    expect(native).toBeDefined();
    expect(facilityBlocker(report)).toBeUndefined();
  });

  test("macOS is blocked with a reason, never a fallback", () => {
    const { report, native } = probeFacilitiesInThisProcess({
      platform: "darwin",
      arch: "arm64",
      kernelRelease: "23.0.0",
      loadNative: () => fakeNative(),
      proc: fakeProc(),
    });
    expect(report.ok).toBe(false);
    expect(native).toBeUndefined();
    const codes = report.items.filter((i) => !i.ok).map((i) => i.code);
    expect(codes).toEqual(expect.arrayContaining(["unsupported_platform", "unsupported_arch", "native_unavailable"]));
    expect(facilityBlocker(report)).toMatch(/^unsupported_platform: /);
  });

  test("each missing Linux facility blocks with its own code", () => {
    const cases: Array<[string, Parameters<typeof probeFacilitiesInThisProcess>[0]]> = [
      ["kernel_too_old", { ...linux, kernelRelease: "5.2.9", loadNative: () => fakeNative(), proc: fakeProc() }],
      ["pidfd_unavailable", { ...linux, loadNative: () => fakeNative({ pidfdOpen: () => ({ ok: false, errno: 38 }) }), proc: fakeProc() }],
      ["subreaper_unverified", { ...linux, loadNative: () => fakeNative({ isChildSubreaper: () => false }), proc: fakeProc() }],
      [
        "subreaper_unavailable",
        {
          ...linux,
          loadNative: () =>
            fakeNative({
              setChildSubreaper: () => {
                throw new NativeCallError("prctl", 22);
              },
            }),
          proc: fakeProc(),
        },
      ],
      ["sigchld_not_default", { ...linux, loadNative: () => fakeNative(), proc: fakeProc({ readSelfStatus: () => "SigIgn:\t0\nSigCgt:\t10000\n" }) }],
      ["proc_unreadable", { ...linux, loadNative: () => fakeNative(), proc: fakeProc({ readBootId: () => { throw new Error("EACCES"); } }) }],
      ["native_unavailable", { ...linux, loadNative: () => { throw new NativeCallError("dlsym(posix_spawn_file_actions_addclosefrom_np)", 38); }, proc: fakeProc() }],
    ];
    for (const [code, deps] of cases) {
      const { report } = probeFacilitiesInThisProcess(deps);
      expect(report.ok, code).toBe(false);
      expect(report.items.filter((i) => !i.ok).map((i) => i.code), code).toContain(code);
      for (const item of report.items) expect(item.message.length, item.name).toBeGreaterThan(0);
    }
  });
});
