import { NODE_TEST_REPORTER_FLAGS } from "../results/node-tap.js";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { resolveScript, type PathKind, type ScriptContext } from "./script-grammar.js";

const FILES = new Set([
  "test/a.test.js",
  "test/b.test.mjs",
  "test/c.test.cjs",
  "test/app.js",
  "test/index.js",
  "scripts/build.mjs",
  "build.cjs",
  "tsconfig.json",
  "tsconfig.build.json",
  "config/tsconfig.json",
  "test/helper.js",
  "tsconfig.txt",
]);
const DIRS = new Set(["test", "src", "dist", "config", "scripts"]);

const lookup = (p: string): PathKind => (FILES.has(p) ? "file" : DIRS.has(p) ? "directory" : p === "test/link.test.js" ? "other" : "missing");
const testCtx: ScriptContext = { step: "test", lookup };
const buildCtx: ScriptContext = { step: "build", lookup };

describe("resolveScript: accepted forms", () => {
  it.each([
    // The fixed reporter flags are part of the argv the approval shows: spec to stdout, TAP to the job-local report.
    ["node --test test/a.test.js", ["node", "--test", "--test-reporter=spec", "--test-reporter-destination=stdout", "--test-reporter=tap", "--test-reporter-destination=../results/node-test.tap", "--test-reporter=junit", "--test-reporter-destination=../results/node-test.xml", "test/a.test.js"]],
    ["  node   --test\ttest/a.test.js   test/b.test.mjs ", ["node", "--test", "--test-reporter=spec", "--test-reporter-destination=stdout", "--test-reporter=tap", "--test-reporter-destination=../results/node-test.tap", "--test-reporter=junit", "--test-reporter-destination=../results/node-test.xml", "test/a.test.js", "test/b.test.mjs"]],
    ["node --test ./test/a.test.js", ["node", "--test", "--test-reporter=spec", "--test-reporter-destination=stdout", "--test-reporter=tap", "--test-reporter-destination=../results/node-test.tap", "--test-reporter=junit", "--test-reporter-destination=../results/node-test.xml", "test/a.test.js"]],
    ["node test/app.js", ["node", "test/app.js"]],
    ["node ./test/c.test.cjs", ["node", "test/c.test.cjs"]],
  ])("test %j", (body, argv) => {
    const r = resolveScript(body, testCtx);
    expect(r.ok && r.displayArgv).toEqual(argv);
  });

  it.each([
    ["node scripts/build.mjs", ["node", "scripts/build.mjs"]],
    ["node build.cjs", ["node", "build.cjs"]],
    ["tsc --project tsconfig.json", ["node", "node_modules/typescript/bin/tsc", "--project", "tsconfig.json"]],
    ["tsc -p ./tsconfig.build.json", ["node", "node_modules/typescript/bin/tsc", "--project", "tsconfig.build.json"]],
    ["tsc -p config/tsconfig.json", ["node", "node_modules/typescript/bin/tsc", "--project", "config/tsconfig.json"]],
    ["tsc", ["node", "node_modules/typescript/bin/tsc", "--project", "tsconfig.json"]],
  ])("build %j", (body, argv) => {
    const r = resolveScript(body, buildCtx);
    expect(r.ok && r.displayArgv).toEqual(argv);
  });

  it("normalises the body and lists eight paths at most", () => {
    const eight = Array.from({ length: 8 }, () => "test/a.test.js").join(" ");
    const r = resolveScript(`node --test ${eight}`, testCtx);
    expect(r.ok && r.paths.length).toBe(8);
    expect(r.ok && r.normalized).toBe(`node --test ${eight}`);
  });

  it("defers test paths inside the build output directory to after the build", () => {
    const r = resolveScript("node --test dist/test/a.test.js test/a.test.js", { step: "test", lookup, outputDir: "dist" });
    expect(r.ok && r.deferredPaths).toEqual(["dist/test/a.test.js"]);
    const b = resolveScript("node dist/build.js", { step: "build", lookup, outputDir: "dist" });
    expect(!b.ok && b.reason.code).toBe("path_in_output_dir");
  });

  it("bare tsc needs tsconfig.json at the package root", () => {
    const r = resolveScript("tsc", { step: "build", lookup: () => "missing" });
    expect(!r.ok && r.reason.code).toBe("tsc_without_tsconfig");
  });
});

