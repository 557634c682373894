import { join } from "node:path";
import type { Step } from "@seraph/proto/seraph/profile/v1/profile_pb.js";

/** Rewrites a step's package-relative display argv into absolute argv for the staged package. */
export function stagedArgv(step: Step, nodePath: string, packageDir: string): string[] {
  return [nodePath, ...step.displayArgv.slice(1).map((t) => (t.startsWith("--") ? t : join(packageDir, t)))];
}
