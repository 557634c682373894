#!/usr/bin/env node
// Thin launcher so the bin exists before the first build; the CLI itself is compiled TypeScript.
import { main } from "../dist/main.js";

process.exitCode = await main(process.argv.slice(2));
