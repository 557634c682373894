// Bundles the per-job supervisor (dist/supervisor/main.js, compiled by tsc) into one ES module,
// dist/supervisor-bundle/supervisor.mjs, with esbuild: the supervisor's own modules, native/
// and @bufbuild/protobuf in one file, so a supervisor start reads and compiles one file
// instead of ~100 modules. koffi stays outside (its native koffi.node is found relative to its
// package): the supervisor loads it through require, and its source hash names the bundle and
// every file require loaded (src/supervisor/source-hash.ts).
//
// The protovalidate descriptors and the base64 decoder: see scripts/bundle-plugins.mjs.
//
// A build product, never committed (dist/ is ignored): `npm run build` runs it after `tsc -b`.
import { mkdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { importsOf, nativeBase64, noProtovalidateDescriptors, protovalidateInputs } from "./bundle-plugins.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const entry = join(root, "dist", "supervisor", "main.js");
const outfile = join(root, "dist", "supervisor-bundle", "supervisor.mjs");
mkdirSync(dirname(outfile), { recursive: true });
const result = await build({
  entryPoints: [entry],
  outfile,
  bundle: true,
  format: "esm",
  platform: "node",
  target: ["node24"],
  // koffi is loaded at run time through require (native/libc.ts); nothing else is external.
  external: ["koffi"],
  // For CommonJS code in the bundle (none since pino left it), which calls require for node: built-ins.
  banner: { js: 'import { createRequire as __seraphCreateRequire } from "node:module";\nconst require = __seraphCreateRequire(import.meta.url);' },
  define: { SERAPH_SUPERVISOR_BUNDLE: "true" },
  metafile: true,
  legalComments: "none",
  logLevel: "warning",
  plugins: [nativeBase64, noProtovalidateDescriptors(root)],
});
if (result.errors.length > 0) process.exit(1);
// The bundle may import only node: built-ins; anything else would be code outside its hash.
const text = readFileSync(outfile, "utf8");
const foreign = [...importsOf(text).filter((s) => !s.startsWith("node:")), ...protovalidateInputs(result.metafile)];
const inputs = Object.keys(result.metafile.inputs);
if (foreign.length > 0) {
  process.stderr.write(`build-supervisor: the bundle imports ${foreign.join(", ")}\n`);
  process.exit(1);
}
process.stdout.write(`build-supervisor: ${outfile.slice(root.length + 1)} (${inputs.length} modules, ${Math.round(text.length / 1024)} KiB)\n`);
