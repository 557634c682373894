import type { FixtureEntry } from "./fixture-repo.js";

/**
 * node_modules entries for a dependency package with `files` small regular files (plus its
 * package.json) and the matching lockfile entry: use it to build an over-limit dependency tree.
 */
export function bulkDependency(name: string, files: number, version = "1.0.0"): { files: Record<string, FixtureEntry>; lock: Record<string, unknown> } {
  const out: Record<string, FixtureEntry> = {
    [`node_modules/${name}/package.json`]: JSON.stringify({ name, version, main: "index.js" }),
  };
  for (let i = 0; i < files; i++) out[`node_modules/${name}/lib/f${i}.js`] = `module.exports = ${i};\n`;
  return { files: out, lock: { [`node_modules/${name}`]: { version, resolved: `https://registry.npmjs.org/${name}/-/${name}-${version}.tgz` } } };
}
