import type { PythonForm } from "./command.js";
import { PYTEST_REPORT_FLAGS, UNITTEST_REPORT_FLAGS } from "../results/python.js";

/** The interpreter flags of every Python step: ignore PYTHON* variables, no user site, no `site` (so no dist-packages, no .pth processing), no bytecode written. */
export const INTERPRETER_FLAGS = ["-E", "-s", "-S", "-B"] as const;

/**
 * The fixed bootstrap run with `-c` when a step needs more than the staged root on sys.path. Its
 * arguments are `<module> <root> [<site-packages> <.pth path>…] --`, then the runner's own. It makes
 * every path absolute (cwd is the staged root), puts the root first and appends site-packages and
 * the admitted `.pth` directories after the standard library — the order a virtual environment's
 * own interpreter would use — and, for pytest, refuses to run (exit 70) unless the imported
 * pytest package lies inside the inspected site-packages.
 */
export const BOOTSTRAP = [
  "import os,sys",
  "m=sys.argv[1];i=sys.argv.index('--');p=[os.path.realpath(x) for x in sys.argv[2:i]];del sys.argv[1:i+1]",
  "sys.path[:1]=p[:1];sys.path.extend(p[1:])",
  "if m=='pytest':",
  " import pytest;o=os.path.realpath(pytest.__file__)",
  " if len(p)<2 or not o.startswith(p[1]+os.sep):sys.stderr.write('seraph: pytest was imported from %s, not from the inspected site-packages\\n'%o);sys.exit(70)",
  " sys.argv[0]='pytest';sys.exit(pytest.console_main())",
  "import runpy;sys.argv[0]='python -m unittest';runpy.run_module('unittest',run_name='__main__',alter_sys=True)",
].join("\n");

/** Everything a step's argv is built from; every path is relative to the staged root (the cwd). */
export interface PythonStepInput {
  readonly form: PythonForm;
  readonly testPaths: readonly string[];
  /** Repository-relative site-packages of the inspected virtual environment, or "". */
  readonly sitePackages: string;
  /** Directories admitted `.pth` files add, repository-relative, in site's order. */
  readonly pthPaths: readonly string[];
  /** The pytest configuration file pytest must read (repository-relative), or "" for none. */
  readonly pytestConfig: string;
  /** pytest's rootdir, repository-relative ("." for the root). */
  readonly rootdir: string;
  /** Admitted addopts from the configuration, bound into the argv. */
  readonly addopts: readonly string[];
}

/**
 * The display argv of a Python step, relative to the staged root and starting with the word
 * `python` (the absolute pinned interpreter replaces it when run):
 * - unittest without a virtual environment: `python -E -s -S -B -m unittest -v F…`;
 * - otherwise the fixed BOOTSTRAP: `python -E -s -S -B -c <BOOTSTRAP> <module> . [site [pth…]] --`
 *   then, for unittest, `-v F…`, and for pytest
 *   `-c <config or /dev/null> --rootdir=<dir> --confcutdir=<dir> -o cache_dir=<job tmp/> -o addopts=
 *   --junitxml=../results/pytest-junit.xml -o junit_family=xunit2 <addopts…> F…`.
 * The report flags (`-v`; `--junitxml`) are what per-test results are parsed from
 * (@seraph/profiles/results); they are shown in the approval like every other argument.
 * pytest is always told its configuration file (so it never searches above the staged root),
 * conftest.py files are only collected from the rootdir down (pytest's default by hand), the
 * cache lives in the job's tmp/ (no .pytest_cache in the staged tree) and the file's addopts is
 * replaced by the admitted, displayed ones.
 */
export function pythonDisplayArgv(s: PythonStepInput): string[] {
  if (s.form === "unittest" && s.sitePackages === "") return ["python", ...INTERPRETER_FLAGS, "-m", "unittest", ...UNITTEST_REPORT_FLAGS, ...s.testPaths];
  const head = ["python", ...INTERPRETER_FLAGS, "-c", BOOTSTRAP, s.form, ".", ...(s.sitePackages === "" ? [] : [s.sitePackages, ...s.pthPaths]), "--"];
  if (s.form === "unittest") return [...head, ...UNITTEST_REPORT_FLAGS, ...s.testPaths];
  return [
    ...head,
    "-c",
    s.pytestConfig === "" ? "/dev/null" : s.pytestConfig,
    `--rootdir=${s.rootdir}`,
    // pytest's own default when run by hand: the configuration file's directory, else the rootdir.
    `--confcutdir=${s.rootdir}`,
    "-o",
    `cache_dir=${pytestCacheDir(s.rootdir)}`,
    "-o",
    "addopts=",
    ...PYTEST_REPORT_FLAGS,
    ...s.addopts,
    ...s.testPaths,
  ];
}

/**
 * pytest's cache directory for a step: the job directory's `tmp/pytest-cache`, beside the staged
 * root, written relative to the rootdir as pytest resolves `cache_dir` (so `../tmp/pytest-cache`
 * for the root, one more `../` per directory below it). The cache plugin stays loaded, as in a run
 * by hand (tests that use the `cache` fixture work), and nothing is written into the staged tree.
 */
export function pytestCacheDir(rootdir: string): string {
  const depth = rootdir === "." ? 0 : rootdir.split("/").length;
  return `${"../".repeat(depth + 1)}tmp/pytest-cache`;
}

/** The argv run: the absolute real interpreter, then the display argv's arguments (cwd = the staged root). */
export function pythonArgv(display: readonly string[], interpreter: string): string[] {
  return [interpreter, ...display.slice(1)];
}
