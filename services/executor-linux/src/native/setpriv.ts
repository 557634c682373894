import { spawn, spawnSync } from "node:child_process";
import { lstatSync, statSync } from "node:fs";
import { dirname, sep } from "node:path";

/**
 * Where util-linux's setpriv is looked for (fixed paths, never PATH). posix_spawn cannot change
 * credentials, and forking the supervisor's own (multi-threaded) Node process to run JavaScript
 * in the child is not safe, so the spawn path executes setpriv as the child: it drops the
 * supplementary groups (setgroups(0, NULL)), sets the gid then the uid (real, effective and
 * saved), clears the inheritable capabilities and the bounding set, sets PR_SET_NO_NEW_PRIVS and
 * execs the command with the environment it was given. Nothing of the command runs before that.
 */
export const SETPRIV_CANDIDATES: readonly string[] = ["/usr/bin/setpriv", "/bin/setpriv"];

/** A setpriv executable that may run as root on the command's behalf, or why none may. */
export type SetprivLookup = { readonly ok: true; readonly path: string } | { readonly ok: false; readonly reason: string };

function trustedByRoot(path: string): string | undefined {
  const st = lstatSync(path, { throwIfNoEntry: false });
  if (st === undefined) return `${path} does not exist`;
  if (st.uid !== 0) return `${path} is not owned by root`;
  if ((st.mode & 0o022) !== 0) return `${path} is writable by group or others`;
  return undefined;
}

/**
 * Finds a setpriv that is safe to execute as root: a regular file owned by root and not group- or
 * other-writable, in a directory with the same properties (so no other user can replace it).
 */
export function findTrustedSetpriv(candidates: readonly string[] = SETPRIV_CANDIDATES): SetprivLookup {
  return findTrustedExecutable(candidates, "setpriv (util-linux)");
}

/** Where coreutils' `test` is looked for (fixed paths, never PATH): the job-user access check runs it. */
export const TEST_CANDIDATES: readonly string[] = ["/usr/bin/test", "/bin/test"];

/** The first of `candidates` that is safe to execute as root (see findTrustedSetpriv). */
export function findTrustedExecutable(candidates: readonly string[], what: string): SetprivLookup {
  const problems: string[] = [];
  for (const path of candidates) {
    const st = lstatSync(path, { throwIfNoEntry: false });
    if (st === undefined) {
      problems.push(`${path} does not exist`);
      continue;
    }
    if (!st.isFile()) {
      problems.push(`${path} is not a regular file`);
      continue;
    }
    const bad = trustedByRoot(path) ?? trustedByRoot(dirname(path));
    if (bad !== undefined) {
      problems.push(bad);
      continue;
    }
    return { ok: true, path };
  }
  return { ok: false, reason: `no trusted ${what}: ${problems.join("; ")}` };
}

/**
 * The argv that runs `argv` as uid/gid through setpriv: no supplementary groups, real/effective/
 * saved ids all changed, inheritable capabilities and the bounding set cleared, no_new_privs set.
 * `argv[0]` must be absolute (setpriv would search PATH for a bare name).
 */
export function setprivArgv(setprivPath: string, uid: number, gid: number, argv: readonly string[]): string[] {
  return [
    setprivPath,
    `--regid=${gid}`,
    `--reuid=${uid}`,
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
    "--",
    ...argv,
  ];
}

/** What a job user may do with a path, asked of the kernel as that user. */
/** The trusted setpriv and coreutils `test` a job-user access check runs, or why one is missing. */
export function jobUserAccessTools(): { readonly ok: true; readonly setpriv: string; readonly test: string } | { readonly ok: false; readonly reason: string } {
  const setpriv = findTrustedSetpriv();
  if (!setpriv.ok) return { ok: false, reason: setpriv.reason };
  const test = findTrustedExecutable(TEST_CANDIDATES, "test (coreutils)");
  if (!test.ok) return { ok: false, reason: test.reason };
  return { ok: true, setpriv: setpriv.path, test: test.path };
}

