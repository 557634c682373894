#!/usr/bin/env node
// Thin launcher so the bin exists before the first build. It runs the CLI's bundle
// (dist/cli-bundle/seraph-exec.mjs: the entry and `run` in one file, built by `npm run build`),
// or the compiled entry dist/cli/seraph-exec.js where only `tsc -b` ran (the same code, slower
// to load). `npm run build` rebuilds both; a bundle older than the sources runs the older code.
import { existsSync } from "node:fs";

const bundle = new URL("../dist/cli-bundle/seraph-exec.mjs", import.meta.url);
const { main } = await import(existsSync(bundle) ? bundle.href : "../dist/cli/seraph-exec.js");
process.exitCode = await main(process.argv.slice(2));
