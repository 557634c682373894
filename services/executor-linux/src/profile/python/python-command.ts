import { join, posix } from "node:path";
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, isWithin, ProfileError } from "@seraph/profiles";
import {
  checkAddopts,
  checkIniOptions,
  declaredTestCommands,
  isPythonSelection,
  parsePythonSelection,
  parsePyproject,
  PYTEST_CONFIG_NAMES,
  pythonSelectionText,
  pytestConfigOf,
  reduceCommand,
  selectionForm,
  sitePackagesDir,
  VENV_DIR_NAMES,
} from "@seraph/profiles/python3";
import type { InspectionBuilder } from "../inspection-builder.js";
import { sortedEntries } from "../safe-fs.js";
import { readText, type PythonRun } from "./python-run.js";
import { parsePyvenv } from "./site-packages.js";

/** The selection: the words name a form; files are re-checked by the same grammar. Returns the requested test files. */
export function readPythonSelection(b: InspectionBuilder, given: Selection | string, givenTestPaths: readonly string[] | undefined): string[] {
  if (typeof given === "string") {
    try {
      const parsed = parsePythonSelection(given);
      b.selection = parsed.selection;
      return [...parsed.testPaths];
    } catch (err) {
      if (err instanceof ProfileError) b.reasons.push(...err.reasons);
      else throw err;
      return [];
    }
  }
  b.selection = given;
  const requested = [...(givenTestPaths ?? [])];
  if (!isPythonSelection(given)) {
    b.reasons.push(blockReason("selection_unknown", "The selection is not one the Python profile runs (test, python -m unittest FILE…, python -m pytest FILE…).", ""));
  } else if (given === Selection.TEST && requested.length > 0) {
    b.reasons.push(blockReason("selection_unknown", "The declared-command selection (test) takes no test files.", ""));
  } else if (given !== Selection.TEST) {
    const r = reduceCommand(pythonSelectionText(given, requested));
    if (!r.ok) b.reasons.push(r.reason);
  }
  return requested;
}

/** The virtual environment: at most one, at the root, with a pyvenv.cfg made for this interpreter. */
export async function readVenv(run: PythonRun): Promise<void> {
  const { b, reader, majorMinor } = run;
  const venvs = VENV_DIR_NAMES.filter((d) => reader.kind(`${d}/pyvenv.cfg`) === "file");
  if (venvs.length > 1) {
    b.reasons.push(blockReason("python_venv_ambiguous", `The repository has several virtual environments (${venvs.join(", ")}); keep exactly one.`, venvs[0]));
    run.ambiguousVenvs = venvs;
    return;
  }
  if (venvs.length !== 1) return;
  const venvDir = venvs[0] as string;
  run.venvDir = venvDir;
  run.configFiles.add(`${venvDir}/pyvenv.cfg`);
  const cfg = parsePyvenv((await readText(run, `${venvDir}/pyvenv.cfg`)) ?? "");
  if (/^true$/i.test(cfg.get("include-system-site-packages") ?? "false")) {
    b.reasons.push(blockReason("python_venv_system_site_packages", `${venvDir}/pyvenv.cfg includes the system site-packages; only the repository's own environment can be inspected.`, `${venvDir}/pyvenv.cfg`));
  }
  const declared = (cfg.get("version") ?? cfg.get("version_info") ?? "").split(".").slice(0, 2).join(".");
  if (declared !== majorMinor) {
    b.reasons.push(blockReason("python_venv_version_mismatch", `${venvDir} was made for Python ${declared || "(unknown)"}, the interpreter is ${majorMinor}.`, `${venvDir}/pyvenv.cfg`));
  }
  const site = `${venvDir}/${sitePackagesDir(majorMinor)}`;
  if (reader.kind(site) === "directory") run.sitePackages = site;
  else b.reasons.push(blockReason("python_venv_invalid", `${venvDir} has no ${sitePackagesDir(majorMinor)} directory (a real directory, not a link).`, site));
}

