import { parseArgs } from "node:util";
import { blockReason, limitValues, runRepair, type RunSteps } from "../profile/index.js";
import { formatRepairText } from "../profile/report-text.js";
import { create } from "@bufbuild/protobuf";
import { ControllerLossPolicy, SupervisorSpecSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { runToReceipt } from "../supervisor-client/index.js";
import { FileTooLargeError, readFileBounded } from "../profile/safe-fs.js";
import { INSPECTION_OPTIONS, inspectionFromValues } from "./inspection-args.js";
import { parseJobUserSetting, resolveHandRunJobUser } from "../supervisor-client/node-containment.js";

/** Usage of this subcommand (also printed by `seraph-exec <command> --help`). */
export const REPAIR_RUN_USAGE = `usage: seraph-exec repair-run [--json] --repo DIR --selection 'python -m pytest tests/test_x.py' [--patch FILE] [--allow P ...] [--job-user auto|none|UID:GID|NAME] [--profile NAME] [--node ABS] [--node-sha256 HEX] [--python ABS] [--python-sha256 HEX] [--source P ...] [--build-output-dir D] [--limit NAME=VALUE ...] [--expect-inspection-sha256 HEX] [--keep-job-dir]

Inspects DIR, stages a private copy (0700), applies the patch to the copy only, runs each step
under a fresh supervisor within the wall deadline, checks the repository is unchanged, and prints
one JSON object (last line with --json): the inspection hash, each step's receipt, and outcome
(succeeded, failed, blocked with reasons/drift, or the supervisor's outcome).
  --patch FILE                   a unified diff to apply to the staged copy
  --allow P                      an allowed patch path (repeatable; default: the source paths)
  --expect-inspection-sha256 HEX block as drift unless inspection reproduces this hash
  --keep-job-dir                 keep the staged job directory for inspection afterwards
  --job-user USER                as root: who the steps run as (default auto: uid = gid =
                                 $SERAPH_JOB_UID_BASE + 64, as seraph-exec run); the staged copy
                                 is handed to that user; none = as root (same-uid exposure)
  (--profile, --node, --node-sha256, --python, --python-sha256, --source, --build-output-dir, --limit: as for inspect)
Exit status: 0 succeeded, 1 any other outcome, 2 usage.`;

/**
 * Each step under a fresh detached supervisor (the CLI itself never becomes a subreaper), with
 * policy cancel: this process cannot re-adopt it, so if it dies the supervisor cancels the step.
 */
const supervisedRunSteps: RunSteps = (spec) => runToReceipt(create(SupervisorSpecSchema, { ...spec, controllerLossPolicy: ControllerLossPolicy.CANCEL }));

/**
 * `seraph-exec repair-run`: inspects, stages, applies the patch to the staged copy, runs the
 * selected steps under a fresh supervisor each within the wall deadline, re-hashes the repository
 * and prints one JSON object (the last line of stdout) with --json. Exit 0 only for "succeeded";
 * 1 for any other outcome; 2 on a usage error.
 */
export async function repairRunCommand(args: readonly string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: [...args],
      strict: true,
      allowPositionals: false,
      options: {
        ...INSPECTION_OPTIONS,
        patch: { type: "string" },
        allow: { type: "string", multiple: true },
        "keep-job-dir": { type: "boolean", default: false },
        "expect-inspection-sha256": { type: "string" },
        "job-user": { type: "string", default: "auto" },
      },
    }));
  } catch (err) {
    process.stderr.write(`seraph-exec repair-run: ${(err as Error).message}\n${REPAIR_RUN_USAGE}\n`);
    return 2;
  }
  const parsed = inspectionFromValues("repair-run", REPAIR_RUN_USAGE, values);
  if (parsed === 2) return 2;
  const { limits } = parsed;
  const setting = parseJobUserSetting(values["job-user"]);
  const jobUser = typeof setting === "string" ? setting : resolveHandRunJobUser(setting, process.env);
  if (typeof jobUser === "string") {
    process.stderr.write(`seraph-exec repair-run: --job-user: ${jobUser}\n${REPAIR_RUN_USAGE}\n`);
    return 2;
  }
  if (jobUser !== undefined && process.geteuid?.() !== 0) {
    process.stderr.write(`seraph-exec repair-run: --job-user ${values["job-user"]} needs root (only root can run the steps as another user); omit it to run as yourself\n`);
    return 2;
  }
  const emit = (report: Parameters<typeof formatRepairText>[0]): void => {
    if (values.json) process.stdout.write(`${JSON.stringify(report)}\n`);
    else process.stdout.write(formatRepairText(report));
  };
  const blocked = (code: Parameters<typeof blockReason>[0], message: string, subject: string): number => {
    const r = blockReason(code, message, subject);
    if (values.json) process.stdout.write(`${JSON.stringify({ outcome: "blocked", admitted: false, reasons: [{ code: r.code, message: r.message, subject: r.subject }], steps: [], repositoryUnchanged: null })}\n`);
    else process.stdout.write(`outcome: blocked\n  ${r.code}: ${r.message}\n`);
    return 1;
  };

  let patchText: string | undefined;
  if (values.patch !== undefined) {
    const max = limitValues(limits).patch_bytes;
    try {
      patchText = (await readFileBounded(values.patch, max)).bytes.toString("utf8");
    } catch (err) {
      if (err instanceof FileTooLargeError) return blocked("patch_too_large", `The patch has ${err.size} bytes or more; the profile allows ${max}.`, values.patch);
      return blocked("patch_invalid", `The patch file ${values.patch} cannot be read (${(err as Error).message}).`, values.patch);
    }
  }
  const report = await runRepair({
    ...parsed.inspect,
    ...(patchText !== undefined ? { patchText } : {}),
    ...(values.allow !== undefined ? { allowedPatchPaths: values.allow } : {}),
    keepJobDir: values["keep-job-dir"],
    ...(values["expect-inspection-sha256"] !== undefined ? { expectedInspectionSha256: values["expect-inspection-sha256"] } : {}),
    runSteps: supervisedRunSteps,
    ...(jobUser !== undefined ? { jobUser } : {}),
  });
  emit(report);
  return report.outcome === "succeeded" ? 0 : 1;
}
