import { closeSync, openSync, readFileSync, readSync, readdirSync } from "node:fs";

/** The fields of /proc/<pid>/stat the supervisor uses. */
export interface ProcStat {
  readonly pid: number;
  /** Field 2 without the parentheses (may contain spaces or parentheses itself). */
  readonly comm: string;
  /** Field 3: R, S, D, T, t, Z, X, I, … */
  readonly state: string;
  readonly ppid: number;
  readonly pgrp: number;
  readonly session: number;
  /**
   * Field 20: threads in the thread group (the kernel's nr_threads). A leader that exited via
   * SYS_exit while other threads run shows state Z here but a count above 1: the group is alive.
   */
  readonly threads: number;
  /** Field 22: start time in clock ticks since boot. */
  readonly startTimeTicks: bigint;
}

/** Read access to /proc, behind an interface so tests can inject a fake process table. */
export interface ProcFs {
  /** Numeric entries of /proc (thread-group ids), in directory order. */
  listPids(): number[];
  /** /proc/<pid>/stat parsed, or undefined when the process is gone (or unreadable). */
  readStat(pid: number): ProcStat | undefined;
  /** The host's boot id, trimmed: /proc/sys/kernel/random/boot_id (or the test-only file). */
  readBootId(): string;
  /** /proc/self/status as text (signal dispositions live there). */
  readSelfStatus(): string;
}

/**
 * True for states in which a task has exited. For a whole process use `isExited`: the state
 * of /proc/<tgid>/stat is the leader's, and a leader can exit before its other threads.
 */
export function isDeadState(state: string): boolean {
  return state === "Z" || state === "X" || state === "x";
}

/**
 * True when the whole thread group has exited and only waits to be reaped: a dead state AND
 * no thread but the leader left. A zombie leader (`pthread_exit` in `main`, SYS_exit) whose
 * other threads still run is alive — it can be signalled through the leader's pidfd (a
 * process-directed signal such as SIGKILL reaches every thread) and is reapable only once the
 * last thread is gone.
 */
export function isExited(stat: Pick<ProcStat, "state" | "threads">): boolean {
  return isDeadState(stat.state) && stat.threads <= 1;
}

/**
 * Parses /proc/<pid>/stat. The comm field may contain spaces and ')' so the fixed fields are
 * taken after the LAST ')'. Throws on malformed text.
 */
export function parseProcStat(text: string): ProcStat {
  const open = text.indexOf("(");
  const close = text.lastIndexOf(")");
  if (open < 0 || close < open) throw new Error(`malformed /proc stat: ${JSON.stringify(text.slice(0, 80))}`);
  const pid = Number.parseInt(text.slice(0, open), 10);
  // After ")": " S ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
  // stime cutime cstime priority nice threads itrealvalue starttime ..." (fields 3..22+).
  const rest = text.slice(close + 2).split(" ");
  const field = (n: number): string => {
    const v = rest[n - 3];
    if (v === undefined) throw new Error(`malformed /proc stat: field ${n} missing`);
    return v;
  };
  return {
    pid,
    comm: text.slice(open + 1, close),
    state: field(3),
    ppid: Number.parseInt(field(4), 10),
    pgrp: Number.parseInt(field(5), 10),
    session: Number.parseInt(field(6), 10),
    threads: Number.parseInt(field(20), 10),
    startTimeTicks: BigInt(field(22)),
  };
}

/** The kernel's boot id: the one source of the host's boot identity in production. */
export const KERNEL_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id";

/** Options of createProcFs. */
export interface ProcFsOptions {
  /**
   * TEST ONLY: read the boot id from this file instead of `<root>/sys/kernel/random/boot_id`.
   * The executor passes the same file to every supervisor it starts (spec.test_boot_id_file),
   * so both sides read the boot id from one source; it is honoured only when the executor's
   * configuration explicitly allows it (SERAPH_TEST_ALLOW_BOOT_ID_FILE=1), never in production.
   */
  readonly bootIdFile?: string | undefined;
}

/** Reads a boot id file (one line); throws when it is unreadable or empty. */
export function readBootIdFile(file: string): string {
  const id = readFileSync(file, "utf8").trim();
  if (id === "") throw new Error(`boot id file ${file} is empty`);
  return id;
}

/** The real /proc (or another procfs mount for tests). Holds one reusable read buffer. */
export function createProcFs(root = "/proc", options: ProcFsOptions = {}): ProcFs {
  const bootIdFile = options.bootIdFile !== undefined && options.bootIdFile !== "" ? options.bootIdFile : `${root}/sys/kernel/random/boot_id`;
  const buffer = Buffer.allocUnsafe(4096);
  return {
    listPids() {
      const pids: number[] = [];
      for (const name of readdirSync(root)) {
        const c = name.charCodeAt(0);
        if (c < 48 || c > 57) continue;
        pids.push(Number.parseInt(name, 10));
      }
      return pids;
    },
    readStat(pid) {
      let fd: number;
      try {
        fd = openSync(`${root}/${pid}/stat`, "r");
      } catch {
        return undefined;
      }
      try {
        const n = readSync(fd, buffer, 0, buffer.length, 0);
        if (n <= 0) return undefined;
        return parseProcStat(buffer.toString("latin1", 0, n));
      } catch {
        // ESRCH on read: the process was reaped between open and read.
        return undefined;
      } finally {
        closeSync(fd);
      }
    },
    readBootId() {
      return readBootIdFile(bootIdFile);
    },
    readSelfStatus() {
      return readFileSync(`${root}/self/status`, "utf8");
    },
  };
}

/**
 * Reads a signal's disposition from /proc/<pid>/status text: "caught" (SigCgt), "ignored"
 * (SigIgn) or "default".
 */
export function signalDisposition(statusText: string, signal: number): "default" | "ignored" | "caught" {
  const mask = (name: string): bigint => {
    const m = new RegExp(`^${name}:\\s*([0-9a-fA-F]+)`, "m").exec(statusText);
    if (m?.[1] === undefined) throw new Error(`${name} missing from /proc status`);
    return BigInt(`0x${m[1]}`);
  };
  const bit = 1n << BigInt(signal - 1);
  if ((mask("SigCgt") & bit) !== 0n) return "caught";
  if ((mask("SigIgn") & bit) !== 0n) return "ignored";
  return "default";
}
