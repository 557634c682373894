import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { checkRelativePath } from "../shared/path-rules.js";
import { blockReason, type ReasonCode } from "../shared/reasons.js";

/** The two server-owned Python test forms. */
export type PythonForm = "unittest" | "pytest";

/** The most test files one selection may name. */
export const MAX_TEST_PATHS = 8;

/** A command that reduces exactly to one form over exact test files. */
export interface ReducedCommand {
  readonly ok: true;
  readonly form: PythonForm;
  /** Repository-relative test files, normalised (no leading "./"), in the order given. */
  readonly paths: readonly string[];
}

/** A command refused with one stable reason. */
export interface RefusedCommand {
  readonly ok: false;
  readonly reason: BlockReason;
}

/** Characters a command may contain at all: ASCII letters, digits, space and `. _ / @ + = : , -`. */
const ALLOWED_CHARS = /^[A-Za-z0-9 ._/@+=:,-]*$/;
/** Interpreter command words that name CPython 3. */
const PYTHON_WORDS = new Set(["python", "python3", "python3.11"]);
/** Words that run something else around the tests. */
const WRAPPERS = new Set([
  "sudo", "exec", "time", "nice", "ionice", "timeout", "xvfb-run", "coverage", "poetry", "pipenv", "uv", "uvx", "hatch",
  "pdm", "rye", "conda", "mamba", "pipx", "npx", "npm", "sh", "bash", "dash", "zsh", "nohup", "stdbuf", "strace", "taskset",
]);
const RUNNERS = new Set(["tox", "nox", "make", "invoke", "inv", "doit", "just", "setup.py", "./setup.py", "manage.py", "./manage.py"]);
const PIP = new Set(["pip", "pip3", "pip3.11"]);
const PYTEST_WORDS = new Set(["pytest", "py.test"]);
/** A dotted module name `a.b.test_c`, the other real-world way to name a unittest file. */
const DOTTED = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$/;
/** test_*.py or *_test.py, the file name is an importable module name. */
const TEST_FILE = /^(test_[A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*_test)\.py$/;

function refuse(code: ReasonCode, message: string, subject: string): RefusedCommand {
  return { ok: false, reason: blockReason(code, message, subject) };
}

/** True when `name` is a test file name the profile admits (test_*.py or *_test.py). */
export function isTestFileName(name: string): boolean {
  return TEST_FILE.test(name);
}

/** The words before the test files: the form they name and the tokens after them, or a refusal. */
type Leading = { readonly form: PythonForm; readonly rest: string[] } | RefusedCommand;

/** Shell syntax, globs, non-ASCII and characters outside the grammar: a refusal, or undefined. */
function refuseText(body: string, shown: string): RefusedCommand | undefined {
  if (!/^[\x20-\x7e\t\r\n]*$/.test(body)) return refuse("python_command_non_ascii", `"${shown}" contains characters outside printable ASCII.`, shown);
  if (/[*?[\]{}]/.test(body)) return refuse("python_glob", `"${shown}" contains a glob or brace pattern; name each test file exactly.`, shown);
  if (/[\r\n\t;&|<>$`\\'"~()!#%^]/.test(body)) {
    return refuse("python_shell_syntax", `"${shown}" uses shell syntax (chaining, redirection, expansion, quoting or comments); Seraph runs no shell.`, shown);
  }
  if (!ALLOWED_CHARS.test(body)) return refuse("python_shell_syntax", `"${shown}" contains characters the grammar does not admit.`, shown);
  return undefined;
}

/** The first word: environment prefixes, pip, task runners, wrappers and other programs are refused. */
function leadingWords(tokens: readonly string[], shown: string): Leading {
  const word = tokens[0] as string;
  if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(word) || word === "env") {
    return refuse("python_env_prefix", `"${shown}" sets environment variables; the job environment is fixed by the server.`, word);
  }
  if (PIP.has(word)) return refuse("python_pip_install", `"${shown}" runs pip; nothing is installed at job time.`, word);
  if (RUNNERS.has(word) || word.endsWith("/setup.py")) return refuse("python_runner_not_allowed", `"${shown}" runs ${word}, a task runner; only unittest and pytest over exact files are admitted.`, word);
  if (word === "npm" || word === "npx") {
    // The other profile's form: say which profile admits it rather than only refusing.
    return refuse("python_wrapper_not_allowed", `"${shown}" is an npm selection, which only the repo-node24-npm-v1 profile admits (this one is repo-python3-v1: python -m unittest or python -m pytest over exact test files); choose that profile explicitly: seraph settings set --profile repo-node24-npm-v1, or seraph-exec --profile repo-node24-npm-v1.`, word);
  }
  if (WRAPPERS.has(word)) return refuse("python_wrapper_not_allowed", `"${shown}" wraps the tests in ${word}; the argv is built by the server.`, word);
  if (PYTEST_WORDS.has(word)) return { form: "pytest", rest: tokens.slice(1) };
  if (PYTHON_WORDS.has(word)) return interpreterWords(tokens, shown);
  if (word.startsWith("/") || word.includes("/")) {
    return refuse("python_command_not_allowed", `"${shown}" names the program ${word} by path; the interpreter is the server's pinned CPython.`, word);
  }
  return refuse("python_command_not_allowed", `"${shown}" runs ${word}; only python -m unittest, python -m pytest and pytest over exact test files are admitted.`, word);
}

/** `python -m unittest|pytest …`: anything else after the interpreter is refused with what it is. */
function interpreterWords(tokens: readonly string[], shown: string): Leading {
  const word = tokens[0] as string;
  const next = tokens[1];
  if (next === undefined) return refuse("python_command_not_allowed", `"${shown}" starts an interactive interpreter.`, word);
  if (next === "-c") return refuse("python_inline_code", `"${shown}" runs inline code with -c.`, next);
  if (next === "setup.py" || next.endsWith("/setup.py") || next === "manage.py") return refuse("python_runner_not_allowed", `"${shown}" runs ${next}; only unittest and pytest over exact files are admitted.`, next);
  if (next !== "-m") {
    if (next.startsWith("-")) return refuse("python_interpreter_flag", `"${shown}" passes the interpreter flag ${next}; the interpreter flags are fixed by the server (-E -s -S -B).`, next);
    return refuse("python_script_not_allowed", `"${shown}" runs the file ${next} directly; only -m unittest and -m pytest are admitted.`, next);
  }
  const module = tokens[2];
  if (module === undefined) return refuse("python_module_not_allowed", `"${shown}" names no module after -m.`, "-m");
  if (module === "pip") return refuse("python_pip_install", `"${shown}" runs pip; nothing is installed at job time.`, module);
  if (module === "tox" || module === "nox" || module === "invoke") return refuse("python_runner_not_allowed", `"${shown}" runs ${module}, a task runner.`, module);
  if (module === "coverage" || module === "trace" || module === "cProfile" || module === "pdb") return refuse("python_wrapper_not_allowed", `"${shown}" wraps the tests in ${module}.`, module);
  if (module !== "unittest" && module !== "pytest") return refuse("python_module_not_allowed", `"${shown}" runs the module ${module}; only unittest and pytest are admitted.`, module);
  return { form: module, rest: tokens.slice(3) };
}

/** Output flags: admitted in pytest's addopts, never in the selection (the server fixes the argv's output). */
const OUTPUT_FLAGS = /^(-q+|-v+|--quiet|--verbose)$/;

/** A flag in the selection: each refused with what it does. */
function refuseFlag(token: string, next: string | undefined, shown: string): RefusedCommand {
  if (token === "-p" || token.startsWith("-p") || token.startsWith("--plugin")) {
    const arg = token === "-p" ? (next ?? "") : token.replace(/^-p|^--plugins?=?/, "");
    if (arg.startsWith("no:")) {
      return refuse("python_plugin_not_allowed", `"${shown}" disables the pytest plugin ${arg.slice(3)} with ${token === "-p" ? `-p ${arg}` : token}; plugin options are not admitted in the selection (the server runs pytest with plugin autoloading off and writes no cache into the stage).`, token);
    }
    return refuse("python_plugin_not_allowed", `"${shown}" loads a plugin with ${token}; plugins are not admitted.`, token);
  }
  if (OUTPUT_FLAGS.test(token)) {
    return refuse("python_flag_not_allowed", `"${shown}" passes the output flag ${token}; the selection names test files only (the server sets the output flags the report needs; -q/-v are admitted in pytest's addopts).`, token);
  }
  return refuse("python_flag_not_allowed", `"${shown}" passes ${token}; test selection and runner flags (-k, -x, …) are not admitted, the files are the selection.`, token);
}

/** A dotted unittest name that goes past a test module (`tests.test_x.TestCase[.test_y]`): the module file and what it selects inside it. */
function dottedSelector(token: string): { readonly file: string; readonly inside: string } | undefined {
  const parts = token.split(".");
  for (let n = 1; n < parts.length; n++) {
    if (isTestFileName(`${parts[n - 1]}.py`)) return { file: `${parts.slice(0, n).join("/")}.py`, inside: parts.slice(n).join(".") };
  }
  return undefined;
}

/** One test-file token, normalised, or a refusal. */
function testPath(token: string, next: string | undefined, form: PythonForm, shown: string): { readonly path: string } | RefusedCommand {
  if (token.startsWith("-")) return refuseFlag(token, next, shown);
  if (token.includes("::")) return refuse("python_test_selector", `"${shown}" selects ${token} inside a file; name whole test files.`, token);
  let rel = token;
  if (!token.includes("/") && !token.endsWith(".py") && DOTTED.test(token)) {
    if (form === "pytest") return refuse("python_discovery", `"${shown}" names ${token}, a module, not a file; pytest is given test files.`, token);
    const selector = dottedSelector(token);
    if (selector !== undefined) return refuse("python_test_selector", `"${shown}" selects ${selector.inside} inside ${selector.file}; name whole test files (${selector.file}).`, token);
    rel = `${token.split(".").join("/")}.py`;
  }
  const checked = checkRelativePath(rel, "test path");
  if (!checked.ok) {
    if (checked.reason.code === "script_flag_not_allowed") return refuse("python_flag_not_allowed", checked.reason.message, token);
    if (checked.reason.code === "path_is_directory") return refuse("python_discovery", `"${shown}" names ${token}, a directory the runner would discover tests in; name test files exactly.`, token);
    return { ok: false, reason: checked.reason };
  }
  const name = checked.path.split("/").at(-1) as string;
  if (!name.endsWith(".py")) {
    return refuse("python_discovery", `"${shown}" names ${token}, which is not a .py file (a directory, a package or a module to discover); name test files exactly.`, token);
  }
  if (!isTestFileName(name)) {
    return refuse("python_test_path_name", `${token} is not named test_*.py or *_test.py with a module name of letters, digits and underscores (an importable test module).`, token);
  }
  return { path: checked.path };
}

/**
 * Reduces one Python test command (selection words or a repository's declared command) to a
 * server-owned form, or refuses it with one stable reason. Admitted, and nothing else:
 * `python -m unittest F…`, `python -m pytest F…` and `pytest F…` (also `python3`, `python3.11`,
 * `py.test`), over one to eight exact test files `test_*.py` / `*_test.py` given as
 * repository-relative paths or, for unittest, as dotted module names (`tests.test_x` is
 * `tests/test_x.py`). The words only name the form: the argv is always built by the server.
 */
export function reduceCommand(text: string): ReducedCommand | RefusedCommand {
  const body = text.trim();
  if (body.length === 0) return refuse("python_command_empty", "The test command is empty.", "");
  const shown = body.length > 120 ? `${body.slice(0, 120)}…` : body;
  const bad = refuseText(body, shown);
  if (bad) return bad;
  const leading = leadingWords(body.split(/ +/), shown);
  if ("ok" in leading) return leading;
  const { form, rest } = leading;
  if (form === "unittest" && rest[0] === "discover") return refuse("python_discovery", `"${shown}" discovers tests; name one to eight test files exactly.`, "discover");
  const paths: string[] = [];
  for (const [i, token] of rest.entries()) {
    const p = testPath(token, rest[i + 1], form, shown);
    if ("ok" in p) return p;
    if (paths.includes(p.path)) return refuse("python_test_path_duplicate", `${token} is named twice.`, token);
    paths.push(p.path);
  }
  if (paths.length === 0) return refuse("python_discovery", `"${shown}" names no test file, so the runner would discover tests; name one to eight test files exactly.`, shown);
  if (paths.length > MAX_TEST_PATHS) return refuse("too_many_test_paths", `"${shown}" names ${paths.length} test files; the profile allows ${MAX_TEST_PATHS}.`, shown);
  return { ok: true, form, paths };
}
