import { chmod, lchown, lstat, mkdir, readdir } from "node:fs/promises";
import { basename, join } from "node:path";
import type { JobUser } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";

/** The job root is not a directory the executor may stage job-user trees in. */
export class JobRootError extends Error {
  override readonly name = "JobRootError";
}

/**
 * Makes sure the job-user staging root exists as a real directory owned by root (this process),
 * mode 0711: job users can traverse to their own job directory but not list the others. A path
 * pre-created by anyone else (e.g. in a world-writable /tmp), a link, or a looser mode is refused,
 * never repaired.
 */
export async function ensureJobRoot(jobRoot: string): Promise<void> {
  await mkdir(jobRoot, { recursive: true, mode: 0o711 });
  const st = await lstat(jobRoot);
  const uid = process.geteuid?.() ?? -1;
  if (!st.isDirectory()) throw new JobRootError(`the job root ${jobRoot} is not a directory`);
  if (st.uid !== uid) throw new JobRootError(`the job root ${jobRoot} is owned by uid ${st.uid}, not by the executor (uid ${uid})`);
  if ((st.mode & 0o7777) !== 0o711) {
    if ((st.mode & 0o022) !== 0) throw new JobRootError(`the job root ${jobRoot} has mode ${(st.mode & 0o7777).toString(8)}; it must be 0711`);
    await chmod(jobRoot, 0o711);
  }
}

/** The staged job directory of an attempt under the job root (named like the attempt directory). */
export function jobUserStageDir(jobRoot: string, attemptBase: string): string {
  return join(jobRoot, basename(attemptBase));
}

async function chownTree(path: string, uid: number, gid: number, keep: ReadonlySet<string>): Promise<void> {
  // A shared dependency file (a hardlink into the dependency store) stays the executor's, read-only.
  if (keep.has(path)) return;
  // lchown: a link is re-owned itself, never what it points at. The tree was just written by this
  // process and no job process exists yet, so nothing can swap an entry while it is walked.
  await lchown(path, uid, gid);
  const st = await lstat(path);
  if (!st.isDirectory()) return;
  for (const name of await readdir(path)) await chownTree(join(path, name), uid, gid, keep);
}

/**
 * Hands a staged, patched job directory to its job user: every entry below `jobDir` (the staged
 * package, HOME, TMPDIR, caches) is re-owned by uid:gid, except the shared dependency files
 * (package-relative `shared`: hardlinks into the dependency store, which stay the executor's, 0444/0555); `jobDir` itself stays root-owned with
 * mode 0711, so the job can neither rename nor replace the directories the executor checks
 * afterwards, nor list its neighbours.
 */
export async function handStageToJobUser(jobDir: string, user: JobUser, shared: ReadonlySet<string> = new Set()): Promise<void> {
  const keep = new Set([...shared].map((rel) => join(jobDir, "pkg", rel)));
  for (const name of await readdir(jobDir)) await chownTree(join(jobDir, name), user.uid, user.gid, keep);
  await chmod(jobDir, 0o711);
}

/**
 * Before a job user's uid is used again (job users are per slot), every stage still under the
 * job root that holds files of that uid (an UNKNOWN job's retained stage, or one whose removal
 * failed) is closed to it: its top directory becomes root's, mode 0700, so the next job of that
 * uid, perhaps another tenant's, can neither traverse, list, read nor write it. The executor
 * (root) still reads it as evidence. Only this executor's own attempts' stages are considered.
 * Returns the stages closed.
 */
export async function closeRetainedStages(jobRoot: string, uid: number, except: string, attemptsDir: string): Promise<string[]> {
  const closed: string[] = [];
  for (const name of await readdir(jobRoot).catch(() => [] as string[])) {
    // Dot entries (the dependency store) are the executor's own, never a job's stage; and only
    // this executor's own earlier attempts (an attempt directory of the same name in its data
    // directory): a job root shared with another node is never touched.
    const dir = join(jobRoot, name);
    if (name.startsWith(".") || dir === except) continue;
    if (!(await lstat(join(attemptsDir, name)).catch(() => undefined))?.isDirectory()) continue;
    const st = await lstat(dir).catch(() => undefined);
    if (!st?.isDirectory() || (st.mode & 0o777) === 0o700) continue;
    const children = await readdir(dir).catch(() => [] as string[]);
    const owned = await Promise.all(children.map(async (c) => (await lstat(join(dir, c)).catch(() => undefined))?.uid === uid));
    if (!owned.includes(true)) continue;
    await lchown(dir, process.geteuid?.() ?? 0, process.getegid?.() ?? 0);
    await chmod(dir, 0o700);
    closed.push(dir);
  }
  return closed;
}
