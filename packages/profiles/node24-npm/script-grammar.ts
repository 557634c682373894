import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { checkRelativePath, isWithin } from "../shared/path-rules.js";
import { blockReason, type ReasonCode } from "../shared/reasons.js";
import { NODE_TEST_REPORTER_FLAGS } from "../results/node-tap.js";

/** What a repository-relative path is in the inspected package (links are never followed). */
export type PathKind = "file" | "directory" | "missing" | "other";

/** What `resolveScript` needs to know about the package and the step. */
export interface ScriptContext {
  /** Which step this script runs as: build scripts and test scripts accept different forms. */
  readonly step: "build" | "test";
  /** Kind of a normalised package-relative path; must not follow symlinks. */
  readonly lookup: (path: string) => PathKind;
  /**
   * The build's declared job-local output directory when a build runs first. A build script may
   * not name paths inside it; a test script's paths inside it are produced by the build and are
   * checked after the build (they are returned in `deferredPaths`).
   */
  readonly outputDir?: string;
}

/** The three accepted script forms. */
export type ScriptForm = "node_test" | "node_entry" | "tsc_project";

/** The package-relative path of the TypeScript compiler entry run by a `tsc` build. */
export const TSC_ENTRY = "node_modules/typescript/bin/tsc";

/** A script accepted by the grammar, with its direct argv relative to the package root. */
export interface ResolvedScript {
  readonly ok: true;
  readonly form: ScriptForm;
  /** The trimmed body with whitespace runs collapsed to single spaces. */
  readonly normalized: string;
  /** Normalised package-relative paths the script names (test files, entrypoint or tsconfig). */
  readonly paths: readonly string[];
  /** Paths inside the build output directory that must exist after the build. */
  readonly deferredPaths: readonly string[];
  /** The tsconfig of a `tsc` build. */
  readonly tsconfig?: string;
  /**
   * `node …` argv relative to the package root; argv[0] is the literal word "node". A `node --test`
   * script's argv carries the fixed reporter flags (NODE_TEST_REPORTER_FLAGS: spec to stdout, TAP
   * to the job-local `../results/node-test.tap`, JUnit to `../results/node-test.xml`) after
   * `--test`: the approval shows them, they run.
   */
  readonly displayArgv: readonly string[];
}

/** A script the grammar refuses, with one stable reason. */
export interface RejectedScript {
  readonly ok: false;
  readonly reason: BlockReason;
}

const PACKAGE_MANAGERS = new Set(["npm", "npx", "pnpm", "pnpx", "yarn", "yarnpkg", "bun", "bunx", "corepack", "deno"]);
const WRAPPERS = new Set([
  "c8", "nyc", "istanbul", "run-s", "run-p", "npm-run-all", "npm-run-all2", "concurrently", "cross-env", "env",
  "dotenv", "dotenv-cli", "env-cmd", "nodemon", "ts-node", "ts-node-dev", "tsx", "esno", "babel-node", "sh", "bash",
  "zsh", "dash", "exec", "eval", "time", "nice", "nohup", "timeout", "xargs", "sudo", "su", "command", "builtin",
  "source", "turbo", "nx", "lerna", "wireit", "zx", "tsc-watch", "start-server-and-test", "wait-on", "rimraf",
  "shx", "husky", "patch-package", "pm2", "forever",
]);
const TEST_RUNNERS = new Set([
  "jest", "vitest", "mocha", "ava", "tap", "tape", "jasmine", "karma", "playwright", "cypress", "uvu", "lab",
  "qunit", "borp", "brittle", "testem", "web-test-runner", "wtr", "bun:test",
]);

const reject = (code: ReasonCode, message: string, subject: string): RejectedScript => ({
  ok: false,
  reason: blockReason(code, message, subject),
});

function flagReason(token: string, command: string): RejectedScript {
  if (/^-(-watch|-watch-path|-watch-preserve-output|-watchAll|w)(=|$)/.test(token) || token === "--serve" || token === "--server") {
    return reject("script_watch_mode", `"${token}" starts a watch or serve mode; only one finite run is allowed.`, token);
  }
  return reject(
    "script_flag_not_allowed",
    `The flag "${token}" is not allowed: ${command} scripts accept no options beyond the profile's fixed forms.`,
    token,
  );
}

