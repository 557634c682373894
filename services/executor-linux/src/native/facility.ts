import { release } from "node:os";
import { create } from "@bufbuild/protobuf";
import {
  FacilityItemSchema,
  FacilityReportSchema,
  type FacilityItem,
  type FacilityReport,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { NativeCallError, type NativeSystem } from "./native-system.js";
import { signalDisposition, type ProcFs } from "./proc-fs.js";

const SIGCHLD = 17;
/** pidfd_open arrived in Linux 5.3 (pidfd_send_signal in 5.1). */
const MIN_KERNEL: readonly [number, number] = [5, 3];

/** What the in-process probe needs; injected so tests can simulate missing facilities. */
export interface FacilityProbeDeps {
  /** Loads the native layer; may throw (e.g. libc symbol missing). */
  readonly loadNative: () => NativeSystem;
  readonly proc: ProcFs;
  readonly platform?: string;
  readonly arch?: string;
  readonly kernelRelease?: string;
}

/** The probe result plus the loaded native layer when the report is ok. */
export interface FacilityProbe {
  readonly report: FacilityReport;
  readonly native: NativeSystem | undefined;
}

/** Records one checked item; returns `ok`. */
type AddItem = (name: string, ok: boolean, code: string, message: string) => boolean;

/**
 * Probes the facilities the supervisor needs IN THE CALLING PROCESS: it makes the caller a
 * child subreaper (and reads that back). Only the supervisor (or the short-lived probe
 * process, `main.js --probe`) may call this; a controller uses `readFacilityReport()`,
 * which runs it in a child. Every missing item blocks with a reason code and a sentence;
 * nothing is ever replaced by a fallback.
 */
export function probeFacilitiesInThisProcess(deps: FacilityProbeDeps): FacilityProbe {
  const items: FacilityItem[] = [];
  const add: AddItem = (name, ok, code, message) => {
    items.push(create(FacilityItemSchema, { name, ok, code: ok ? "ok" : code, message }));
    return ok;
  };
  const platform = deps.platform ?? process.platform;
  const arch = deps.arch ?? process.arch;
  const kernel = deps.kernelRelease ?? release();
  checkPlatform(add, platform, arch, kernel);
  const bootId = checkProc(add, deps.proc);
  const native = loadNative(add, deps, platform, arch);
  checkNativeFacilities(add, native);
  checkSigchld(add, deps.proc);
  const ok = items.every((i) => i.ok);
  const report = create(FacilityReportSchema, { ok, items, kernel, arch, bootId });
  return { report, native: ok ? native : undefined };
}

function checkPlatform(add: AddItem, platform: string, arch: string, kernel: string): void {
  add("platform", platform === "linux", "unsupported_platform",
    platform === "linux" ? "Linux." : `Platform ${platform} is not supported; the supervisor needs Linux.`);
  add("arch", arch === "x64", "unsupported_arch",
    arch === "x64" ? "x86_64." : `Architecture ${arch} is not supported; the native layer uses the x86_64 syscall ABI.`);
  const version = /^(\d+)\.(\d+)/.exec(kernel);
  const major = Number(version?.[1] ?? 0);
  const minor = Number(version?.[2] ?? 0);
  const kernelOk = major > MIN_KERNEL[0] || (major === MIN_KERNEL[0] && minor >= MIN_KERNEL[1]);
  add("kernel", kernelOk, "kernel_too_old",
    kernelOk ? `Kernel ${kernel} has pidfd_open (5.3+).` : `Kernel ${kernel} is older than 5.3 and lacks pidfd_open.`);
}

/** Checks /proc; returns the boot id ("" when unreadable). */
function checkProc(add: AddItem, proc: ProcFs): string {
  let bootId = "";
  try {
    bootId = proc.readBootId();
    const self = proc.readStat(process.pid);
    const procOk = bootId.length > 0 && self !== undefined && self.pid === process.pid && proc.listPids().length > 0;
    add("proc", procOk, "proc_unreadable",
      procOk ? "/proc is readable (stat, boot_id, directory)." : "/proc did not return this process's stat or the boot id.");
  } catch (err) {
    add("proc", false, "proc_unreadable", `/proc is not readable: ${(err as Error).message}.`);
  }
  return bootId;
}

function loadNative(add: AddItem, deps: FacilityProbeDeps, platform: string, arch: string): NativeSystem | undefined {
  if (platform !== "linux" || arch !== "x64") {
    add("libc", false, "native_unavailable", "The native layer is only built for Linux x86_64.");
    return undefined;
  }
  try {
    const native = deps.loadNative();
    add("libc", true, "ok", "libc loaded with posix_spawn (addchdir_np, addclosefrom_np), waitpid, prctl, getsockopt.");
    return native;
  } catch (err) {
    const detail = err instanceof NativeCallError ? err.call : (err as Error).message;
    add("libc", false, "native_unavailable", `The native layer could not load: ${detail}.`);
    return undefined;
  }
}

/** pidfds and the child-subreaper bit (this makes the calling process a subreaper). */
function checkNativeFacilities(add: AddItem, native: NativeSystem | undefined): void {
  if (native === undefined) {
    add("pidfd", false, "pidfd_unavailable", "Not checked: the native layer is unavailable.");
    add("subreaper", false, "subreaper_unavailable", "Not checked: the native layer is unavailable.");
    return;
  }
  const opened = native.pidfdOpen(native.getpid());
  if (!opened.ok) {
    add("pidfd", false, "pidfd_unavailable", `pidfd_open failed with errno ${opened.errno}.`);
  } else {
    const sent = native.pidfdSendSignal(opened.fd, 0);
    native.close(opened.fd);
    add("pidfd", sent.ok, "pidfd_unavailable",
      sent.ok ? "pidfd_open and pidfd_send_signal work." : `pidfd_send_signal failed with errno ${sent.errno}.`);
  }
  try {
    native.setChildSubreaper(true);
    const on = native.isChildSubreaper();
    add("subreaper", on, "subreaper_unverified",
      on ? "PR_SET_CHILD_SUBREAPER set and read back." : "PR_SET_CHILD_SUBREAPER did not read back as set.");
  } catch (err) {
    add("subreaper", false, "subreaper_unavailable", `PR_SET_CHILD_SUBREAPER failed: ${(err as Error).message}.`);
  }
}

function checkSigchld(add: AddItem, proc: ProcFs): void {
  try {
    const disposition = signalDisposition(proc.readSelfStatus(), SIGCHLD);
    add("sigchld", disposition === "default", "sigchld_not_default",
      disposition === "default"
        ? "SIGCHLD is at its default disposition (nothing else reaps)."
        : `SIGCHLD is ${disposition} in this process; something else would reap children.`);
  } catch (err) {
    add("sigchld", false, "sigchld_unreadable", `SIGCHLD disposition unreadable: ${(err as Error).message}.`);
  }
}

/** The first blocking item of a report, as "code: message", or undefined when it is ok. */
export function facilityBlocker(report: FacilityReport): string | undefined {
  const item = report.items.find((i) => !i.ok);
  return item === undefined ? undefined : `${item.code}: ${item.message}`;
}
