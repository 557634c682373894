// Bundles the browser UI (src-ui/main.ts and src-ui/styles.css) into content-hashed files under
// public/assets/ with esbuild, and writes public/index.html from src-ui/index.html naming them
// (hashed names are served with a year of caching; index.html is revalidated). All of it is
// generated, never committed: `npm run build:ui -w services/ui-gateway` runs this script, which
// typechecks src-ui (tsconfig.ui.json) and bundles, unless the output is newer than every input. It needs @seraph/proto's dist (run `tsc -b` first).
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const proto = join(root, "..", "..", "packages", "proto", "dist", "gen");
if (!existsSync(proto)) {
  process.stderr.write(`build-ui: ${proto} is missing; run \`npx tsc -b\` from the repository root first\n`);
  process.exit(1);
}

// Skip everything when the page is newer than every input (npm start on unchanged sources):
// the UI sources, this script, the UI tsconfig, the generated protos, and the dependency lock.
// --force rebuilds anyway.
/** The newest mtime (ms) of `path`, recursively for a directory; 0 when missing. */
function newest(path) {
  if (!existsSync(path)) return 0;
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  let m = st.mtimeMs;
  for (const name of readdirSync(path)) m = Math.max(m, newest(join(path, name)));
  return m;
}
const page = join(root, "public", "index.html");
const inputs = [join(root, "src-ui"), join(root, "scripts", "build-ui.mjs"), join(root, "tsconfig.ui.json"), join(root, "package.json"), proto, join(root, "..", "..", "package-lock.json")];
if (!process.argv.includes("--force") && existsSync(page)) {
  const html = readFileSync(page, "utf8");
  const named = [...html.matchAll(/"\/(assets\/[^"]+)"/g)].map((m) => join(root, "public", m[1]));
  if (named.length === 2 && named.every((f) => existsSync(f)) && existsSync(join(root, "public", "favicon.svg")) && statSync(page).mtimeMs > Math.max(...inputs.map(newest))) {
    process.stdout.write("build-ui: public/ is up to date (sources unchanged; --force rebuilds)\n");
    process.exit(0);
  }
}
// Typecheck the UI sources first (the bundler only strips types).
const tsc = spawnSync(process.execPath, [join(root, "..", "..", "node_modules", "typescript", "bin", "tsc"), "-p", join(root, "tsconfig.ui.json")], { stdio: "inherit" });
if (tsc.status !== 0) process.exit(tsc.status ?? 1);
rmSync(join(root, "public", "assets"), { recursive: true, force: true });
const result = await build({
  absWorkingDir: root,
  entryPoints: { app: "src-ui/main.ts", styles: "src-ui/styles.css" },
  outdir: "public/assets",
  entryNames: "[name]-[hash]",
  metafile: true,
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["es2022"],
  minify: true,
  sourcemap: "linked",
  legalComments: "none",
  charset: "utf8",
  logLevel: "warning",
});
if (result.errors.length > 0) process.exit(1);
const outputs = Object.keys(result.metafile.outputs).map((p) => p.replace(/^public\//, ""));
const app = outputs.find((p) => /^assets\/app-[A-Z0-9]{8}\.js$/.test(p));
const styles = outputs.find((p) => /^assets\/styles-[A-Z0-9]{8}\.css$/.test(p));
if (!app || !styles) {
  process.stderr.write(`build-ui: unexpected outputs ${outputs.join(", ")}\n`);
  process.exit(1);
}
const html = readFileSync(join(root, "src-ui", "index.html"), "utf8").replace("{{APP_JS}}", app).replace("{{STYLES_CSS}}", styles);
writeFileSync(page, html);
// The page's icon (index.html names it; without it every page load asked for a missing /favicon.ico).
copyFileSync(join(root, "src-ui", "favicon.svg"), join(root, "public", "favicon.svg"));
process.stdout.write(`build-ui: public/index.html, public/${app}, public/${styles} written\n`);
