import { join } from "node:path";

/** The fixed PATH of every job: system directories only, never the host's PATH. */
export const JOB_PATH = "/usr/bin:/bin";

/** The job-local directories buildJobEnv points into (created by staging, 0700). */
export function jobDirs(jobDir: string): { home: string; tmp: string; npmCache: string; cache: string; config: string; results: string } {
  return {
    // A test step's per-test report (e.g. node --test's TAP), beside the staged package.
    results: join(jobDir, "results"),
    home: join(jobDir, "home"),
    tmp: join(jobDir, "tmp"),
    npmCache: join(jobDir, "npm-cache"),
    cache: join(jobDir, "home", ".cache"),
    config: join(jobDir, "home", ".config"),
  };
}

/**
 * The complete environment of every staged command. Nothing is inherited from the host: no
 * NODE_OPTIONS / NODE_PATH / npm_config_*, no credentials or provider keys, no host PATH or HOME.
 *
 * - HOME, TMPDIR: job-local, so tools that write caches or temp files stay in the job directory
 *   (node's compile cache goes under TMPDIR).
 * - XDG_CACHE_HOME, XDG_CONFIG_HOME: job-local, so no user-level configuration is read.
 * - npm_config_cache: job-local, though npm is never run; npm_config_userconfig and
 *   npm_config_globalconfig point at job-local paths that do not exist, so even a stray npm
 *   would read no project-external configuration.
 * - PATH: "/usr/bin:/bin" (fixed). Seraph resolves every argv[0] to an absolute path itself; PATH
 *   only matters to a script that spawns a program by name.
 * - LANG=C.UTF-8, TZ=UTC: deterministic locale and time zone.
 * - NO_COLOR=1: plain captured output.
 */
export function buildJobEnv(jobDir: string): Record<string, string> {
  const d = jobDirs(jobDir);
  return {
    HOME: d.home,
    TMPDIR: d.tmp,
    XDG_CACHE_HOME: d.cache,
    XDG_CONFIG_HOME: d.config,
    npm_config_cache: d.npmCache,
    npm_config_userconfig: join(d.home, ".npmrc"),
    npm_config_globalconfig: join(d.home, ".npmrc-global"),
    PATH: JOB_PATH,
    LANG: "C.UTF-8",
    TZ: "UTC",
    NO_COLOR: "1",
  };
}

/**
 * The complete environment of a repo-python3-v1 step: the same job-local HOME/TMPDIR/XDG
 * directories, fixed PATH, locale and time zone as every job; PYTHONDONTWRITEBYTECODE=1, the one
 * PYTHON* variable, for interpreters the tests start themselves (the step's own interpreter runs
 * with -E and -B, so no variable reaches it; one started as `sys.executable` without -B would
 * otherwise write `__pycache__` into the staged copy); and PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 so
 * pytest loads no entry-point plugin (inspection also refuses site-packages that declare one).
 */
export function buildPythonJobEnv(jobDir: string): Record<string, string> {
  const d = jobDirs(jobDir);
  return {
    HOME: d.home,
    TMPDIR: d.tmp,
    XDG_CACHE_HOME: d.cache,
    XDG_CONFIG_HOME: d.config,
    PATH: JOB_PATH,
    LANG: "C.UTF-8",
    TZ: "UTC",
    NO_COLOR: "1",
    PYTHONDONTWRITEBYTECODE: "1",
    PYTEST_DISABLE_PLUGIN_AUTOLOAD: "1",
  };
}
