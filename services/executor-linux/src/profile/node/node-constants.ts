import { NODE_PROFILE } from "@seraph/profiles/node24-npm";

/** The profile name every Node inspection carries. */
export const PROFILE_NAME = NODE_PROFILE;

/** The default job-local output directory of a `node <entrypoint>` build (tsc builds use outDir). */
export const DEFAULT_NODE_BUILD_OUTPUT_DIR = "dist";

/** Files that are configuration, never source, wherever they are (immutable to patches). */
export const TSCONFIG_NAME = /(^|\/)(tsconfig|jsconfig)[^/]*\.json$/;
