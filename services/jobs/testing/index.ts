// Test-only helpers of the jobs service (`@seraph/jobs/testing`): TypeScript sources that only
// vitest loads (benchmarks bundle them with esbuild, bench/jobs-common.mjs importTesting);
// nothing here is compiled into dist/ or shipped in the image.
/** Starts a jobs service on a fresh database with a controllable authority; `close()` removes it all. */
export { startJobsHarness } from "./jobs-harness.js";
/** A running jobs harness, as startJobsHarness returns it. */
export type { JobsHarness } from "./jobs-harness.js";
/** The owner and supervisor source hash the test bundles name unless told otherwise. */
export { TEST_OWNER, TEST_SUPERVISOR_SOURCE_SHA256 } from "./jobs-harness.js";
/** A minimal approved bundle for a node, its approval document, an inspection with its hash set, and a bundle carrying its document. */
export { inspectionWithHash, testApprovalDocument, testBundle, testOwnerMarker, withApprovalDocument } from "./jobs-harness.js";
/** Starts one jobs replica's scheduler loop on its own (production code, exported for tests that run several on one database). */
export { startScheduler } from "../src/scheduler/scheduler.js";
/** A running scheduler loop, as startScheduler returns it. */
export type { Scheduler } from "../src/scheduler/scheduler.js";
/** Test node keys, and a credential that makes each call as its rightful caller (the API, or the node the call is for). */
export { actAsRightfulCaller, newTestNodeKey, nodeKeyIn } from "./node-keys.js";
export type { TestNodeKey } from "./node-keys.js";