/** The command: the selection's form, or (for `test`) the one pyproject.toml declares, reduced by the same grammar. */
export async function readCommand(run: PythonRun): Promise<void> {
  const { b } = run;
  const selection = b.selection;
  run.form = selectionForm(selection);
  run.testPaths = [...run.requestedTestPaths];
  run.scriptName = "selection";
  run.scriptBody = selection === Selection.TEST ? "" : pythonSelectionText(selection, run.testPaths);
  if (selection === Selection.TEST) {
    if (run.reader.kind("pyproject.toml") === "file") run.configFiles.add("pyproject.toml");
    const text = run.reader.kind("pyproject.toml") === "file" ? await readText(run, "pyproject.toml") : undefined;
    let declared: ReturnType<typeof declaredTestCommands> = [];
    let toxInPyproject = false;
    if (text !== undefined) {
      try {
        const pyproject = parsePyproject(text);
        declared = declaredTestCommands(pyproject);
        const tool = pyproject["tool"];
        toxInPyproject = typeof tool === "object" && tool !== null && "tox" in tool;
      } catch (err) {
        b.reasons.push(blockReason("python_config_invalid", `pyproject.toml is not valid TOML (${(err as Error).message.split("\n")[0]}).`, "pyproject.toml"));
      }
    }
    for (const d of declared) if (d.reason) b.reasons.push(d.reason);
    const commands = [...new Set(declared.filter((d) => d.command !== undefined).map((d) => (d.command as string).trim()))];
    if (commands.length > 1) {
      b.reasons.push(blockReason("python_declared_command_ambiguous", `pyproject.toml declares different test commands (${declared.map((d) => d.source).join("; ")}); keep one.`, "pyproject.toml"));
    } else if (commands.length === 1) {
      const r = reduceCommand(commands[0] as string);
      run.scriptName = declared.find((d) => d.command !== undefined)?.source ?? "pyproject.toml";
      run.scriptBody = commands[0] as string;
      if (!r.ok) b.reasons.push(blockReason(r.reason.code as never, `The declared test command "${run.scriptBody}" (${run.scriptName}) is refused: ${r.reason.message}`, r.reason.subject));
      else {
        run.form = r.form;
        run.testPaths = [...r.paths];
      }
    } else if (declared.length === 0) {
      // tox 4 reads its configuration from pyproject.toml's [tool.tox] too (before any setup.py).
      const runner = toxInPyproject ? "pyproject.toml [tool.tox]" : ["tox.ini", "noxfile.py", "Makefile", "setup.py"].find((f) => run.reader.kind(f) === "file");
      b.reasons.push(
        runner === undefined
          ? blockReason("python_declared_command_missing", "The selection is the declared test command, but pyproject.toml declares none (a `test` task of poe, pdm, hatch, taskipy or rye); name the files: python -m unittest FILE… or python -m pytest FILE….", "pyproject.toml")
          : blockReason("python_runner_not_allowed", `The repository's test command lives in ${runner}, a task runner Seraph does not run; name the files: python -m unittest FILE… or python -m pytest FILE….`, runner),
      );
    }
  }
}

