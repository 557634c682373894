// Bundles the per-job supervisor (dist/supervisor/main.js, compiled by tsc) into one ES module,
// dist/supervisor-bundle/supervisor.mjs, with esbuild: the supervisor's own modules, native/,
// pino and @bufbuild/protobuf in one file, so a supervisor start reads and compiles one file
// instead of ~100 modules. koffi stays outside (its native koffi.node is found relative to its
// package): the supervisor loads it through require, and its source hash names the bundle and
// every file require loaded (src/supervisor/source-hash.ts).
//
// The generated supervisor descriptors import buf/validate/validate.proto for their
// protovalidate annotations; the supervisor never runs protovalidate (spec.ts mirrors the
// rules), so the bundle gets an empty file of that name instead of building ~200 descriptors at
// every start. The annotations stay in the supervisor's descriptors as unknown option bytes.
//
// A build product, never committed (dist/ is ignored): `npm run build` runs it after `tsc -b`.
import { mkdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { create, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const entry = join(root, "dist", "supervisor", "main.js");
const outfile = join(root, "dist", "supervisor-bundle", "supervisor.mjs");
const VALIDATE = /^@bufbuild\/protovalidate\/gen\/buf\/validate\/validate_pb\.js$/;

const emptyValidateFile = Buffer.from(
  toBinary(FileDescriptorProtoSchema, create(FileDescriptorProtoSchema, { name: "buf/validate/validate.proto", package: "buf.validate", syntax: "proto2" })),
).toString("base64");

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
  // CommonJS dependencies (pino) call require for node: built-ins.
  banner: { js: 'import { createRequire as __seraphCreateRequire } from "node:module";\nconst require = __seraphCreateRequire(import.meta.url);' },
  define: { SERAPH_SUPERVISOR_BUNDLE: "true" },
  metafile: true,
  legalComments: "none",
  logLevel: "warning",
  plugins: [
    {
      name: "no-protovalidate-descriptors",
      setup(b) {
        b.onResolve({ filter: VALIDATE }, (args) => ({ path: args.path, namespace: "seraph-empty-validate" }));
        b.onLoad({ filter: /.*/, namespace: "seraph-empty-validate" }, () => ({
          contents: `import { fileDesc } from "@bufbuild/protobuf/codegenv2";\n// buf/validate/validate.proto by name only: the supervisor never evaluates its rules.\nexport const file_buf_validate_validate = fileDesc(${JSON.stringify(emptyValidateFile)});\n`,
          resolveDir: root,
          loader: "js",
        }));
      },
    },
  ],
});
if (result.errors.length > 0) process.exit(1);
// The bundle may import only node: built-ins; anything else would be code outside its hash.
const text = readFileSync(outfile, "utf8");
const foreign = [...text.matchAll(/^import\s[^;]*?from\s*"([^"]+)"|\bimport\(\s*["'`]([^"'`]+)/gm)].map((m) => m[1] ?? m[2]).filter((s) => !s.startsWith("node:"));
const inputs = Object.keys(result.metafile.inputs);
if (foreign.length > 0 || inputs.some((i) => i.includes("protovalidate") && !i.startsWith("seraph-empty-validate:"))) {
  process.stderr.write(`build-supervisor: the bundle imports ${[...foreign, ...inputs.filter((i) => i.includes("protovalidate") && !i.startsWith("seraph-empty-validate:"))].join(", ")}\n`);
  process.exit(1);
}
process.stdout.write(`build-supervisor: ${outfile.slice(root.length + 1)} (${inputs.length} modules, ${Math.round(text.length / 1024)} KiB)\n`);
