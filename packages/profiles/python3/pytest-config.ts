import { posix } from "node:path";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { parse as parseToml } from "smol-toml";
import { blockReason } from "../shared/reasons.js";

/** The configuration files pytest 7 looks for in each directory, in its order. */
export const PYTEST_CONFIG_NAMES = ["pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"] as const;

/** Python configuration files that are execution inputs (identities, immutable patch targets). */
export const PYTHON_CONFIG_NAMES: ReadonlySet<string> = new Set([...PYTEST_CONFIG_NAMES, "conftest.py", "pyvenv.cfg", "setup.py", "noxfile.py", "Makefile", "makefile", "GNUmakefile"]);

/** One ini-style file as pytest's iniconfig reads it: sections of name → value (continuations joined by "\n"). */
export type IniSections = ReadonlyMap<string, ReadonlyMap<string, string>>;

/** A pytest option value from a config: an ini string, or a TOML string or array of strings. */
export type PytestValue = string | readonly string[];

/** The pytest configuration pytest would read from one file, or undefined when the file holds none. */
export interface PytestConfig {
  /** Repository-relative path of the file. */
  readonly file: string;
  /** The options of its pytest section/table. */
  readonly options: ReadonlyMap<string, PytestValue>;
}

/**
 * Parses ini text the way iniconfig (pytest's parser) does: `[section]` headers, `name = value`
 * or `name: value`, lines starting with whitespace continue the previous value (joined with
 * "\n"), whole-line comments start with `#` or `;`. Throws Error with the line on anything else.
 */
export function parseIni(text: string): IniSections {
  const sections = new Map<string, Map<string, string>>();
  let section: Map<string, string> | undefined;
  let last: string | undefined;
  const lines = text.split(/\r?\n/);
  for (const [i, line] of lines.entries()) {
    const stripped = line.trim();
    if (stripped === "" || stripped.startsWith("#") || stripped.startsWith(";")) continue;
    if (/^\s/.test(line)) {
      if (!section || last === undefined) throw new Error(`line ${i + 1}: a continuation line outside a value`);
      section.set(last, `${section.get(last) ?? ""}\n${stripped}`.replace(/^\n/, ""));
      continue;
    }
    const header = /^\[([^\]]+)\]\s*$/.exec(stripped);
    if (header) {
      const name = header[1] as string;
      if (sections.has(name)) throw new Error(`line ${i + 1}: duplicate section [${name}]`);
      section = new Map();
      sections.set(name, section);
      last = undefined;
      continue;
    }
    const eq = stripped.search(/[=:]/);
    if (eq <= 0 || !section) throw new Error(`line ${i + 1}: not a section, option or comment`);
    last = stripped.slice(0, eq).trim();
    section.set(last, stripped.slice(eq + 1).trim());
  }
  return sections;
}

/** Parses pyproject.toml text into a plain object (smol-toml); throws Error on invalid TOML. */
export function parsePyproject(text: string): Record<string, unknown> {
  return parseToml(text) as Record<string, unknown>;
}

function table(value: unknown, ...path: string[]): unknown {
  let v = value;
  for (const p of path) {
    if (typeof v !== "object" || v === null || Array.isArray(v)) return undefined;
    v = (v as Record<string, unknown>)[p];
  }
  return v;
}

/**
 * The pytest configuration a file holds, as pytest 7 decides: `pytest.ini` always (even without a
 * [pytest] section), `.pytest.ini`/`tox.ini` with a [pytest] section, `setup.cfg` with
 * [tool:pytest], `pyproject.toml` with [tool.pytest.ini_options]. Undefined when it holds none;
 * throws Error when the file cannot be parsed.
 */
export function pytestConfigOf(file: string, text: string): PytestConfig | undefined {
  const name = posix.basename(file);
  if (name === "pyproject.toml") {
    const options = table(parsePyproject(text), "tool", "pytest", "ini_options");
    if (options === undefined) return undefined;
    if (typeof options !== "object" || options === null || Array.isArray(options)) throw new Error("[tool.pytest.ini_options] is not a table");
    const out = new Map<string, PytestValue>();
    for (const [k, v] of Object.entries(options as Record<string, unknown>)) {
      if (typeof v === "string") out.set(k, v);
      else if (Array.isArray(v) && v.every((x) => typeof x === "string")) out.set(k, v as string[]);
      else out.set(k, String(v));
    }
    return { file, options: out };
  }
  const sections = parseIni(text);
  const section = name === "setup.cfg" ? sections.get("tool:pytest") : sections.get("pytest");
  if (section === undefined) return name === "pytest.ini" ? { file, options: new Map() } : undefined;
  return { file, options: new Map(section) };
}

/** Flags pytest's `addopts` may carry: output-only, they change neither what runs nor where it writes. */
const ADDOPTS_EXACT = new Set([
  "-q", "-qq", "--quiet", "-v", "-vv", "-vvv", "--verbose", "-l", "--showlocals", "--no-header", "--no-summary",
  "--strict-markers", "--strict-config", "--strict", "--disable-warnings", "--disable-pytest-warnings",
]);
const ADDOPTS_PATTERNS = [
  /^-r[fEsxXpPaAN]+$/,
  /^--tb=(auto|long|short|line|native|no)$/,
  /^--color=(yes|no|auto)$/,
  /^--code-highlight=(yes|no)$/,
  /^--durations=[0-9]{1,4}$/,
  /^--durations-min=[0-9]{1,4}(\.[0-9]{1,3})?$/,
  /^--import-mode=(prepend|append|importlib)$/,
];

