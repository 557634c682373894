import { readFileSync, readlinkSync, readdirSync } from "node:fs";

/**
 * The initial PID namespace's identity (PROC_PID_INIT_INO, 0xEFFFFFFC, fixed in the kernel's
 * include/linux/proc_ns.h): the namespace of the host's init.
 */
export const INITIAL_PID_NAMESPACE = "pid:[4026531836]";

const NS_LINK = /^pid:\[[0-9]+\]$/;

/** True for a well-formed PID namespace link text ("pid:[<inode>]"). */
export function isPidNamespaceLink(text: string): boolean {
  return NS_LINK.test(text);
}

/**
 * readlink `<procRoot>/<pid>/ns/pid` ("pid:[4026532512]"); `pid` may be "self". Undefined when
 * the process is gone; throws the errno error (EACCES, EPERM) when it exists but the link may
 * not be read (ptrace read access is needed for another user's process).
 */
export function readPidNamespace(procRoot: string, pid: number | "self"): string | undefined {
  try {
    return readlinkSync(`${procRoot}/${pid}/ns/pid`);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ESRCH") return undefined;
    throw err;
  }
}

/**
 * The NSpid line of `<procRoot>/<pid>/status` (world-readable): the process's pid in every PID
 * namespace from the one `procRoot` belongs to down to its own. Undefined when gone.
 */
export function readNsPids(procRoot: string, pid: number): number[] | undefined {
  let text: string;
  try {
    text = readFileSync(`${procRoot}/${pid}/status`, "latin1");
  } catch {
    return undefined;
  }
  const m = /^NSpid:\s*([0-9\s]+)$/m.exec(text);
  if (m?.[1] === undefined) return undefined;
  return m[1].trim().split(/\s+/).map((p) => Number.parseInt(p, 10));
}

function numericEntries(procRoot: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync(procRoot)) {
    const c = name.charCodeAt(0);
    if (c >= 48 && c <= 57) out.push(Number.parseInt(name, 10));
  }
  return out;
}

/**
 * The pid, as `procRoot` numbers it, of the process whose pid is `innerPid` inside PID namespace
 * `namespace`: the entry whose ns/pid link is `namespace` and whose NSpid ends with `innerPid`.
 * Undefined when no such process is visible (gone, or the namespace is not below `procRoot`'s).
 */
export function findInPidNamespace(procRoot: string, namespace: string, innerPid: number): number | undefined {
  for (const pid of numericEntries(procRoot)) {
    const nspids = readNsPids(procRoot, pid);
    if (nspids === undefined || nspids.length < 2 || nspids[nspids.length - 1] !== innerPid) continue;
    let link: string | undefined;
    try {
      link = readPidNamespace(procRoot, pid);
    } catch {
      continue;
    }
    if (link === namespace) return pid;
  }
  return undefined;
}

/** The result of scanning a process table for one PID namespace. */
export interface PidNamespaceScan {
  /** Processes seen (numeric entries of procRoot). */
  readonly scanned: number;
  /** Processes whose ns/pid link is the namespace. */
  readonly members: number[];
  /**
   * Processes whose link could not be read and that are not provably elsewhere (their NSpid
   * shows them below procRoot's own namespace): the scan cannot exclude them.
   */
  readonly unreadable: number[];
}

/**
 * Scans every process `procRoot` shows for PID namespace `namespace`. A process whose link
 * cannot be read is excluded only when its NSpid has one entry (it lives in procRoot's own
 * namespace, so it is not in a child namespace); otherwise it is reported as unreadable.
 * Processes that exit during the scan are skipped (they are in no namespace any more).
 */
export function scanPidNamespace(procRoot: string, namespace: string): PidNamespaceScan {
  const members: number[] = [];
  const unreadable: number[] = [];
  const pids = numericEntries(procRoot);
  for (const pid of pids) {
    let link: string | undefined;
    try {
      link = readPidNamespace(procRoot, pid);
    } catch {
      const nspids = readNsPids(procRoot, pid);
      if (nspids === undefined || nspids.length === 1) continue;
      unreadable.push(pid);
      continue;
    }
    if (link === namespace) members.push(pid);
  }
  return { scanned: pids.length, members, unreadable };
}
