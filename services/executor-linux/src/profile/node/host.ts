import { NODE24_NPM_PROFILE } from "@seraph/profiles/node24-npm";
import type { HostProfile } from "../host-profile.js";
import { buildJobEnv } from "../job-env.js";
import { checkRuntime, resolvePinnedNode } from "../runtime.js";
import { stagedArgv } from "../staged-argv.js";
import { PROFILE_NAME } from "./node-constants.js";
import { inspectNodeSnapshot } from "./inspect-node.js";

/** repo-node24-npm-v1 on this host. */
export const NODE_HOST_PROFILE: HostProfile = {
  rules: NODE24_NPM_PROFILE,
  inspect: inspectNodeSnapshot,
  restageOptions: (inspection, runtime, digests) => ({
    profile: PROFILE_NAME,
    repositoryPath: inspection.repositoryPath,
    selection: inspection.selection,
    nodePath: inspection.nodePath,
    sourcePaths: inspection.sourcePaths,
    ...(inspection.limits ? { limits: inspection.limits } : {}),
    ...(inspection.buildOutputDir ? { buildOutputDir: inspection.buildOutputDir } : {}),
    runtime: runtime ?? { expectedVersion: inspection.nodeVersion || undefined },
    digests,
  }),
  sharesDependencies: true,
  // Node's argv names package files absolutely.
  stagedArgv: (step, inspection, packageDir) => stagedArgv(step, inspection.nodePath, packageDir),
  jobEnv: buildJobEnv,
  requestOptions: (req) => ({
    profile: PROFILE_NAME,
    repositoryPath: req.repositoryPath,
    selection: req.selection,
    nodePath: req.runtimePath,
    sourcePaths: req.sourcePaths,
    limits: req.limits,
    runtime: req.runtime,
    digests: req.digests,
  }),
  defaultRuntimePath: async () => (await resolvePinnedNode()) || "",
  checkRuntime,
  cliFlags: ["node", "node-sha256", "build-output-dir"],
  cliOptions: (v) => ({
    ...(v["node"] !== undefined ? { nodePath: v["node"] } : {}),
    ...(v["node-sha256"] !== undefined ? { runtime: { expectedSha256: v["node-sha256"] } } : {}),
    ...(v["build-output-dir"] !== undefined ? { buildOutputDir: v["build-output-dir"] } : {}),
  }),
  describe: (i) => [
    ...(i.nodePath ? [`  runtime: ${i.nodePath} ${i.nodeVersion || "(version unknown)"}`] : []),
    ...(i.typescriptVersion ? [`  typescript: ${i.typescriptVersion}`] : []),
    ...(i.buildOutputDir ? [`  build output: ${i.buildOutputDir}/`] : []),
  ],
};
