import { dirname } from "node:path";
import { supervisorSourceSha256 } from "../supervisor/source-hash.js";

/**
 * The source hash the per-job supervisor started from `entry` (its compiled
 * `<dist>/supervisor/main.js`) writes into its owner marker: the same supervisorSourceSha256
 * over `<dist>`'s native/ and supervisor/ modules. Empty when the compiled tree is unreadable
 * (the supervisor is not built): an approval of an empty hash can never start a supervisor.
 */
export function supervisorSourceOf(entry: string): string {
  try {
    return supervisorSourceSha256(dirname(dirname(entry)));
  } catch {
    return "";
  }
}
