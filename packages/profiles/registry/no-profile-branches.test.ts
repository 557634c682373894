import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

// The repository root, from packages/profiles/registry/.
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** Where a profile's name may be written and compared: the registries and each profile's own folder. */
const PROFILE_HOMES = [
  "packages/profiles/registry/",
  "packages/profiles/python3/",
  "packages/profiles/node24-npm/",
  "services/executor-linux/src/profile/registry.ts",
  "services/executor-linux/src/profile/node/",
  "services/executor-linux/src/profile/python/",
];

/** Known places still to move, each with why (none: the UI reads ListProfiles). */
const PENDING: Readonly<Record<string, string>> = {};

/** A string literal that is exactly a profile-shaped name ("repo-…-v1"). */
const NAME_LITERAL = /(["'`])repo-[a-z0-9]+(?:-[a-z0-9]+)*-v\d+\1/;
/** A comparison with a *_PROFILE constant, on either side. */
const PROFILE_COMPARISON = /[!=]==?\s*[A-Z][A-Z0-9_]*_PROFILE\b|\b[A-Z][A-Z0-9_]*_PROFILE\s*[!=]==?/;

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const abs = join(dir, entry.name);
    const rel = relative(ROOT, abs);
    if (entry.isDirectory()) {
      // Dependencies, build output, generated code, test support.
      if (["node_modules", "dist", "public", "testing"].includes(entry.name) || rel === join("packages", "proto")) continue;
      sourceFiles(abs, out);
    } else if (/\.(m|c)?tsx?$/.test(entry.name) && !/\.test\.(m|c)?tsx?$/.test(entry.name) && !entry.name.endsWith(".d.ts")) {
      out.push(rel.split("\\").join("/"));
    }
  }
  return out;
}

/** Every line of services/ and packages/ (outside the profile homes) that names or compares a profile. */
function violations(): string[] {
  const found: string[] = [];
  for (const file of [...sourceFiles(join(ROOT, "services")), ...sourceFiles(join(ROOT, "packages"))]) {
    if (PROFILE_HOMES.some((home) => file === home || (home.endsWith("/") && file.startsWith(home)))) continue;
    if (PENDING[file] !== undefined) continue;
    for (const [i, line] of readFileSync(join(ROOT, file), "utf8").split("\n").entries()) {
      if (NAME_LITERAL.test(line) || PROFILE_COMPARISON.test(line)) found.push(`${file}:${i + 1}: ${line.trim()}`);
    }
  }
  return found;
}

describe("no branch on a profile name outside the registry", () => {
  it("the patterns catch what they are meant to (and not a name in prose)", () => {
    expect(NAME_LITERAL.test(`if (p === "repo-python3-v1") {`)).toBe(true);
    expect(NAME_LITERAL.test("case 'repo-go122-mod-v2':")).toBe(true);
    expect(NAME_LITERAL.test(`help: "the profile: repo-python3-v1 or repo-node24-npm-v1"`)).toBe(false);
    expect(PROFILE_COMPARISON.test("const python = req.profile === PYTHON_PROFILE;")).toBe(true);
    expect(PROFILE_COMPARISON.test("if (NODE_PROFILE !== name)")).toBe(true);
    expect(PROFILE_COMPARISON.test("const name = DEFAULT_PROFILE.name;")).toBe(false);
  });

  it("services/ and packages/ (not generated code or tests) name and compare profiles only in the registry and profile folders", () => {
    expect(violations()).toEqual([]);
  });
});
