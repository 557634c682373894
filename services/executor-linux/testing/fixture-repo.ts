import { execFileSync } from "node:child_process";
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

/** One fixture entry: file text, or a link, or a file with an explicit mode. */
export type FixtureEntry = string | { readonly link: string } | { readonly text: string; readonly mode: number };

/** A fixture repository on disk; `cleanup` removes it. */
export interface FixtureRepo {
  readonly dir: string;
  readonly cleanup: () => Promise<void>;
}

/** Options of createFixtureRepo. */
export interface FixtureRepoOptions {
  /** Make it a real Git repository (git init + one commit), so `.git` exists. Default true. */
  readonly git?: boolean;
  /** Parent directory; default os.tmpdir(). */
  readonly parent?: string;
}

/** A fixed, host-independent environment for fixture Git commands (no user or system config). */
export function gitEnv(): Record<string, string> {
  return {
    PATH: "/usr/bin:/bin",
    HOME: "/nonexistent",
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_AUTHOR_NAME: "Seraph Fixture",
    GIT_AUTHOR_EMAIL: "fixture@seraph.invalid",
    GIT_COMMITTER_NAME: "Seraph Fixture",
    GIT_COMMITTER_EMAIL: "fixture@seraph.invalid",
    GIT_AUTHOR_DATE: "2026-01-01T00:00:00Z",
    GIT_COMMITTER_DATE: "2026-01-01T00:00:00Z",
  };
}

/** Writes fixture entries under `dir` (parents created; links written as given). */
export async function writeFixtureFiles(dir: string, files: Readonly<Record<string, FixtureEntry>>): Promise<void> {
  for (const [rel, entry] of Object.entries(files)) {
    const abs = join(dir, rel);
    await mkdir(dirname(abs), { recursive: true });
    if (typeof entry === "string") {
      await writeFile(abs, entry);
    } else if ("link" in entry) {
      await symlink(entry.link, abs);
    } else {
      await writeFile(abs, entry.text);
      await chmod(abs, entry.mode);
    }
  }
}

/** Commits everything in a fixture repository (git add -A inside the fixture, never elsewhere). */
export function commitFixture(dir: string, message = "fixture"): void {
  const env = gitEnv();
  execFileSync("git", ["add", "-A"], { cwd: dir, env, stdio: "ignore" });
  execFileSync("git", ["commit", "-q", "--allow-empty", "-m", message], { cwd: dir, env, stdio: "ignore" });
}

/** Creates a fixture repository in a fresh temp directory from `files`; by default a real Git repo. */
export async function createFixtureRepo(files: Readonly<Record<string, FixtureEntry>>, options: FixtureRepoOptions = {}): Promise<FixtureRepo> {
  const dir = await mkdtemp(join(options.parent ?? tmpdir(), "seraph-fixture-"));
  await writeFixtureFiles(dir, files);
  if (options.git ?? true) {
    execFileSync("git", ["-c", "init.defaultBranch=main", "init", "-q"], { cwd: dir, env: gitEnv(), stdio: "ignore" });
    commitFixture(dir);
  }
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}
