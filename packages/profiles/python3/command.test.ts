import fc from "fast-check";
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { describe, expect, it } from "vitest";
import { SelectionError } from "../shared/errors.js";
import { BOOTSTRAP, pythonDisplayArgv } from "./argv.js";
import { reduceCommand } from "./command.js";
import { parsePythonSelection, pythonSelectionText } from "./selection.js";

const code = (text: string): string => {
  const r = reduceCommand(text);
  return r.ok ? "ok" : r.reason.code;
};

describe("reduceCommand: the Python test command grammar", () => {
  it("admits exactly the two forms over exact test files", () => {
    expect(reduceCommand("python -m unittest tests/test_a.py")).toEqual({ ok: true, form: "unittest", paths: ["tests/test_a.py"] });
    expect(reduceCommand("python3 -m pytest ./tests/test_a.py tests/b_test.py")).toEqual({ ok: true, form: "pytest", paths: ["tests/test_a.py", "tests/b_test.py"] });
    expect(reduceCommand("pytest test_top.py")).toEqual({ ok: true, form: "pytest", paths: ["test_top.py"] });
    expect(reduceCommand("python -m unittest tests.test_a pkg.sub.test_b")).toEqual({ ok: true, form: "unittest", paths: ["tests/test_a.py", "pkg/sub/test_b.py"] });
  });

  it("says what a refused flag or dotted name is: a disabled plugin, an output flag, a class inside a test file (issue 26 item 9)", () => {
    const message = (text: string): string => {
      const r = reduceCommand(text);
      return r.ok ? "ok" : r.reason.message;
    };
    expect(message("pytest -p no:cacheprovider tests/test_a.py")).toMatch(/disables the pytest plugin cacheprovider/);
    expect(message("pytest -p xdist tests/test_a.py")).toMatch(/loads a plugin with -p/);
    expect(message("pytest -q tests/test_a.py")).toMatch(/output flag -q; .*admitted in pytest's addopts/);
    expect(message("python -m unittest -v tests/test_a.py")).toMatch(/output flag -v/);
    expect(code("python -m unittest tests.test_a.AddTest")).toBe("python_test_selector");
    expect(message("python -m unittest tests.test_a.AddTest.test_one")).toMatch(/selects AddTest.test_one inside tests\/test_a.py; name whole test files/);
    expect(reduceCommand("python -m unittest tests.test_a")).toEqual({ ok: true, form: "unittest", paths: ["tests/test_a.py"] });
  });

  it.each([
    ["python -m unittest", "python_discovery"],
    ["python -m unittest discover -s tests", "python_discovery"],
    ["pytest", "python_discovery"],
    ["pytest tests", "python_discovery"],
    ["pytest tests/", "python_discovery"],
    ["pytest tests.test_a", "python_discovery"],
    ["pytest tests/*.py", "python_glob"],
    ["pytest tests/test_{a,b}.py", "python_glob"],
    ["pytest -k fast tests/test_a.py", "python_flag_not_allowed"],
    ["pytest -x tests/test_a.py", "python_flag_not_allowed"],
    ["pytest --maxfail=1 tests/test_a.py", "python_flag_not_allowed"],
    ["pytest -p xdist tests/test_a.py", "python_plugin_not_allowed"],
    ["pytest -pno:cacheprovider tests/test_a.py", "python_plugin_not_allowed"],
    ["pytest tests/test_a.py::test_one", "python_test_selector"],
    ["python -m unittest tests/helpers.py", "python_test_path_name"],
    // python-semver's tests/test_max-min.py: pytest's glob would take it, but it is no module name.
    ["pytest tests/test_max-min.py", "python_test_path_name"],
    ["python -m unittest tests/test_a.py tests/test_a.py", "python_test_path_duplicate"],
    ["python -m unittest ../outside/test_a.py", "path_traversal"],
    ["python -m unittest /abs/test_a.py", "path_absolute"],
    ["pytest node_modules/test_a.py", "path_in_node_modules"],
    [`pytest ${Array.from({ length: 9 }, (_, i) => `t/test_${i}.py`).join(" ")}`, "too_many_test_paths"],
    ["PYTHONPATH=src pytest tests/test_a.py", "python_env_prefix"],
    ["env pytest tests/test_a.py", "python_env_prefix"],
    ["pytest tests/test_a.py && echo ok", "python_shell_syntax"],
    ["pytest tests/test_a.py > out.txt", "python_shell_syntax"],
    ["pytest $(cat list)", "python_shell_syntax"],
    ["pytest 'tests/test_a.py'", "python_shell_syntax"],
    ["pip install -e .", "python_pip_install"],
    ["python -m pip install pytest", "python_pip_install"],
    ["tox -e py311", "python_runner_not_allowed"],
    ["nox -s tests", "python_runner_not_allowed"],
    ["make test", "python_runner_not_allowed"],
    ["python setup.py test", "python_runner_not_allowed"],
    ["python -m tox", "python_runner_not_allowed"],
    ["coverage run -m pytest tests/test_a.py", "python_wrapper_not_allowed"],
    ["python -m coverage run -m pytest", "python_wrapper_not_allowed"],
    ["poetry run pytest tests/test_a.py", "python_wrapper_not_allowed"],
    ["uv run pytest tests/test_a.py", "python_wrapper_not_allowed"],
    ["sudo pytest tests/test_a.py", "python_wrapper_not_allowed"],
    ["python -I -m unittest tests/test_a.py", "python_interpreter_flag"],
    ["python -c import_os", "python_inline_code"],
    ["python tests/test_a.py", "python_script_not_allowed"],
    ["python -m http.server", "python_module_not_allowed"],
    ["/usr/bin/python3 -m pytest tests/test_a.py", "python_command_not_allowed"],
    ["nosetests tests/test_a.py", "python_command_not_allowed"],
    ["", "python_command_empty"],
    ["pytest tésts/test_a.py", "python_command_non_ascii"],
  ])("%s → %s", (text, expected) => {
    expect(code(text)).toBe(expected);
  });

  /** Tokens a fuzzed command is built from: valid words, every refused family, and raw noise. */
  const token = fc.oneof(
    fc.constantFrom("python", "python3", "-m", "unittest", "pytest", "py.test", "tests/test_a.py", "test_b.py", "pkg/c_test.py", "tests.test_d", "discover"),
    fc.constantFrom("-k", "-x", "-p", "no:cacheprovider", "--lf", "-c", "..", "../x/test_e.py", "/etc/passwd", "tests/", "tests", "*.py", "::t", "A=1", "env", "pip", "tox", "make", "sh", "-I", "setup.py"),
    fc.string({ minLength: 1, maxLength: 6 }),
  );
  /** A repository-relative path that cannot leave the tree, be read as a flag, or be expanded by anything. */
  const SAFE_PATH = {
    asymmetricMatch: (p: unknown): boolean =>
      typeof p === "string" && /^[A-Za-z0-9._@+/-]+\.py$/.test(p) && p.split("/").every((seg) => seg !== "" && seg !== "." && seg !== ".." && !seg.startsWith("-")),
  };

  it("fuzz: nothing outside the grammar is ever admitted", () => {
    fc.assert(
      fc.property(fc.array(token, { minLength: 1, maxLength: 12 }), fc.constantFrom(" ", "\n", "  ", "\t"), (tokens, sep) => {
        const text = tokens.join(sep);
        const r = reduceCommand(text);
        if (!r.ok) {
          expect(r.reason.code).toMatch(/^[a-z_]+$/);
          return;
        }
        // Admitted: the whole text is one of the forms, token by token, and every path is safe.
        const words = text.trim().split(/ +/);
        expect(sep === "\t" || sep === "\n").toBe(false);
        expect(r.paths.length).toBeGreaterThanOrEqual(1);
        expect(r.paths.length).toBeLessThanOrEqual(8);
        const head = words[0] === "pytest" || words[0] === "py.test" ? 1 : 3;
        expect(words.slice(0, head).every((w) => ["python", "python3", "python3.11", "-m", "unittest", "pytest", "py.test"].includes(w))).toBe(true);
        for (const w of words.slice(head)) expect(w.startsWith("-")).toBe(false);
        for (const p of r.paths) {
          expect(p).toEqual(SAFE_PATH);
          expect(p.split("/").pop()).toMatch(/^(test_\w*|\w+_test)\.py$/);
          expect(p.split("/")).not.toContain("node_modules");
        }
      }),
      { numRuns: 3000 },
    );
  });

  it("fuzz: arbitrary printable text never yields a flag, a shell character or an escaping path", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 80 }), (text) => {
        const r = reduceCommand(`pytest ${text}`);
        if (!r.ok) return;
        for (const p of r.paths) {
          expect(p).toEqual(SAFE_PATH);
          expect(p).not.toMatch(/[\s;&|<>$`\\'"*?[\]{}~()]/);
        }
      }),
      { numRuns: 3000 },
    );
  });
});

describe("parsePythonSelection: the selection words", () => {
  it("names the declared command with `test` and the two forms with their files", () => {
    expect(parsePythonSelection("test")).toEqual({ selection: Selection.TEST, testPaths: [] });
    expect(parsePythonSelection("python\n-m\nunittest\ntests/test_a.py")).toEqual({ selection: Selection.PYTHON_UNITTEST, testPaths: ["tests/test_a.py"] });
    expect(pythonSelectionText(Selection.PYTHON_PYTEST, ["a/test_x.py"])).toBe("python -m pytest a/test_x.py");
    expect(() => parsePythonSelection("")).toThrow(SelectionError);
    expect(() => parsePythonSelection("npm test")).toThrow(/python_wrapper_not_allowed/);
  });
});

describe("pythonDisplayArgv: the server-built argv", () => {
  it("runs unittest without a virtual environment with -m, and everything else through the fixed bootstrap", () => {
    const base = { testPaths: ["tests/test_a.py"], sitePackages: "", pthPaths: [], pytestConfig: "", rootdir: ".", addopts: [] };
    expect(pythonDisplayArgv({ ...base, form: "unittest" })).toEqual(["python", "-E", "-s", "-S", "-B", "-m", "unittest", "-v", "tests/test_a.py"]);
    const site = ".venv/lib/python3.11/site-packages";
    expect(pythonDisplayArgv({ ...base, form: "pytest", sitePackages: site, addopts: ["-q"] })).toEqual([
      "python", "-E", "-s", "-S", "-B", "-c", BOOTSTRAP, "pytest", ".", site, "--",
      "-c", "/dev/null", "--rootdir=.", "--confcutdir=.", "-o", "cache_dir=../tmp/pytest-cache", "-o", "addopts=",
      "--junitxml=../results/pytest-junit.xml", "-o", "junit_family=xunit2", "-q", "tests/test_a.py",
    ]);
    // pytest resolves cache_dir from the rootdir: one more ../ per directory the rootdir is below the staged root.
    expect(pythonDisplayArgv({ ...base, form: "pytest", sitePackages: site, pytestConfig: "src/pkg/pytest.ini", rootdir: "src/pkg" })).toEqual(
      expect.arrayContaining(["-c", "src/pkg/pytest.ini", "--rootdir=src/pkg", "cache_dir=../../../tmp/pytest-cache"]),
    );
  });
});