/** A job user as messages name it: "name (uid:gid)", or "uid:gid" without a name. */
export function jobUserLabel(u: { readonly uid: number; readonly gid: number; readonly name: string }): string {
  return u.name !== "" ? `${u.name} (${u.uid}:${u.gid})` : `${u.uid}:${u.gid}`;
}

export interface JobUserAccess {
  /** "ok", or the first path (cwd or one of its parents) the user cannot search. */
  readonly problem: "ok" | "cannot_enter" | "cannot_execute" | "cannot_write";
  /** The path the problem is about (the first component the user cannot search, for cannot_enter). */
  readonly path: string;
  /** "mode 0700, owner 0:0" of that path, when it could be read. */
  readonly detail: string;
}

function describePath(path: string): string {
  try {
    const st = statSync(path);
    return `mode ${(st.mode & 0o7777).toString(8).padStart(4, "0")}, owner ${st.uid}:${st.gid}`;
  } catch (err) {
    return (err as Error).message;
  }
}

/**
 * Asks the kernel, as uid/gid with no supplementary groups (exactly what setpriv gives the
 * command), whether it can enter `cwd` (search permission on it and every parent), execute
 * `executable` and write `cwd`: coreutils `test -x` / `test -w` run through setpriv, so ACLs and
 * every mount option count. The first failing check is returned, with the first path component
 * the user cannot search for `cannot_enter`. Each check is one setpriv process exec'ing `test`:
 * two when the user can enter and execute (that pair, then the write; one with `write: false`,
 * which leaves the write to checkJobUserWrite), more only to name what failed. Needs root
 * (setpriv must be able to change ids).
 */
export function checkJobUserAccess(setprivPath: string, testPath: string, uid: number, gid: number, cwd: string, executable: string, options: { readonly write?: boolean } = {}): JobUserAccess {
  const as = (...args: string[]): boolean => {
    // setprivArgv's first entry is setpriv's argv[0], which spawnSync takes as its file: passed
    // as an argument too, setpriv would exec itself once more before the check.
    const [, ...setprivArgs] = setprivArgv(setprivPath, uid, gid, [testPath, ...args]);
    return spawnSync(setprivPath, setprivArgs, { stdio: "ignore", timeout: 10_000 }).status === 0;
  };
  // The usual case in one check (enter cwd and execute argv[0]); any failure is told apart below.
  const entersAndExecutes = as("-d", cwd, "-a", "-x", cwd, "-a", "-f", executable, "-a", "-x", executable);
  if (!entersAndExecutes && !as("-d", cwd, "-a", "-x", cwd)) {
    // Which component stops it: the first prefix it cannot search.
    const parts = cwd.split(sep).filter((p) => p !== "");
    let prefix = "";
    for (const part of parts) {
      prefix = `${prefix}${sep}${part}`;
      if (!as("-x", prefix)) return { problem: "cannot_enter", path: prefix, detail: describePath(prefix) };
    }
    return { problem: "cannot_enter", path: cwd, detail: describePath(cwd) };
  }
  if (!entersAndExecutes) return { problem: "cannot_execute", path: executable, detail: describePath(executable) };
  if (options.write !== false && !as("-w", cwd)) return { problem: "cannot_write", path: cwd, detail: describePath(cwd) };
  return { problem: "ok", path: cwd, detail: "" };
}

/**
 * checkJobUserAccess's write check alone, without blocking this process: one setpriv running
 * `test -w cwd` as uid/gid. "cannot_write" (with the mode and owner of `cwd`) or "ok".
 */
export function checkJobUserWrite(setprivPath: string, testPath: string, uid: number, gid: number, cwd: string): Promise<JobUserAccess> {
  const [, ...setprivArgs] = setprivArgv(setprivPath, uid, gid, [testPath, "-w", cwd]);
  return new Promise((resolve) => {
    const child = spawn(setprivPath, setprivArgs, { stdio: "ignore", timeout: 10_000 });
    const done = (writable: boolean): void => resolve(writable ? { problem: "ok", path: cwd, detail: "" } : { problem: "cannot_write", path: cwd, detail: describePath(cwd) });
    child.once("error", () => done(false));
    child.once("exit", (code) => done(code === 0));
  });
}
