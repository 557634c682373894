import { execFileSync } from "node:child_process";
import { cp } from "node:fs/promises";
import { join } from "node:path";
import { createTwoFilesPatch } from "diff";
import { typescriptForTests } from "./runtime-fixture.js";
import { commitFixture, createFixtureRepo, gitEnv, type FixtureEntry, type FixtureRepo, type FixtureRepoOptions } from "./fixture-repo.js";

/** Options shared by the project fixtures. */
export interface ProjectFixtureOptions extends FixtureRepoOptions {
  /** Ship the bug the fixing patch repairs (the test then fails). */
  readonly failing?: boolean;
  /** Replace or add package.json scripts. */
  readonly scripts?: Readonly<Record<string, string>>;
  /** Extra files (or links) written before the commit. */
  readonly extraFiles?: Readonly<Record<string, FixtureEntry>>;
  /** Extra package-lock.json "packages" entries. */
  readonly lockPackages?: Readonly<Record<string, unknown>>;
  /** Package name (default per fixture). */
  readonly name?: string;
}

/** The correct and the buggy body of the fixtures' `add` function. */
export const ADD_CORRECT = "  return a + b;";
/** The bug a failing fixture ships. */
export const ADD_BUGGY = "  return a - b;";

/** An npm v3 lockfile for a package with the given installed packages. */
export function lockfileText(name: string, packages: Readonly<Record<string, unknown>> = {}, devDependencies: Readonly<Record<string, string>> = {}): string {
  const root: Record<string, unknown> = { name, version: "1.0.0" };
  if (Object.keys(devDependencies).length > 0) root.devDependencies = devDependencies;
  return `${JSON.stringify({ name, version: "1.0.0", lockfileVersion: 3, requires: true, packages: { "": root, ...packages } }, null, 2)}\n`;
}

function packageJson(name: string, scripts: Readonly<Record<string, string>>, extra: Record<string, unknown> = {}): string {
  return `${JSON.stringify({ name, version: "1.0.0", private: true, type: "module", scripts, ...extra }, null, 2)}\n`;
}

/**
 * A JavaScript project tested with `node --test test/math.test.js` (plus a `pretest` hook that
 * must never run: it would write `hook-ran` into the repository). With `failing`, `add` subtracts.
 */
export async function createJsTestProject(options: ProjectFixtureOptions = {}): Promise<FixtureRepo> {
  const name = options.name ?? "fixture-js";
  const scripts = { test: "node --test test/math.test.js", pretest: "node -e \"require('fs').writeFileSync('hook-ran','')\"", ...options.scripts };
  return createFixtureRepo(
    {
      ".gitignore": "node_modules\ndist\n",
      "package.json": packageJson(name, scripts),
      "package-lock.json": lockfileText(name, options.lockPackages),
      "src/math.js": `export function add(a, b) {\n${options.failing ? ADD_BUGGY : ADD_CORRECT}\n}\n`,
      "test/math.test.js": [
        'import test from "node:test";',
        'import assert from "node:assert/strict";',
        'import { add } from "../src/math.js";',
        "",
        'test("add adds", () => {',
        "  assert.equal(add(2, 3), 5);",
        "});",
        "",
      ].join("\n"),
      ...options.extraFiles,
    },
    options,
  );
}

/**
 * A JavaScript project with a `node build.mjs` build that writes a generated test into `dist/`,
 * and `node --test dist/generated.test.js` as its test: the build-then-test shape without tsc.
 */
export async function createJsBuildThenTestProject(options: ProjectFixtureOptions = {}): Promise<FixtureRepo> {
  const name = options.name ?? "fixture-js-build";
  const scripts = { build: "node build.mjs", test: "node --test dist/generated.test.js", ...options.scripts };
  return createFixtureRepo(
    {
      ".gitignore": "node_modules\ndist\n",
      "package.json": packageJson(name, scripts),
      "package-lock.json": lockfileText(name, options.lockPackages),
      "src/math.js": `export function add(a, b) {\n${options.failing ? ADD_BUGGY : ADD_CORRECT}\n}\n`,
      "build.mjs": [
        'import { mkdirSync, writeFileSync } from "node:fs";',
        'mkdirSync("dist", { recursive: true });',
        'writeFileSync("dist/generated.test.js", [',
        '  \'import test from "node:test";\',',
        '  \'import assert from "node:assert/strict";\',',
        '  \'import { add } from "../src/math.js";\',',
        "  'test(\"generated\", () => assert.equal(add(20, 22), 42));',",
        '].join("\\n"));',
        "",
      ].join("\n"),
      ...options.extraFiles,
    },
    options,
  );
}

/**
 * The TypeScript fixtures copy as "the project's own" compiler: SERAPH_TEST_TYPESCRIPT_ROOT, else
 * the one installed at the Seraph root (see typescriptForTests; missing always throws here).
 */
