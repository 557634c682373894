// Bundles the per-job supervisor (dist/supervisor/main.js, compiled by tsc) into one ES module,
// dist/supervisor-bundle/supervisor.mjs, with esbuild: the supervisor's own modules, native/
// and @bufbuild/protobuf in one file, so a supervisor start reads and compiles one file
// instead of ~100 modules. koffi stays outside (its native koffi.node is found relative to its
// package): the supervisor loads it through require, and its source hash names the bundle and
// every file require loaded (src/supervisor/source-hash.ts).
//
// The generated supervisor descriptors import buf/validate/validate.proto for their
// protovalidate annotations; the supervisor never runs protovalidate (spec.ts mirrors the
// rules), so the bundle gets an empty file of that name instead of building ~200 descriptors at
// every start. The annotations stay in the supervisor's descriptors as unknown option bytes.
//
// Its descriptors are embedded as base64 (fileDesc("…")); Node 24 has no native
// Uint8Array.prototype.setFromBase64, so protobuf's pure-JS decoder ran over ≈ 10 KiB of base64 at
// every start, hot enough for V8 to OSR-compile it with TurboFan on a background thread (34 ms of
// compile, ≈ 6 MiB more of the node executable paged in, in 9 of 11 starts measured). The bundle's
// copy of protobuf's base64 module takes Buffer's native decoder for what that native method would
// accept (standard alphabet, padding only at the end) and keeps its own decoder for the rest
// (base64url, white space, inner padding), which is exactly protobuf's own fallback rule.
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
const BASE64 = /[\\/]@bufbuild[\\/]protobuf[\\/]dist[\\/]esm[\\/]wire[\\/]base64-encoding\.js$/;
const NATIVE_BASE64 = "const nativeSetFromBase64 = Uint8Array.prototype.setFromBase64;";
const BUFFER_BASE64 = `const nativeSetFromBase64 = Uint8Array.prototype.setFromBase64 ?? function (s) {
    // Buffer's decoder for what the native method accepts; anything else throws, so protobuf falls back to its own.
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || (s.length & 3) === 1) throw new SyntaxError("not plain base64");
    const decoded = Buffer.from(s, "base64");
    this.set(decoded);
    return { read: s.length, written: decoded.length };
};`;
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
  // For CommonJS code in the bundle (none since pino left it), which calls require for node: built-ins.
  banner: { js: 'import { createRequire as __seraphCreateRequire } from "node:module";\nconst require = __seraphCreateRequire(import.meta.url);' },
  define: { SERAPH_SUPERVISOR_BUNDLE: "true" },
  metafile: true,
  legalComments: "none",
  logLevel: "warning",
  plugins: [
    {
      name: "native-base64",
      setup(b) {
        b.onLoad({ filter: BASE64 }, (args) => {
          const source = readFileSync(args.path, "utf8");
          if (!source.includes(NATIVE_BASE64)) throw new Error(`${args.path}: no "${NATIVE_BASE64}" (protobuf changed; update scripts/build-supervisor.mjs)`);
          return { contents: source.replace(NATIVE_BASE64, BUFFER_BASE64), loader: "js" };
        });
      },
    },
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
