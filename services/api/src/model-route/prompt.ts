import type { ChatMessage } from "./model-client.js";

/** The most source a prompt may carry (bytes of file content). */
export const MAX_PROMPT_SOURCE_BYTES = 2 * 1024 * 1024;

/** One consented source file. */
export interface PromptFile {
  readonly path: string;
  readonly content: string;
}

/**
 * The chat messages for a repair: the consented source files (nothing else from the repository),
 * the acceptance criteria and the allowed patch paths, and the rule that the answer is exactly one
 * unified diff. Nothing about the host, the runtime or other repositories is included.
 */
export function buildRepairPrompt(input: { acceptanceCriteria: string; allowedPatchPaths: readonly string[]; files: readonly PromptFile[] }): ChatMessage[] {
  const system = [
    "You repair source code. Answer with exactly one unified diff in a single ```diff fenced block and nothing else of substance.",
    "Use paths relative to the package root with a/ and b/ prefixes (--- a/src/x.js, +++ b/src/x.js) and exact hunk headers.",
    `Change only files under these allowed patch paths: ${input.allowedPatchPaths.join(", ")}.`,
    "Never change package.json, lockfiles, tsconfig or other configuration, dependencies, or node_modules. Do not rename files.",
  ].join("\n");
  const parts = [`Acceptance criteria:\n${input.acceptanceCriteria}`, `Allowed patch paths:\n${input.allowedPatchPaths.map((p) => `- ${p}`).join("\n")}`, "Source files:"];
  for (const f of input.files) parts.push(`=== ${f.path} ===\n${f.content}${f.content.endsWith("\n") ? "" : "\n"}=== end ${f.path} ===`);
  return [
    { role: "system", content: system },
    { role: "user", content: parts.join("\n\n") },
  ];
}
