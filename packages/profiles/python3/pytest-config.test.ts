import { describe, expect, it } from "vitest";
import { classifyPth } from "./pth.js";
import { checkAddopts, checkIniOptions, declaredTestCommands, parseIni, parsePyproject, pytestConfigOf } from "./pytest-config.js";

describe("pytest configuration", () => {
  it("reads ini files as iniconfig does, continuation lines included", () => {
    const ini = parseIni("# comment\n[pytest]\naddopts = -q\n  --strict-markers\nmarkers: slow\n; another\n");
    expect(ini.get("pytest")?.get("addopts")).toBe("-q\n--strict-markers");
    expect(ini.get("pytest")?.get("markers")).toBe("slow");
    expect(() => parseIni("addopts = -q\n")).toThrow(/line 1/);
  });

  it("finds pytest's section per file the way pytest 7 does", () => {
    expect(pytestConfigOf("pytest.ini", "")?.options.size).toBe(0);
    expect(pytestConfigOf("tox.ini", "[testenv]\ncommands = pytest\n")).toBeUndefined();
    expect(pytestConfigOf("tox.ini", "[pytest]\naddopts = -q\n")?.options.get("addopts")).toBe("-q");
    expect(pytestConfigOf("setup.cfg", "[tool:pytest]\naddopts = -ra\n")?.options.get("addopts")).toBe("-ra");
    expect(pytestConfigOf("pyproject.toml", '[project]\nname = "x"\n')).toBeUndefined();
    expect(pytestConfigOf("pyproject.toml", '[tool.pytest.ini_options]\naddopts = ["-q", "-ra"]\n')?.options.get("addopts")).toEqual(["-q", "-ra"]);
    expect(() => pytestConfigOf("pyproject.toml", "[tool.pytest.ini_options\n")).toThrow();
  });

  it("binds output-only addopts and refuses everything else with one reason", () => {
    expect(checkAddopts("pytest.ini", "-q -ra --tb=short --strict-markers --import-mode=importlib")).toEqual({ tokens: ["-q", "-ra", "--tb=short", "--strict-markers", "--import-mode=importlib"], reasons: [] });
    const refused = (v: string | string[]) => checkAddopts("pytest.ini", v).reasons.map((r) => r.code);
    expect(refused("-p xdist")).toEqual(["python_plugin_not_allowed"]);
    expect(refused("-p no:cacheprovider")).toEqual(["python_plugin_not_allowed"]);
    expect(refused(["-q", "--cov=pkg"])).toEqual(["python_addopts_not_allowed"]);
    expect(refused("-x")).toEqual(["python_addopts_not_allowed"]);
    expect(refused("--doctest-modules")).toEqual(["python_addopts_not_allowed"]);
    expect(refused("--basetemp=/tmp/x")).toEqual(["python_addopts_not_allowed"]);
    expect(refused("tests")).toEqual(["python_discovery"]);
    expect(checkAddopts("pytest.ini", "-q -k x").tokens).toEqual([]);
  });

  it("refuses pythonpath outside the repository and log_file", () => {
    const reasons = (text: string) => checkIniOptions(pytestConfigOf("pytest.ini", text)!).map((r) => r.code);
    expect(reasons("[pytest]\npythonpath = src lib\n")).toEqual([]);
    expect(reasons("[pytest]\npythonpath = ../shared\n")).toEqual(["python_ini_option_not_allowed"]);
    expect(reasons("[pytest]\npythonpath = /opt/x\n")).toEqual(["python_ini_option_not_allowed"]);
    expect(reasons("[pytest]\nlog_file = out.log\n")).toEqual(["python_ini_option_not_allowed"]);
  });

  it("finds declared test commands and refuses shells and sequences", () => {
    const found = (toml: string) => declaredTestCommands(parsePyproject(toml)).map((d) => d.command ?? d.reason?.code);
    expect(found('[tool.poe.tasks]\ntest = "pytest tests/test_a.py"\n')).toEqual(["pytest tests/test_a.py"]);
    expect(found('[tool.poe.tasks.test]\ncmd = "pytest tests/test_a.py"\n')).toEqual(["pytest tests/test_a.py"]);
    expect(found('[tool.pdm.scripts.test]\ncmd = ["pytest", "tests/test_a.py"]\n')).toEqual(["pytest tests/test_a.py"]);
    expect(found('[tool.poe.tasks.test]\nshell = "pytest && echo"\n')).toEqual(["python_shell_syntax"]);
    expect(found('[tool.hatch.envs.default.scripts]\ntest = ["pytest a/test_a.py", "pytest b/test_b.py"]\n')).toEqual(["python_runner_not_allowed"]);
    expect(found('[tool.poe.tasks]\ntest = ["lint", "unit"]\n')).toEqual(["python_runner_not_allowed"]);
    expect(found('[project]\nname = "x"\n')).toEqual([]);
  });
});

describe(".pth files", () => {
  it("classifies lines as CPython 3.11's site.addpackage does", () => {
    expect(classifyPth("# comment\n\nimport os; os.system('x')\nimport\tsys\n../src\n/abs/path  \n")).toEqual({
      code: ["import os; os.system('x')", "import\tsys"],
      paths: ["../src", "/abs/path"],
    });
    // "importlib" at the start of a line is a path to site, not code: only "import " or "import\t" runs.
    expect(classifyPth("importlib_stuff\n")).toEqual({ code: [], paths: ["importlib_stuff"] });
  });
});
