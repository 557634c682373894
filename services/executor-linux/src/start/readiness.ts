import { existsSync } from "node:fs";
import { supervisorSourceOf } from "../executor-service/supervisor-source.js";
import { PINNED_NODE_PACKAGE, PINNED_NODE_VERSION } from "../profile/runtime.js";

/** Why this node cannot run any job, with the exact fix in `message`. */
export class NodeNotReadyError extends Error {
  override readonly name = "NodeNotReadyError";
  constructor(
    /** Stable reason: `supervisor_missing`, `supervisor_runtime_missing` or `supervisor_unrunnable`. */
    readonly reason: string,
    message: string,
    /** The file the fix is about. */
    readonly path: string,
  ) {
    super(message);
  }
}

/**
 * Checks what every job on this node needs before the node may serve: the per-job supervisor
 * bundle `entry` exists (`npm run build` builds it; `tsc -b` does not), a runtime to run it on is
 * resolved, and the bundle reports its source hash on that runtime (the hash every approval must
 * name: without it each Approve would fail on "supervisor code is unknown"). Throws
 * NodeNotReadyError naming the file and the fix; returns the source hash when the node is ready.
 * Host facilities are not checked here: a node without them still serves and shows them blocked.
 */
export function checkNodeReadiness(entry: string, runtime: string | undefined): string {
  if (!existsSync(entry)) {
    throw new NodeNotReadyError(
      "supervisor_missing",
      `this node cannot run jobs: the per-job supervisor bundle ${entry} is missing; run \`npm run build\` (it builds the bundle, \`tsc -b\` does not)`,
      entry,
    );
  }
  if (runtime === undefined) {
    throw new NodeNotReadyError(
      "supervisor_runtime_missing",
      `this node cannot run jobs: the supervisors' runtime ${PINNED_NODE_PACKAGE}@${PINNED_NODE_VERSION.slice(1)} is not installed and SERAPH_SUPERVISOR_RUNTIME names none; run \`npm install\` or set SERAPH_SUPERVISOR_RUNTIME to its bin/node`,
      entry,
    );
  }
  const sha256 = supervisorSourceOf(entry, runtime);
  if (sha256 === "") {
    throw new NodeNotReadyError(
      "supervisor_unrunnable",
      `this node cannot run jobs: the per-job supervisor bundle ${entry} did not report its source on ${runtime} (\`${runtime} ${entry} --source\` failed); rebuild it with \`npm run build\``,
      entry,
    );
  }
  return sha256;
}