/** The tokens of an addopts value: ini text is split on whitespace; quoting is refused, not interpreted. */
export function addoptsTokens(value: PytestValue): string[] {
  const parts = typeof value === "string" ? [value] : value;
  return parts.flatMap((p) => p.split(/\s+/)).filter((t) => t.length > 0);
}

/**
 * Checks pytest's `addopts` from a config file. Admitted tokens are output-only flags
 * (`-q`, `-v`, `-ra`, `--tb=short`, `--strict-markers`, `--import-mode=importlib`, …); they are
 * bound into the server-built argv, and the file's own addopts is overridden (`-o addopts=`), so
 * the approved argv is everything pytest is told. Anything else is refused: `-p` plugins
 * (`python_plugin_not_allowed`), paths (`python_discovery`), every other flag or quoting
 * (`python_addopts_not_allowed`); the first refused token is reported.
 */
export function checkAddopts(file: string, value: PytestValue): { readonly tokens: readonly string[]; readonly reasons: readonly BlockReason[] } {
  const tokens = addoptsTokens(value);
  const reasons: BlockReason[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i] as string;
    if (ADDOPTS_EXACT.has(t) || ADDOPTS_PATTERNS.some((re) => re.test(t))) continue;
    if (t === "-p" || t.startsWith("-p") || t.startsWith("--plugin")) {
      const name = t === "-p" ? (tokens[++i] ?? "") : t;
      reasons.push(blockReason("python_plugin_not_allowed", `${file} addopts loads or disables a plugin with ${t === "-p" ? `-p ${name}` : t}; plugins are not admitted.`, file));
    } else if (!t.startsWith("-")) {
      reasons.push(blockReason("python_discovery", `${file} addopts names ${t}, a path or argument the runner would collect or read; only output flags are admitted in addopts.`, file));
    } else {
      reasons.push(blockReason("python_addopts_not_allowed", `${file} addopts passes ${t}, which is not one of the admitted output flags (-q, -v, -r…, --tb=…, --strict-markers, --import-mode=…).`, file));
    }
    // One precise reason: what follows a refused token may be its value, not a token of its own.
    break;
  }
  return { tokens: reasons.length === 0 ? tokens : [], reasons };
}

/**
 * Checks the other options of the pytest configuration: `pythonpath` entries must stay inside
 * the repository (they are added to sys.path), and `log_file` is refused (pytest would write a
 * file). Everything else changes reporting or collection of the named files only.
 */
export function checkIniOptions(config: PytestConfig): BlockReason[] {
  const reasons: BlockReason[] = [];
  const dir = posix.dirname(config.file);
  for (const [key, value] of config.options) {
    if (key === "log_file") {
      reasons.push(blockReason("python_ini_option_not_allowed", `${config.file} sets log_file; pytest would write a log file, which a job may not do outside its directories.`, config.file));
    } else if (key === "pythonpath") {
      for (const entry of addoptsTokens(value)) {
        const joined = posix.normalize(posix.join(dir, entry));
        if (posix.isAbsolute(entry) || joined === ".." || joined.startsWith("../")) {
          reasons.push(blockReason("python_ini_option_not_allowed", `${config.file} puts ${entry} on sys.path (pythonpath), outside the repository.`, config.file));
        }
      }
    }
  }
  return reasons;
}

/** Where a pyproject.toml may declare its test command (a task named `test`), in this order. */
export const DECLARED_TEST_TABLES: readonly (readonly string[])[] = [
  ["tool", "poe", "tasks"],
  ["tool", "pdm", "scripts"],
  ["tool", "hatch", "envs", "default", "scripts"],
  ["tool", "taskipy", "tasks"],
  ["tool", "rye", "scripts"],
];

/** One declared test command found in pyproject.toml, as text, or the reason it is not a command. */
export interface DeclaredCommand {
  readonly source: string;
  readonly command?: string;
  readonly reason?: BlockReason;
}

/**
 * The test commands a parsed pyproject.toml declares: a `test` task in Poe the Poet, PDM, Hatch
 * (default environment), taskipy or Rye tables, as a string, `{cmd = "…"}`, or a one-element
 * array. A shell task (`{shell = …}`), a sequence of tasks or anything else is refused
 * (`python_shell_syntax`/`python_runner_not_allowed`): only a single command can reduce to a form.
 */
export function declaredTestCommands(pyproject: Record<string, unknown>): DeclaredCommand[] {
  const out: DeclaredCommand[] = [];
  for (const path of DECLARED_TEST_TABLES) {
    const v = table(pyproject, ...path, "test");
    if (v === undefined) continue;
    const source = `pyproject.toml [${path.join(".")}] test`;
    const isTable = typeof v === "object" && v !== null && !Array.isArray(v);
    const cmd = isTable ? (v as Record<string, unknown>).cmd : v;
    if (isTable && "shell" in (v as object)) {
      out.push({ source, reason: blockReason("python_shell_syntax", `${source} is a shell task; Seraph runs no shell.`, "pyproject.toml") });
    } else if (typeof cmd === "string") {
      out.push({ source, command: cmd });
    } else if (Array.isArray(cmd) && cmd.length === 1 && typeof cmd[0] === "string") {
      out.push({ source, command: cmd[0] });
    } else if (isTable && Array.isArray(cmd) && cmd.every((x) => typeof x === "string")) {
      // `{cmd = ["pytest", "tests/test_a.py"]}` (PDM, Poe) is one argv; a bare array is a sequence (refused below).
      out.push({ source, command: (cmd as string[]).join(" ") });
    } else {
      out.push({ source, reason: blockReason("python_runner_not_allowed", `${source} is not a single command (a sequence or reference of tasks); only one command can reduce to a test form.`, "pyproject.toml") });
    }
  }
  return out;
}
