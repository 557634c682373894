import type { Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";

/** The sentence the approval document and the results show with the tests a patch adds or changes. */
export const UNTRUSTED_TEST_NOTE =
  "Tests added or changed by this patch are untrusted evidence: they were written with the fix, so passing them is never proof that the tests are adequate.";

const TEST_FILE = /\.(test|spec)\.[cm]?[jt]sx?$/;
const TEST_DIR = /(^|\/)(test|tests|__tests__)\//;

/**
 * The repository-relative paths among `changedPaths` (what the proposal adds, changes or deletes)
 * that are tests: a path the test step runs (its exact argv paths), a `*.test.*` / `*.spec.*`
 * file, or a file under a `test/`, `tests/` or `__tests__/` directory. Sorted, unique.
 */
export function patchChangedTests(changedPaths: readonly string[], inspection: Inspection | undefined): string[] {
  const runs = new Set<string>();
  for (const step of inspection?.steps ?? []) {
    if (step.name !== "test") continue;
    for (const token of step.displayArgv.slice(1)) if (!token.startsWith("-")) runs.add(token);
  }
  const out = new Set<string>();
  for (const p of changedPaths) if (runs.has(p) || TEST_FILE.test(p) || TEST_DIR.test(p)) out.add(p);
  return [...out].sort();
}
