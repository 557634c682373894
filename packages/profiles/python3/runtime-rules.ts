/** The proof runtime's version: Debian 12's CPython as installed (`/usr/bin/python3` → python3.11). A proof input, not a claim about the latest. */
export const PINNED_PYTHON_VERSION = "3.11.2";

/** Directories at the repository root that may hold its virtual environment (the one with a pyvenv.cfg). */
export const VENV_DIR_NAMES = [".venv", "venv", "env", ".env"] as const;

/** A virtual environment's site-packages for CPython `major.minor`, relative to the environment. */
export function sitePackagesDir(majorMinor: string): string {
  return `lib/python${majorMinor}/site-packages`;
}

/**
 * Top-level names that, in the repository root (which is first on sys.path), would shadow the test
 * framework the step imports: a `pytest.py` or `unittest/` there would run instead of the inspected one.
 */
export const PYTHON_SHADOWED_NAMES = ["unittest", "pytest", "_pytest", "pluggy", "iniconfig", "runpy"] as const;
