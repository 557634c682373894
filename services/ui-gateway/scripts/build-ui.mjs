// Bundles the browser UI (src-ui/main.ts and src-ui/styles.css) into content-hashed files under
// public/assets/ with esbuild, and writes public/index.html from src-ui/index.html naming them
// (hashed names are served with a year of caching; index.html is revalidated). All of it is
// generated, never committed: `npm run build:ui -w services/ui-gateway` typechecks src-ui
// (tsconfig.ui.json) and then runs this script. It needs @seraph/proto's dist (run `tsc -b` first).
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const proto = join(root, "..", "..", "packages", "proto", "dist", "gen");
if (!existsSync(proto)) {
  process.stderr.write(`build-ui: ${proto} is missing; run \`npx tsc -b\` from the repository root first\n`);
  process.exit(1);
}

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
const page = readFileSync(join(root, "src-ui", "index.html"), "utf8").replace("{{APP_JS}}", app).replace("{{STYLES_CSS}}", styles);
writeFileSync(join(root, "public", "index.html"), page);
process.stdout.write(`build-ui: public/index.html, public/${app}, public/${styles} written\n`);
