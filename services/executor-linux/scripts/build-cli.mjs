// Bundles the seraph-exec CLI's entry and its `run` subcommand (dist/cli/seraph-exec.js and what
// dist/cli/run-command.js imports, compiled by tsc) into one ES module,
// dist/cli-bundle/seraph-exec.mjs, with esbuild, so `seraph-exec run` reads and compiles one file
// instead of ~140 modules and builds only the protobuf descriptors it uses. The other subcommands
// (`probe`, `inspect`, `repair-run`) stay their compiled modules under dist/cli/, imported by the
// bundle only when one of them runs. koffi stays outside (loaded through require if at all).
// The protovalidate descriptors and the base64 decoder: see scripts/bundle-plugins.mjs (nothing
// the CLI runs evaluates protovalidate rules; the check below fails the build if that changes).
//
// The bundle sits two directories under the package root like every compiled module, so paths
// resolved from import.meta.url (the supervisor bundle, the pinned runtime) are the same.
// bin/seraph-exec.js runs it. A build product, never committed (dist/ is ignored): `npm run
// build` runs it after `tsc -b`.
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { importsOf, nativeBase64, noProtovalidateDescriptors, protovalidateInputs } from "./bundle-plugins.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const entry = join(root, "dist", "cli", "seraph-exec.js");
const outdir = join(root, "dist", "cli-bundle");
/** The subcommands left out of the bundle: imported from dist/cli/ when they run. */
const UNBUNDLED = ["probe-command.js", "inspect-command.js", "repair-run-command.js"];

const unbundledSubcommands = {
  name: "unbundled-subcommands",
  setup(b) {
    b.onResolve({ filter: /^\.\/[a-z-]+-command\.js$/ }, (args) => {
      const name = args.path.slice(2);
      if (args.importer !== entry || !UNBUNDLED.includes(name)) return undefined;
      return { path: `../cli/${name}`, external: true };
    });
  },
};

// Earlier builds' chunks (their names carry a content hash) go first.
rmSync(outdir, { recursive: true, force: true });
mkdirSync(outdir, { recursive: true });
const result = await build({
  entryPoints: { "seraph-exec": entry },
  outdir,
  outExtension: { ".js": ".mjs" },
  // The entry file holds the dispatch and run-prestart.ts only, so `run` starts its supervisor
  // before the rest of it is even read; `run` itself is a chunk imported next.
  splitting: true,
  chunkNames: "[name]-[hash]",
  bundle: true,
  format: "esm",
  platform: "node",
  // The CLI runs on whatever node starts it (package engines: >= 20.19).
  target: ["node20"],
  external: ["koffi"],
  banner: { js: 'import { createRequire as __seraphCreateRequire } from "node:module";\nconst require = __seraphCreateRequire(import.meta.url);' },
  metafile: true,
  legalComments: "none",
  logLevel: "warning",
  plugins: [unbundledSubcommands, nativeBase64, noProtovalidateDescriptors(root)],
});
if (result.errors.length > 0) process.exit(1);
const outputs = Object.keys(result.metafile.outputs);
const texts = outputs.map((o) => readFileSync(join(root, o), "utf8"));
const allowed = new Set(UNBUNDLED.map((n) => `../cli/${n}`));
const foreign = [
  ...texts.flatMap((t) => importsOf(t)).filter((s) => !s.startsWith("node:") && !allowed.has(s) && !/^\.\/[\w.-]+\.mjs$/.test(s)),
  ...protovalidateInputs(result.metafile),
];
const inputs = Object.keys(result.metafile.inputs);
// Code of the inspection, staging and profile rules must not end up in `run`'s bundle (esbuild
// drops what `run` does not use; a dependency that is evaluated would stay).
const bundled = Object.values(result.metafile.outputs).flatMap((o) => Object.entries(o.inputs).filter(([, v]) => v.bytesInOutput > 0).map(([k]) => k));
const leaked = bundled.filter((i) => /\/dist\/(python3|node24-npm|registry)\/|\/node_modules\/(yaml|diff|fast-xml-parser|smol-toml|jsonc-parser)\//.test(i) || (/\/dist\/profile\//.test(i) && !/\/profile\/(pinned-runtime|file-digests)\.js$/.test(i)));
// The entry must stay light: the supervisor starts before protobuf is read.
const entryOut = result.metafile.outputs[relative(root, join(outdir, "seraph-exec.mjs"))];
const heavyEntry = entryOut === undefined ? ["(no seraph-exec.mjs)"] : Object.keys(entryOut.inputs).filter((i) => i.includes("@bufbuild/") || i.includes("/gen/"));
if (foreign.length > 0 || leaked.length > 0 || heavyEntry.length > 0 || !texts.some((t) => t.includes("../cli/inspect-command.js"))) {
  process.stderr.write(`build-cli: the bundle imports ${[...foreign, ...leaked, ...heavyEntry].join(", ") || "no ../cli/inspect-command.js"}\n`);
  process.exit(1);
}
process.stdout.write(`build-cli: ${relative(root, outdir)}/ (${outputs.map((o) => basename(o)).join(", ")}; ${inputs.length} modules, ${Math.round(texts.reduce((n, t) => n + t.length, 0) / 1024)} KiB)\n`);
