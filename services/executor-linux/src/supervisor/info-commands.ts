import { create, toBinary } from "@bufbuild/protobuf";
import { FacilityItemSchema, FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { probeContainment } from "../native/containment-probe.js";
import { probeFacilitiesInThisProcess } from "../native/facility.js";
import { createNativeSystem } from "../native/libc.js";
import { createProcFs } from "../native/proc-fs.js";
import { loadedCode, runtimeProblem } from "./job-start.js";
import { supervisorSourceSha256 } from "./source-hash.js";

/**
 * `--probe [--test-boot-id-file FILE]`: prints this host's FacilityReport (binary) on stdout.
 * The executor passes its own (test-only) boot-id source, so the report names the boot id the
 * executor registers.
 */
export async function printFacilityReport(args: readonly string[]): Promise<number> {
  const proc = createProcFs("/proc", { bootIdFile: args[1] === "--test-boot-id-file" ? args[2] : undefined });
  const { report } = probeFacilitiesInThisProcess({ loadNative: createNativeSystem, proc });
  const problem = runtimeProblem();
  report.items.push(create(FacilityItemSchema, { name: "supervisor_runtime", ok: problem === undefined, code: problem === undefined ? "ok" : "supervisor_runtime_version", message: problem ?? `Node ${process.version}, the pinned runtime.` }));
  if (problem !== undefined) report.ok = false;
  report.containment = probeContainment();
  await new Promise<void>((done) => process.stdout.write(toBinary(FacilityReportSchema, report), () => done()));
  return 0;
}

/** `--source`: loads koffi as a job's supervisor does (createNativeSystem), then prints {sha256, entry, modules} (JSON). */
export async function printSource(): Promise<number> {
  createNativeSystem();
  const code = loadedCode();
  await new Promise<void>((done) => process.stdout.write(`${JSON.stringify({ sha256: supervisorSourceSha256(code), ...code })}\n`, () => done()));
  return 0;
}