/** The test files: exact, inspected, regular files inside the source paths, outside the environment. */
export function checkTestFiles(run: PythonRun): void {
  const { b } = run;
  for (const p of run.testPaths) {
    const k = run.reader.kind(p);
    if (k === "missing") b.reasons.push(blockReason("path_not_found", `The test file ${p} does not exist in the repository (or passes through a link).`, p));
    else if (k === "directory") b.reasons.push(blockReason("python_discovery", `${p} is a directory; the runner would discover tests in it. Name test files exactly.`, p));
    else if (k === "other") b.reasons.push(blockReason("path_not_regular_file", `The test file ${p} is a link or special file.`, p));
    if (run.venvDir !== "" && isWithin(p, run.venvDir)) b.reasons.push(blockReason("python_test_path_outside_sources", `The test file ${p} is inside the virtual environment ${run.venvDir}.`, p));
    if (b.namedSources.length > 0 && !b.namedSources.some((s) => s === "." || isWithin(p, s.replace(/^\.\//, "").replace(/\/+$/, "")))) {
      b.reasons.push(blockReason("python_test_path_outside_sources", `The test file ${p} is not inside the repair's source paths (${b.namedSources.join(", ")}).`, p));
    }
  }
}

/** pytest: configuration, conftest.py chain, and the framework from the inspected environment only. */
export async function readFramework(run: PythonRun): Promise<void> {
  const { b } = run;
  if (run.form === "unittest") {
    run.framework = "unittest";
    run.frameworkVersion = run.pythonVersion;
    return;
  }
  if (run.form === "pytest") {
    run.framework = "pytest";
    // With several environments the ambiguity is the one reason: which one has pytest is moot.
    if (run.sitePackages === "" && run.ambiguousVenvs === undefined) {
      b.reasons.push(blockReason("python_framework_missing", "pytest is admitted only from a virtual environment inside the repository (.venv/, venv/, env/ or .env/ with a pyvenv.cfg); the system's pytest is never used.", "pytest"));
    } else if (run.sitePackages !== "") {
      if (run.reader.kind(`${run.sitePackages}/pytest/__init__.py`) !== "file" || run.reader.kind(`${run.sitePackages}/_pytest`) !== "directory") {
        b.reasons.push(blockReason("python_framework_missing", `${run.sitePackages} has no pytest package (pytest/__init__.py and _pytest/ as regular entries).`, run.sitePackages));
      }
      const dist = (await sortedEntries(join(run.reader.root, run.sitePackages), run.sitePackages)).find((n) => /^pytest-[0-9][^/]*\.dist-info$/.test(n));
      run.frameworkVersion = dist ? dist.slice("pytest-".length, -".dist-info".length) : "";
    }
    // pytest's own search: from the test files' common directory up to the root, first match wins.
    const dirs = run.testPaths.map((p) => posix.dirname(p));
    let common = dirs[0] ?? ".";
    for (const d of dirs) while (!(common === "." || d === common || d.startsWith(`${common}/`))) common = posix.dirname(common);
    search: for (let d = common; ; d = posix.dirname(d)) {
      for (const name of PYTEST_CONFIG_NAMES) {
        const rel = d === "." ? name : `${d}/${name}`;
        if (run.reader.kind(rel) !== "file") continue;
        const text = await readText(run, rel);
        if (text === undefined) continue;
        try {
          const c = pytestConfigOf(rel, text);
          if (c) {
            run.pytestConfig = c;
            run.configFiles.add(rel);
            break search;
          }
        } catch (err) {
          b.reasons.push(blockReason("python_config_invalid", `${rel} cannot be read as pytest configuration (${(err as Error).message.split("\n")[0]}).`, rel));
          break search;
        }
      }
      if (d === ".") break;
    }
    if (run.pytestConfig) {
      const raw = run.pytestConfig.options.get("addopts");
      if (raw !== undefined) {
        const checked = checkAddopts(run.pytestConfig.file, raw);
        b.reasons.push(...checked.reasons);
        run.addopts = checked.tokens;
      }
      b.reasons.push(...checkIniOptions(run.pytestConfig));
    }
    for (const p of run.testPaths) {
      const segs = p.split("/").slice(0, -1);
      for (let n = 0; n <= segs.length; n++) {
        const rel = [...segs.slice(0, n), "conftest.py"].join("/");
        const k = run.reader.kind(rel);
        if (k === "file") run.configFiles.add(rel);
        else if (k !== "missing") b.reasons.push(blockReason("python_conftest_outside", `${rel} is a link or special file; a conftest.py must be a regular file inside the staged tree.`, rel));
      }
    }
  }
}