/** Scans the raw body for characters the shell would interpret; returns the first problem. */
function scanCharacters(body: string): RejectedScript | undefined {
  for (const ch of body) {
    const code = ch.codePointAt(0) ?? 0;
    if (ch === "\n" || ch === "\r") return reject("script_chaining", "The script spans several lines; a line break runs another command.", "\\n");
    if (code > 0x7e || (code < 0x20 && ch !== "\t")) {
      return reject("script_non_ascii", "The script contains a non-ASCII or control character; only printable ASCII is allowed.", `U+${code.toString(16).padStart(4, "0")}`);
    }
  }
  const chain = /&&|\|\||;|\||&/.exec(body);
  if (chain) return reject("script_chaining", `"${chain[0]}" chains or pipes commands; a script must be exactly one command.`, chain[0]);
  const redirect = /[<>]/.exec(body);
  if (redirect) return reject("script_redirect", `"${redirect[0]}" redirects input or output; redirections are not allowed.`, redirect[0]);
  const expansion = /[$`~]/.exec(body);
  if (expansion) {
    return reject("script_expansion", `"${expansion[0]}" asks the shell to expand something (a variable, a command or a home directory); no expansion is allowed.`, expansion[0]);
  }
  const quote = /['"]/.exec(body);
  if (quote) return reject("script_quote", `The script contains a quote (${quote[0]}); paths must be written plainly, without quotes.`, quote[0]);
  const glob = /[*?[\]{}]/.exec(body);
  if (glob) return reject("script_glob", `"${glob[0]}" is a glob or brace pattern; name each file exactly.`, glob[0]);
  // ":" "," "%" "^" mean nothing to the shell; paths refuse them later.
  const other = /[^A-Za-z0-9._/@+=:,%^\- \t]/.exec(body);
  if (other) return reject("script_shell_metacharacter", `The character "${other[0]}" has a meaning to the shell and is not allowed in a script.`, other[0]);
  return undefined;
}

function checkPath(
  raw: string,
  what: string,
  ctx: ScriptContext,
  extension: { readonly test: (p: string) => boolean; readonly code: ReasonCode; readonly expected: string; readonly example: string },
  deferrable: boolean,
): { ok: true; path: string; deferred: boolean } | RejectedScript {
  const checked = checkRelativePath(raw, what);
  if (!checked.ok && checked.reason.code === "path_is_directory") return rejectDirectory(raw, what, extension);
  if (!checked.ok) return { ok: false, reason: checked.reason };
  const path = checked.path;
  if (ctx.outputDir !== undefined && isWithin(path, ctx.outputDir)) {
    if (!deferrable) {
      return reject("path_in_output_dir", `The ${what} "${raw}" is inside the build output directory "${ctx.outputDir}", which the build itself writes.`, raw);
    }
    if (!extension.test(path)) return reject(extension.code, `The ${what} "${raw}" must end with ${extension.expected}.`, raw);
    return { ok: true, path, deferred: true };
  }
  const kind = ctx.lookup(path);
  if (kind === "directory") return rejectDirectory(raw, what, extension);
  if (!extension.test(path)) return reject(extension.code, `The ${what} "${raw}" must end with ${extension.expected}.`, raw);
  if (kind === "missing") return reject("path_not_found", `The ${what} "${raw}" does not exist in the package.`, raw);
  if (kind === "other") return reject("path_not_regular_file", `The ${what} "${raw}" is a link or special file, not a regular file.`, raw);
  return { ok: true, path, deferred: false };
}

/** A directory where a file belongs ("node --test test/"): the message says what to write instead. */
function rejectDirectory(raw: string, what: string, extension: { readonly expected: string; readonly example: string }): RejectedScript {
  return reject(
    "path_is_directory",
    `The ${what} "${raw}" is a directory; name each file (ending with ${extension.expected}) in the script instead, e.g. "${extension.example}".`,
    raw,
  );
}

const TEST_FILE = { test: (p: string) => /\.test\.(js|mjs)$/.test(p), code: "test_path_extension", expected: ".test.js or .test.mjs", example: "node --test test/a.test.js test/b.test.js" } as const;
const ENTRYPOINT = { test: (p: string) => /\.(js|mjs|cjs)$/.test(p), code: "entrypoint_extension", expected: ".js, .mjs or .cjs", example: "node test/run.js" } as const;
const TSCONFIG = { test: (p: string) => /\.json$/.test(p), code: "tsconfig_extension", expected: ".json", example: "tsc -p tsconfig.json" } as const;

function resolveNode(tokens: readonly string[], normalized: string, ctx: ScriptContext): ResolvedScript | RejectedScript {
  const second = tokens[1];
  if (second === undefined) return reject("script_entrypoint_missing", "\"node\" is given no entrypoint file.", normalized);
  if (second === "--test") {
    if (ctx.step !== "test") return reject("script_form_not_allowed", "\"node --test\" is a test form; a build script must be node <entrypoint> or tsc --project <tsconfig>.", normalized);
    const rawPaths = tokens.slice(2);
    const flag = rawPaths.find((t) => t.startsWith("-"));
    if (flag !== undefined) return flagReason(flag, "node --test");
    if (rawPaths.length === 0) {
      return reject("script_test_paths_missing", "\"node --test\" without paths would search the package for tests; name one to eight exact .test.js/.test.mjs files.", normalized);
    }
    if (rawPaths.length > 8) return reject("too_many_test_paths", `"node --test" names ${rawPaths.length} paths; the profile allows one to eight.`, normalized);
    const paths: string[] = [];
    const deferred: string[] = [];
    for (const raw of rawPaths) {
      const r = checkPath(raw, "test path", ctx, TEST_FILE, true);
      if (!r.ok) return r;
      paths.push(r.path);
      if (r.deferred) deferred.push(r.path);
    }
    return { ok: true, form: "node_test", normalized, paths, deferredPaths: deferred, displayArgv: ["node", "--test", ...NODE_TEST_REPORTER_FLAGS, ...paths] };
  }
  if (second.startsWith("-")) return flagReason(second, "node");
  const extra = tokens.slice(2);
  const extraFlag = extra.find((t) => t.startsWith("-"));
  if (extraFlag !== undefined) return flagReason(extraFlag, "node");
  if (extra.length > 0) return reject("script_too_many_arguments", "\"node <entrypoint>\" takes exactly one file and no arguments.", normalized);
  const what = ctx.step === "test" ? "test entrypoint" : "build entrypoint";
  const r = checkPath(second, what, ctx, ENTRYPOINT, ctx.step === "test");
  if (!r.ok) return r;
  return { ok: true, form: "node_entry", normalized, paths: [r.path], deferredPaths: r.deferred ? [r.path] : [], displayArgv: ["node", r.path] };
}

function resolveTsc(tokens: readonly string[], normalized: string, ctx: ScriptContext): ResolvedScript | RejectedScript {
  if (ctx.step !== "build") return reject("script_form_not_allowed", "\"tsc\" is a build form; a test script must be node --test <files> or node <entrypoint>.", normalized);
  const second = tokens[1];
  if (second === undefined) {
    const kind = ctx.lookup("tsconfig.json");
    if (kind !== "file") return reject("tsc_without_tsconfig", "A bare \"tsc\" needs tsconfig.json at the package root, and there is none.", "tsconfig.json");
    return { ok: true, form: "tsc_project", normalized, paths: ["tsconfig.json"], deferredPaths: [], tsconfig: "tsconfig.json", displayArgv: ["node", TSC_ENTRY, "--project", "tsconfig.json"] };
  }
  if (second !== "--project" && second !== "-p") {
    if (second.startsWith("-")) return flagReason(second, "tsc");
    return reject("script_form_not_allowed", "\"tsc\" accepts only --project <tsconfig.json> (or -p); it may not name source files.", normalized);
  }
  const config = tokens[2];
  if (config === undefined) return reject("tsc_project_missing", `"tsc ${second}" names no tsconfig file.`, normalized);
  if (config.startsWith("-")) return flagReason(config, "tsc");
  const extra = tokens.slice(3);
  const extraFlag = extra.find((t) => t.startsWith("-"));
  if (extraFlag !== undefined) return flagReason(extraFlag, "tsc");
  if (extra.length > 0) return reject("script_too_many_arguments", "\"tsc --project\" takes exactly one tsconfig file and nothing else.", normalized);
  const r = checkPath(config, "tsconfig", ctx, TSCONFIG, false);
  if (!r.ok) return r;
  return { ok: true, form: "tsc_project", normalized, paths: [r.path], deferredPaths: [], tsconfig: r.path, displayArgv: ["node", TSC_ENTRY, "--project", r.path] };
}

/**
 * Resolves one inspected package.json script body against the repo-node24-npm-v1 grammar.
 * The body is trimmed and its whitespace runs collapsed; it must then be exactly
 * `node --test P1 … P8`, `node E`, `tsc --project X.json`, `tsc -p X.json` or bare `tsc`
 * (build only, with tsconfig.json at the package root). Every other form is refused with one
 * stable reason code. Pure apart from `ctx.lookup`.
 */
export function resolveScript(body: string, ctx: ScriptContext): ResolvedScript | RejectedScript {
  const r = resolveBody(body, ctx);
  if (r.ok || !SUGGESTED.has(r.reason.code)) return r;
  // Where an accepted form exists, say which: a person fixes the script instead of guessing.
  r.reason.message = `${r.reason.message} ${acceptedForm(body, ctx)}`;
  return r;
}

/** Refusals whose message ends with the accepted form of the script. */
const SUGGESTED: ReadonlySet<string> = new Set(["script_chaining", "script_package_manager", "script_wrapper_not_allowed", "script_test_runner_not_allowed", "script_command_not_allowed", "script_env_assignment"]);

/**
 * The accepted form closest to `body`: an accepted command inside it (after a wrapper, an
 * environment prefix, or in one part of a chain), the test files it names merged into one
 * `node --test` (test step), else the profile's generic forms for the step.
 */
export function acceptedForm(body: string, ctx: ScriptContext): string {
  const parts = body.split(/&&|\|\||[;|&\n\r]/).map((p) => p.trim()).filter((p) => p !== "");
  const found: ResolvedScript[] = [];
  for (const part of parts) {
    const words = part.split(/[ \t]+/);
    const at = words.findIndex((w) => w === "node" || w === "tsc");
    if (at < 0) continue;
    const r = resolveBody(words.slice(at).join(" "), ctx);
    if (r.ok) found.push(r);
  }
  if (ctx.step === "test") {
    const fromTests = found.filter((f) => f.form === "node_test").flatMap((f) => f.paths);
    const named = body
      .split(/[\s&|;]+/)
      .map((w) => w.replace(/^\.\//, ""))
      .filter((w) => /\.test\.m?js$/.test(w) && checkRelativePath(w, "test path").ok && ctx.lookup(w) === "file");
    const files = [...new Set([...fromTests, ...named])].slice(0, 8);
    if (files.length > 0) return `Accepted instead: "node --test ${files.join(" ")}".`;
    const entry = found.find((f) => f.form === "node_entry");
    if (entry) return `Accepted instead: "${entry.normalized}".`;
    return 'The accepted forms are "node --test <file>.test.js" (one to eight exact files) or "node <entrypoint>.js".';
  }
  const build = found[0];
  if (build) return `Accepted instead: "${build.normalized}".`;
  return `The accepted forms are "node <entrypoint>.js" or "tsc --project tsconfig.json"${ctx.lookup("tsconfig.json") === "file" ? ' (or a bare "tsc": this package has tsconfig.json)' : ""}.`;
}

function resolveBody(body: string, ctx: ScriptContext): ResolvedScript | RejectedScript {
  const trimmed = body.trim();
  if (trimmed.length === 0) return reject("script_empty", "The script is empty.", "");
  const bad = scanCharacters(trimmed);
  if (bad) return bad;
  const normalized = trimmed.replace(/[ \t]+/g, " ");
  const tokens = normalized.split(" ");
  const command = tokens[0] ?? "";
  if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(command) || command.startsWith("=")) {
    return reject("script_env_assignment", `"${command}" sets an environment variable; scripts may not set variables or prefixes.`, command);
  }
  if (command.startsWith("-")) return flagReason(command, "the");
  if (command.includes("/")) {
    const bin = command.includes(".bin/");
    return reject(
      "script_command_not_allowed",
      bin
        ? `"${command}" runs a node_modules/.bin alias; aliases are never executed.`
        : `"${command}" runs a file directly; scripts must start with node or tsc.`,
      command,
    );
  }
  if (PACKAGE_MANAGERS.has(command)) {
    return reject("script_package_manager", `"${command}" runs a package manager; Seraph never runs npm, npx or other package managers from a script.`, command);
  }
  if (WRAPPERS.has(command)) {
    return reject("script_wrapper_not_allowed", `"${command}" wraps another command; wrappers (coverage, runners, env setters, shells) are not allowed.`, command);
  }
  if (TEST_RUNNERS.has(command)) {
    return reject("script_test_runner_not_allowed", `"${command}" is a third-party test runner; the profile runs only node --test or node <entrypoint>.`, command);
  }
  if (command === "node") return resolveNode(tokens, normalized, ctx);
  if (command === "tsc") return resolveTsc(tokens, normalized, ctx);
  return reject("script_command_not_allowed", `"${command}" is not an allowed command; scripts must start with node (or tsc for a build).`, command);
}
