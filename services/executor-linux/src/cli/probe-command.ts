import { toJson } from "@bufbuild/protobuf";
import { FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { readFacilityReport } from "../supervisor-client/index.js";

/** Usage of this subcommand (also printed by `seraph-exec probe --help`). */
export const PROBE_USAGE = `usage: seraph-exec probe [--json]

Reports the Linux facilities the supervisor needs (x86_64, pidfd, subreaper, SIGCHLD disposition,
/proc): with --json as one FacilityReport object. Exit status 0 when every facility is present,
1 when anything blocks, 2 on usage.`;

/**
 * `seraph-exec probe [--json]`: runs the facility probe in a short-lived child (this CLI never
 * becomes a subreaper) and prints the FacilityReport — one JSON object with --json, a table
 * otherwise. Exit status 0 when every facility is present, 1 when anything blocks, 2 on usage.
 */
export async function probeCommand(args: readonly string[]): Promise<number> {
  const json = args.includes("--json");
  const unknown = args.filter((a) => a !== "--json");
  if (unknown.length > 0) {
    process.stderr.write(`seraph-exec probe: unknown argument ${JSON.stringify(unknown[0])}\n${PROBE_USAGE}\n`);
    return 2;
  }
  const report = await readFacilityReport();
  if (json) {
    process.stdout.write(`${JSON.stringify(toJson(FacilityReportSchema, report, { alwaysEmitImplicit: true }))}\n`);
  } else {
    const lines = [`linux supervision facilities: ${report.ok ? "ok" : "BLOCKED"} (kernel ${report.kernel || "?"}, ${report.arch || "?"})`];
    for (const item of report.items) {
      lines.push(`  ${item.ok ? "ok     " : "BLOCKED"} ${item.name.padEnd(10)} ${item.ok ? "" : `${item.code}: `}${item.message}`);
    }
    process.stdout.write(`${lines.join("\n")}\n`);
  }
  return report.ok ? 0 : 1;
}
