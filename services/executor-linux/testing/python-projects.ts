import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { cp, readdir } from "node:fs/promises";
import { join } from "node:path";
import { DEFAULT_PYTHON_PATH } from "../src/profile/python/runtime.js";
import { commitFixture, createFixtureRepo, gitEnv, type FixtureEntry, type FixtureRepo, type FixtureRepoOptions } from "./fixture-repo.js";
import { fixturePatch } from "./projects.js";

/** Thrown when a test needs the Python proof runtime (or Debian's pytest) in CI and it is missing. */
export class PythonRuntimeMissingError extends Error {
  override readonly name = "PythonRuntimeMissingError";
}

/** Where Debian's python3-pytest installs pytest and its dependencies. */
export const DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages";
/** The packages a pytest 7 virtual environment needs, copied from Debian's python3-pytest. */
const PYTEST_PACKAGES = ["_pytest", "pytest", "pluggy", "iniconfig", "packaging", "attr", "attrs", "py.py"] as const;

/**
 * The Python proof runtime (Debian's /usr/bin/python3 → python3.11) for tests, by absolute path,
 * never PATH. With `needPytest`, Debian's python3-pytest must be installed too (its packages are
 * copied into fixture virtual environments). Missing in CI (`CI=true`): throws, so the test fails
 * rather than skips; elsewhere returns undefined and the caller may skip. `pythonPath` and
 * `distPackages` exist for this rule's own test.
 */
export function pythonForTests(options: { needPytest?: boolean; pythonPath?: string; distPackages?: string } = {}, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const python = options.pythonPath ?? DEFAULT_PYTHON_PATH;
  const dist = options.distPackages ?? DEBIAN_DIST_PACKAGES;
  const missing = !existsSync(python)
    ? `${python} is not installed`
    : options.needPytest && !existsSync(join(dist, "pytest", "__init__.py"))
      ? `Debian's python3-pytest is not installed (${dist}/pytest)`
      : undefined;
  if (missing === undefined) return python;
  if (env.CI === "true") throw new PythonRuntimeMissingError(`${missing}; CI must install python3, python3-venv and python3-pytest (.ci/run).`);
  return undefined;
}

/** The module a Python fixture tests; `failing` ships the bug. */
export function pythonAddModule(failing: boolean): string {
  return `def add(a, b):\n    return a ${failing ? "-" : "+"} b\n`;
}

/** The patch that fixes a failing Python fixture's add (calc/ops.py). */
export function fixPythonAddPatch(): string {
  return fixturePatch("calc/ops.py", pythonAddModule(true), pythonAddModule(false));
}

/** Options of createPythonProject. */
export interface PythonProjectOptions extends FixtureRepoOptions {
  readonly failing?: boolean;
  /** Build a virtual environment at .venv with pytest copied from Debian's python3-pytest. */
  readonly venv?: boolean;
  readonly extraFiles?: Readonly<Record<string, FixtureEntry>>;
}

/**
 * A small Python repository: calc/ops.py with add(), tests/test_ops.py (unittest style, which pytest
 * also collects), optionally a .venv made at test time with `python3 -m venv --without-pip` and
 * Debian's pytest copied into its site-packages (no download). Committed as a Git repository.
 */
export async function createPythonProject(options: PythonProjectOptions = {}): Promise<FixtureRepo> {
  const files: Record<string, FixtureEntry> = {
    "calc/__init__.py": "",
    "calc/ops.py": pythonAddModule(options.failing ?? false),
    "tests/__init__.py": "",
    "tests/test_ops.py": [
      "import unittest",
      "",
      "from calc.ops import add",
      "",
      "",
      "class AddTest(unittest.TestCase):",
      "    def test_add(self):",
      "        self.assertEqual(add(2, 3), 5)",
      "",
      "    def test_add_zero(self):",
      "        self.assertEqual(add(0, 0), 0)",
      "",
    ].join("\n"),
    ".gitignore": ".venv/\n__pycache__/\n",
    ...options.extraFiles,
  };
  const repo = await createFixtureRepo(files, { ...options, git: false });
  if (options.venv) await addPytestVenv(repo.dir);
  execFileSync("git", ["-c", "init.defaultBranch=main", "init", "-q"], { cwd: repo.dir, stdio: "ignore", env: gitEnv() });
  commitFixture(repo.dir);
  return repo;
}

/** Creates `<dir>/.venv` with the proof interpreter and copies Debian's pytest packages into its site-packages. */
export async function addPytestVenv(dir: string, python = DEFAULT_PYTHON_PATH): Promise<string> {
  execFileSync(python, ["-m", "venv", "--without-pip", join(dir, ".venv")], { stdio: "ignore", env: { PATH: "/usr/bin:/bin" } });
  const lib = join(dir, ".venv", "lib");
  const [pyDir] = (await readdir(lib)).filter((n) => n.startsWith("python3"));
  const site = join(lib, pyDir as string, "site-packages");
  for (const p of PYTEST_PACKAGES) {
    await cp(join(DEBIAN_DIST_PACKAGES, p), join(site, p), { recursive: true, filter: (src) => !src.includes("__pycache__") });
  }
  const dist = (await readdir(DEBIAN_DIST_PACKAGES)).find((n) => /^pytest-[0-9].*\.dist-info$/.test(n));
  if (dist) await cp(join(DEBIAN_DIST_PACKAGES, dist), join(site, dist), { recursive: true });
  return site;
}
