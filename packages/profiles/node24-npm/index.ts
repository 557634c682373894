// The repo-node24-npm-v1 profile's pure rules: the selection grammar, the package.json script
// grammar, npm lockfile reading and the tsconfig extends chain. Host I/O (inspection reads,
// staging, running) stays in @seraph/executor-linux/profile.
export { parseSelection, selectionScripts, selectionText, SELECTION_TOKENS } from "./selection.js";
export { resolveScript, TSC_ENTRY } from "./script-grammar.js";
export type { PathKind, RejectedScript, ResolvedScript, ScriptContext, ScriptForm } from "./script-grammar.js";
export { FOREIGN_LOCKFILES, NPM_LOCKFILES, parseNpmLock } from "./lockfile.js";
export type { NpmLock } from "./lockfile.js";
export { inspectTsconfigChain, parseTsconfigText } from "./tsconfig-chain.js";
export type { TsconfigChain, TsconfigReader } from "./tsconfig-chain.js";
export { NODE_CLEANUP_CLAIM } from "./approval.js";
export { NODE24_NPM_PROFILE, NODE_PROFILE } from "./profile.js";