describe("resolveScript: a directory where files belong", () => {
  it.each([
    ["node --test test/", "test", "name each file (ending with .test.js or .test.mjs) in the script instead, e.g. \"node --test test/a.test.js test/b.test.js\""],
    ["node --test test", "test", "name each file (ending with .test.js or .test.mjs) in the script instead"],
    ["tsc -p src", "build", "e.g. \"tsc -p tsconfig.json\""],
  ] as const)("%j says which files to name instead", (body, step, next) => {
    const r = resolveScript(body, { step, lookup });
    expect(!r.ok && r.reason.code).toBe("path_is_directory");
    expect(!r.ok && r.reason.message).toContain(" is a directory; ");
    expect(!r.ok && r.reason.message).toContain(next);
  });
});

describe("resolveScript: real-world forms are rejected with a stable reason", () => {
  const table: [string, "test" | "build", string][] = [
    ["", "test", "script_empty"],
    ["node --test test/*.test.js", "test", "script_glob"],
    ["node --test 'test/**/*.test.js'", "test", "script_quote"],
    ["node --test test/{a,b}.test.js", "test", "script_glob"],
    ["node --test test/a?.test.js", "test", "script_glob"],
    ["NODE_ENV=test node --test test/a.test.js", "test", "script_env_assignment"],
    ["FORCE_COLOR=0 node test/app.js", "test", "script_env_assignment"],
    ["cross-env NODE_ENV=test node test/app.js", "test", "script_wrapper_not_allowed"],
    ["env node test/app.js", "test", "script_wrapper_not_allowed"],
    ["tsc && node --test test/a.test.js", "test", "script_chaining"],
    ["node --test test/a.test.js; echo done", "test", "script_chaining"],
    ["node --test test/a.test.js | tee out.txt", "test", "script_chaining"],
    ["node --test test/a.test.js || true", "test", "script_chaining"],
    ["node test/app.js &", "test", "script_chaining"],
    ["node --test test/a.test.js\nnode test/app.js", "test", "script_chaining"],
    ["node --test test/a.test.js > out.txt", "test", "script_redirect"],
    ["node test/app.js 2>/dev/null", "test", "script_redirect"],
    ["node test/app.js < input.txt", "test", "script_redirect"],
    ["node --watch test/app.js", "test", "script_watch_mode"],
    ["node --test --watch test/a.test.js", "test", "script_watch_mode"],
    ["tsc --watch", "build", "script_watch_mode"],
    ["tsc -w -p tsconfig.json", "build", "script_watch_mode"],
    ["tsc -p tsconfig.json --watch", "build", "script_watch_mode"],
    ["tsc -p ./", "build", "path_is_directory"],
    ["tsc -p .", "build", "path_is_directory"],
    ["tsc -p src", "build", "path_is_directory"],
    ["tsc -p tsconfig.txt", "build", "tsconfig_extension"],
    ["tsc -p missing.json", "build", "path_not_found"],
    ["tsc -p", "build", "tsc_project_missing"],
    ["tsc --build", "build", "script_flag_not_allowed"],
    ["tsc -b tsconfig.json", "build", "script_flag_not_allowed"],
    ["tsc --noEmit", "build", "script_flag_not_allowed"],
    ["tsc -p tsconfig.json --outDir out", "build", "script_flag_not_allowed"],
    ["tsc src/index.ts", "build", "script_form_not_allowed"],
    ["tsc -p tsconfig.json", "test", "script_form_not_allowed"],
    ["node test", "test", "path_is_directory"],
    ["node test/app", "test", "entrypoint_extension"],
    ["node test/app.ts", "test", "entrypoint_extension"],
    ["node --test test", "test", "path_is_directory"],
    ["node --test test/", "test", "path_is_directory"],
    ["node --test test/app.js", "test", "test_path_extension"],
    ["node --test test/a.spec.js", "test", "test_path_extension"],
    ["node --test test/missing.test.js", "test", "path_not_found"],
    ["node --test test/link.test.js", "test", "path_not_regular_file"],
    ["node --test", "test", "script_test_paths_missing"],
    ["node --test test/a.test.js test/a.test.js test/a.test.js test/a.test.js test/a.test.js test/a.test.js test/a.test.js test/a.test.js test/a.test.js", "test", "too_many_test_paths"],
    ["node --test test/a.test.js", "build", "script_form_not_allowed"],
    ["node", "test", "script_entrypoint_missing"],
    ["node test/app.js --port 3000", "test", "script_flag_not_allowed"],
    ["node test/app.js extra", "test", "script_too_many_arguments"],
    ["node -r ts-node/register test/app.js", "test", "script_flag_not_allowed"],
    ["node --import tsx test/app.js", "test", "script_flag_not_allowed"],
    ["node -e process.exit(0)", "test", "script_shell_metacharacter"],
    ["node --test --test-reporter=spec test/a.test.js", "test", "script_flag_not_allowed"],
    ["node --experimental-test-coverage --test test/a.test.js", "test", "script_flag_not_allowed"],
    ["node --test ../other/a.test.js", "test", "path_traversal"],
    ["node --test test/../../x.test.js", "test", "path_traversal"],
    ["node /etc/passwd.js", "test", "path_absolute"],
    ["node --test /tmp/a.test.js", "test", "path_absolute"],
    ["node --test test/-x.test.js", "test", "path_invalid"],
    ["node --test test//a.test.js", "test", "path_invalid"],
    ["node --test test/a=b.test.js", "test", "path_invalid"],
    ["node node_modules/x/cli.js", "test", "path_in_node_modules"],
    ["node --test test/$FILE.test.js", "test", "script_expansion"],
    ["node --test $(ls test)", "test", "script_expansion"],
    ["node --test `ls test`", "test", "script_expansion"],
    ["node ~/app.js", "test", "script_expansion"],
    ["node --test \"test/a.test.js\"", "test", "script_quote"],
    ["node test\\app.js", "test", "script_shell_metacharacter"],
    ["(node test/app.js)", "test", "script_shell_metacharacter"],
    ["node test/app.js # comment", "test", "script_shell_metacharacter"],
    ["node --test test/ä.test.js", "test", "script_non_ascii"],
    ["npm run test:unit", "test", "script_package_manager"],
    ["node --test test/a:b.test.js", "test", "path_invalid"],
    ["npm run lint", "test", "script_package_manager"],
    ["npm test", "test", "script_package_manager"],
    ["npx vitest run", "test", "script_package_manager"],
    ["npx tsc -p tsconfig.json", "build", "script_package_manager"],
    ["yarn test", "test", "script_package_manager"],
    ["pnpm -r test", "test", "script_package_manager"],
    ["run-s build test", "test", "script_wrapper_not_allowed"],
    ["npm-run-all build test", "test", "script_wrapper_not_allowed"],
    ["c8 node --test test/a.test.js", "test", "script_wrapper_not_allowed"],
    ["nyc mocha", "test", "script_wrapper_not_allowed"],
    ["ts-node test/app.ts", "test", "script_wrapper_not_allowed"],
    ["tsx test/app.ts", "test", "script_wrapper_not_allowed"],
    ["sh -c test", "test", "script_wrapper_not_allowed"],
    ["bash scripts/test.sh", "test", "script_wrapper_not_allowed"],
    ["jest", "test", "script_test_runner_not_allowed"],
    ["jest --coverage", "test", "script_test_runner_not_allowed"],
    ["vitest run", "test", "script_test_runner_not_allowed"],
    ["mocha", "test", "script_test_runner_not_allowed"],
    ["mocha test/a.test.js", "test", "script_test_runner_not_allowed"],
    ["ava", "test", "script_test_runner_not_allowed"],
    ["tape test/a.test.js", "test", "script_test_runner_not_allowed"],
    ["./node_modules/.bin/tsc -p tsconfig.json", "build", "script_command_not_allowed"],
    ["node_modules/.bin/mocha", "test", "script_command_not_allowed"],
    ["./scripts/test.sh", "test", "script_command_not_allowed"],
    ["webpack --mode production", "build", "script_command_not_allowed"],
    ["echo \"Error: no test specified\" && exit 1", "test", "script_chaining"],
    ["exit 0", "test", "script_command_not_allowed"],
    ["-node test/app.js", "test", "script_flag_not_allowed"],
  ];
  it.each(table)("%j (%s) → %s", (body, step, code) => {
    const r = resolveScript(body, { step, lookup });
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.reason.code).toBe(code);
      expect(r.reason.message.length).toBeGreaterThan(10);
    }
  });
});

