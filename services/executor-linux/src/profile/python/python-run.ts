import { create } from "@bufbuild/protobuf";
import { PythonInspectionSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, formatCount } from "@seraph/profiles";
import type { PythonForm, PytestConfig } from "@seraph/profiles/python3";
import type { InspectionBuilder, ProfileFields, RepositoryReader } from "../inspection-builder.js";
import { FileTooLargeError } from "../safe-fs.js";
import type { SnapshotSink } from "../snapshot.js";
import type { PythonInspectOptions } from "./inspect-python.js";

/** The state one Python inspection carries from step to step (each step a module of its own). */
export interface PythonRun {
  readonly b: InspectionBuilder;
  readonly options: PythonInspectOptions;
  readonly sink: SnapshotSink | undefined;
  reader: RepositoryReader;
  requestedTestPaths: string[];
  pythonReal: string;
  pythonVersion: string;
  majorMinor: string;
  sitePackages: string;
  framework: string;
  frameworkVersion: string;
  venvDir: string;
  /** Every root directory holding a pyvenv.cfg when there are several (refused as ambiguous): none of them is walked as source. */
  ambiguousVenvs?: readonly string[];
  readonly configFiles: Set<string>;
  form: PythonForm | undefined;
  testPaths: string[];
  scriptName: string;
  scriptBody: string;
  pytestConfig: PytestConfig | undefined;
  addopts: readonly string[];
  readonly pthPaths: string[];
}

/** The Python fields of the inspection: the deprecated flat fields and, with the same values, `details.python`. */
export function pythonFields(run: PythonRun): ProfileFields {
  const python = {
    testPaths: run.requestedTestPaths,
    pythonPath: run.pythonReal,
    pythonVersion: run.pythonVersion,
    sitePackages: run.sitePackages,
    framework: run.framework,
    frameworkVersion: run.frameworkVersion,
  };
  return { ...python, details: { case: "python", value: create(PythonInspectionSchema, { ...python, testPaths: [...run.requestedTestPaths] }) } };
}

/** A configuration file's text (bounded as a source file); undefined, with the reason, when too large. */
export async function readText(run: PythonRun, rel: string): Promise<string | undefined> {
  try {
    return (await run.reader.read(rel, run.b.L.source_file_bytes)).bytes.toString("utf8");
  } catch (err) {
    if (!(err instanceof FileTooLargeError)) throw err;
    run.b.reasons.push(blockReason("source_file_too_large", `${rel} has ${formatCount(err.size)} bytes; the profile allows ${formatCount(run.b.L.source_file_bytes)} per source file.`, rel));
    return undefined;
  }
}
