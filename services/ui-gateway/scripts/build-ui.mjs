// Bundles the browser UI (src-ui/main.ts) into public/app.js with esbuild. The bundle is
// generated, never committed: `npm run build:ui -w services/ui-gateway` typechecks src-ui
// (tsconfig.ui.json) and then runs this script. It needs @seraph/proto's dist (run `tsc -b` first).
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const proto = join(root, "..", "..", "packages", "proto", "dist", "gen");
if (!existsSync(proto)) {
  process.stderr.write(`build-ui: ${proto} is missing; run \`npx tsc -b\` from the repository root first\n`);
  process.exit(1);
}

const result = await build({
  absWorkingDir: root,
  entryPoints: ["src-ui/main.ts"],
  outfile: "public/app.js",
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
process.stdout.write("build-ui: public/app.js written\n");