const SAFE_PATH = /^[A-Za-z0-9._@+-]+(\/[A-Za-z0-9._@+-]+)*$/;
const KEYWORDS = new Set(["node", "--test", "--project", "node_modules/typescript/bin/tsc", ...NODE_TEST_REPORTER_FLAGS]);

/** The invariant: an admitted script is one of the fixed forms over safe, exact, relative paths. */
function assertSafe(body: string, step: "test" | "build", ctx: ScriptContext): void {
  const r = resolveScript(body, ctx);
  if (!r.ok) {
    expect(r.reason.code).toMatch(/^[a-z][a-z_]+$/);
    return;
  }
  expect(r.normalized).not.toMatch(/[;&|<>$`'"*?[\]{}()\\#!~\n\r]/);
  expect(r.normalized).not.toMatch(/[^\x20-\x7e]/);
  expect(["node", "tsc"]).toContain(r.normalized.split(" ")[0]);
  expect(r.displayArgv[0]).toBe("node");
  for (const token of r.displayArgv) {
    if (KEYWORDS.has(token)) continue;
    expect(token).toMatch(SAFE_PATH);
    expect(token.split("/")).not.toContain("..");
    expect(token.split("/")).not.toContain("node_modules");
    expect(token.startsWith("-")).toBe(false);
    expect(token.includes("=")).toBe(false);
  }
  if (r.form === "node_test") {
    expect(step).toBe("test");
    expect(r.paths.length).toBeGreaterThanOrEqual(1);
    expect(r.paths.length).toBeLessThanOrEqual(8);
    for (const p of r.paths) expect(p).toMatch(/\.test\.(js|mjs)$/);
  } else if (r.form === "node_entry") {
    expect(r.paths).toHaveLength(1);
    expect(r.paths[0]).toMatch(/\.(js|mjs|cjs)$/);
  } else {
    expect(step).toBe("build");
    expect(r.tsconfig).toMatch(/\.json$/);
  }
  for (const p of r.paths) if (!r.deferredPaths.includes(p)) expect(ctx.lookup(p)).toBe("file");
}

describe("resolveScript: grammar fuzzing never admits an unsafe token", () => {
  const fragments = [
    "node", "tsc", "--test", "--project", "-p", "--watch", "-w", "-r", "--import", "npm", "npx", "run", "c8", "jest",
    "test/a.test.js", "./test/a.test.js", "test/b.test.mjs", "test/app.js", "tsconfig.json", "../a.test.js", "/a.test.js",
    "test", "dist/x.test.js", "a.test.js", "FOO=1", "x=y", "&&", "||", ";", "|", "&", ">", "<", "$X", "$(ls)", "`ls`",
    "'", "\"", "*", "?", "[a]", "{a,b}", "~", "\\", "(", ")", "#", "!", "..", ".", "./", "//", "node_modules/x.js",
    " ", "  ", "\t", "\n", "\r", "\u00e4", "\u0000", "-", "--", "=", ":", "%", "^", ",", "@", "+",
  ];
  const token = fc.oneof(fc.constantFrom(...fragments), fc.string({ maxLength: 6 }));
  const body = fc.array(token, { maxLength: 12 }).map((parts) => parts.join(""));
  const spaced = fc.array(token, { maxLength: 12 }).map((parts) => parts.join(" "));
  // Lookup that says "file" for everything that is not obviously a directory: the grammar alone
  // must keep paths safe, not the file system.
  const permissive: (p: string) => PathKind = (p) => (p === "test" || p.endsWith("/") ? "directory" : "file");

  it.each(["test", "build"] as const)("joined fragments (%s)", (step) => {
    fc.assert(fc.property(body, (b) => assertSafe(b, step, { step, lookup: permissive })), { numRuns: 3000 });
  });
  it.each(["test", "build"] as const)("space-separated fragments (%s)", (step) => {
    fc.assert(fc.property(spaced, (b) => assertSafe(b, step, { step, lookup: permissive, outputDir: "dist" })), { numRuns: 3000 });
  });
  it("arbitrary unicode and binary strings", () => {
    fc.assert(fc.property(fc.string({ unit: "binary", maxLength: 80 }), (b) => assertSafe(b, "test", { step: "test", lookup: permissive })), { numRuns: 3000 });
    fc.assert(fc.property(fc.string({ unit: "grapheme-ascii", maxLength: 80 }), (b) => assertSafe(b, "build", { step: "build", lookup: permissive })), { numRuns: 3000 });
  });
  it("admitted forms built from safe parts round-trip exactly", () => {
    const seg = fc.stringMatching(/^[A-Za-z0-9_][A-Za-z0-9._@+-]{0,8}$/).filter((s) => s !== "node_modules" && s !== ".git");
    const testPath = fc.tuple(fc.array(seg, { maxLength: 3 }), seg, fc.constantFrom(".test.js", ".test.mjs")).map(([dirs, name, ext]) => [...dirs, `${name}${ext}`].join("/"));
    fc.assert(
      fc.property(fc.array(testPath, { minLength: 1, maxLength: 8 }), (paths) => {
        const r = resolveScript(`node --test ${paths.join(" ")}`, { step: "test", lookup: () => "file" });
        expect(r.ok && r.displayArgv).toEqual(["node", "--test", ...NODE_TEST_REPORTER_FLAGS, ...paths]);
      }),
      { numRuns: 500 },
    );
  });
});

describe("refusals suggest the accepted form", () => {
  const files = new Set(["test/a.test.js", "test/b.test.js", "src/build.mjs", "tsconfig.json"]);
  const ctx = (step: "build" | "test") => ({ step, lookup: (p: string) => (files.has(p) ? ("file" as const) : ("missing" as const)) });
  it.each([
    ["npm run lint && npm run test:unit", "test", "script_chaining", 'The accepted forms are "node --test <file>.test.js" (one to eight exact files) or "node <entrypoint>.js".'],
    ["node --test test/a.test.js && node --test test/b.test.js", "test", "script_chaining", 'Accepted instead: "node --test test/a.test.js test/b.test.js".'],
    ["c8 node --test test/a.test.js", "test", "script_wrapper_not_allowed", 'Accepted instead: "node --test test/a.test.js".'],
    ["cross-env NODE_ENV=test node --test ./test/b.test.js", "test", "script_wrapper_not_allowed", 'Accepted instead: "node --test test/b.test.js".'],
    ["mocha test/a.test.js test/b.test.js", "test", "script_test_runner_not_allowed", 'Accepted instead: "node --test test/a.test.js test/b.test.js".'],
    ["jest", "test", "script_test_runner_not_allowed", 'The accepted forms are "node --test <file>.test.js" (one to eight exact files) or "node <entrypoint>.js".'],
    ["npm run compile", "build", "script_package_manager", 'The accepted forms are "node <entrypoint>.js" or "tsc --project tsconfig.json" (or a bare "tsc": this package has tsconfig.json).'],
    ["rimraf dist && tsc -p tsconfig.json", "build", "script_chaining", 'Accepted instead: "tsc -p tsconfig.json".'],
    ["NODE_ENV=production node src/build.mjs", "build", "script_env_assignment", 'Accepted instead: "node src/build.mjs".'],
  ] as const)("%s (%s) → %s ends with the accepted form", (body, step, code, suggestion) => {
    const r = resolveScript(body, ctx(step));
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.reason.code).toBe(code);
    expect(r.reason.message.endsWith(` ${suggestion}`), r.reason.message).toBe(true);
  });

  it("suggests nothing it would refuse: a named test file that does not exist is left out", () => {
    const r = resolveScript("jest test/missing.test.js", ctx("test"));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason.message).toContain('The accepted forms are "node --test <file>.test.js"');
  });
});
