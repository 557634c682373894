#!/usr/bin/env node
// Thin launcher so the bin exists before the first build. It loads the bundled CLI
// (dist/seraph.mjs, one file: a fast start) when that is at least as new as the compiled one
// (dist/main.js), else the compiled modules themselves (after a `tsc -b` without the bundle step).
import { statSync } from "node:fs";

const mtime = (rel) => {
  try {
    return statSync(new URL(rel, import.meta.url)).mtimeMs;
  } catch {
    return -1;
  }
};
const bundled = mtime("../dist/seraph.mjs");
const { main } = await import(bundled >= 0 && bundled >= mtime("../dist/main.js") ? "../dist/seraph.mjs" : "../dist/main.js");

process.exitCode = await main(process.argv.slice(2));
