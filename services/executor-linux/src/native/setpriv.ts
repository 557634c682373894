import { lstatSync } from "node:fs";
import { dirname } from "node:path";

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
  return { ok: false, reason: `no trusted setpriv (util-linux): ${problems.join("; ")}` };
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