export async function rootTypeScript(env: NodeJS.ProcessEnv = process.env): Promise<{ dir: string; version: string }> {
  const ts = await typescriptForTests({ ...env, CI: "true" });
  if (!ts) throw new Error("unreachable: typescriptForTests throws under CI=true");
  return ts;
}

/** The package-lock.json entries of a copied TypeScript. */
export function typescriptLockEntry(version: string): Record<string, unknown> {
  return {
    "node_modules/typescript": {
      version,
      resolved: `https://registry.npmjs.org/typescript/-/typescript-${version}.tgz`,
      dev: true,
      license: "Apache-2.0",
      bin: { tsc: "bin/tsc", tsserver: "bin/tsserver" },
      engines: { node: ">=14.17" },
    },
  };
}

/** Options of the TypeScript fixture. */
export interface TsProjectOptions extends ProjectFixtureOptions {
  /** Lock a different TypeScript version than the one installed (lockfile disagreement). */
  readonly lockedTypeScriptVersion?: string;
  /** Omit the node_modules/.bin links. */
  readonly withoutBinLinks?: boolean;
}

/**
 * A TypeScript project built by its own pinned compiler: the root node_modules/typescript is copied
 * into the fixture's node_modules with a matching package-lock.json entry and `.bin` links. The
 * build is `tsc -p tsconfig.json` (outDir `dist`, tsconfig with comments and a trailing comma) and
 * the test runs the compiled output: `node --test dist/test/math.test.js`.
 */
export async function createTsProject(options: TsProjectOptions = {}): Promise<FixtureRepo> {
  const name = options.name ?? "fixture-ts";
  const ts = await rootTypeScript();
  const scripts = { build: "tsc -p tsconfig.json", test: "node --test dist/test/math.test.js", prebuild: "node -e \"require('fs').writeFileSync('hook-ran','')\"", ...options.scripts };
  const lockPackages = { ...typescriptLockEntry(options.lockedTypeScriptVersion ?? ts.version), ...options.lockPackages };
  const bins: Record<string, FixtureEntry> = options.withoutBinLinks ? {} : { "node_modules/.bin/tsc": { link: "../typescript/bin/tsc" }, "node_modules/.bin/tsserver": { link: "../typescript/bin/tsserver" } };
  const repo = await createFixtureRepo(
    {
      ".gitignore": "node_modules\ndist\n",
      "package.json": packageJson(name, scripts, { devDependencies: { typescript: ts.version } }),
      "package-lock.json": lockfileText(name, lockPackages, { typescript: ts.version }),
      "tsconfig.json": [
        "{",
        "  // The project's own settings; comments and trailing commas are allowed here.",
        '  "extends": "./tsconfig.base.json",',
        '  "compilerOptions": { "outDir": "dist", "rootDir": "." },',
        '  "include": ["src", "test"],',
        "}",
        "",
      ].join("\n"),
      "tsconfig.base.json": JSON.stringify({ compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, types: [], skipLibCheck: true } }, null, 2),
      "src/node-shims.d.ts": [
        'declare module "node:test" { export default function test(name: string, fn: () => void | Promise<void>): void; }',
        'declare module "node:assert/strict" { const assert: { equal(a: unknown, b: unknown): void }; export default assert; }',
        "",
      ].join("\n"),
      "src/math.ts": `export function add(a: number, b: number): number {\n${options.failing ? ADD_BUGGY : ADD_CORRECT}\n}\n`,
      "test/math.test.ts": [
        'import test from "node:test";',
        'import assert from "node:assert/strict";',
        'import { add } from "../src/math.js";',
        "",
        'test("add adds", () => {',
        "  assert.equal(add(2, 3), 5);",
        "});",
        "",
      ].join("\n"),
      ...bins,
      ...options.extraFiles,
    },
    { ...options, git: false },
  );
  await cp(ts.dir, join(repo.dir, "node_modules", "typescript"), { recursive: true, verbatimSymlinks: true });
  if (options.git ?? true) {
    execFileSync("git", ["-c", "init.defaultBranch=main", "init", "-q"], { cwd: repo.dir, env: gitEnv(), stdio: "ignore" });
    commitFixture(repo.dir);
  }
  return repo;
}

/** A git-style unified diff that changes one file of a fixture from `before` to `after`. */
export function fixturePatch(rel: string, before: string, after: string): string {
  return createTwoFilesPatch(`a/${rel}`, `b/${rel}`, before, after, undefined, undefined, { context: 3 });
}

/** The patch that fixes a failing fixture's `add` (src/math.js, or src/math.ts for TypeScript). */
export function fixAddPatch(language: "js" | "ts" = "js"): string {
  const rel = language === "ts" ? "src/math.ts" : "src/math.js";
  const sig = language === "ts" ? "export function add(a: number, b: number): number {" : "export function add(a, b) {";
  return fixturePatch(rel, `${sig}\n${ADD_BUGGY}\n}\n`, `${sig}\n${ADD_CORRECT}\n}\n`);
}
