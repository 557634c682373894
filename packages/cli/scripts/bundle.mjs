// Bundles the compiled CLI (dist/main.js and everything it imports) into one ES module,
// dist/seraph.mjs, which bin/seraph.js loads: Node then reads and compiles one file instead of
// resolving a few hundred (the CLI starts in about a third of the time; see docs/benchmarks.md,
// "CLI start"). Run after `tsc -b` (the root `npm run build` does both).
import { build } from "esbuild";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
await build({
  entryPoints: [join(pkg, "dist", "main.js")],
  outfile: join(pkg, "dist", "seraph.mjs"),
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  // CommonJS dependencies (commander, tweetnacl) call require(); an ES module has none of its own.
  banner: { js: 'import { createRequire as __seraphCreateRequire } from "node:module"; const require = __seraphCreateRequire(import.meta.url);' },
  legalComments: "none",
  logLevel: "warning",
});
