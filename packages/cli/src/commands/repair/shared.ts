import type { CommandContext } from "../../context.js";
import { repairId as resolveRepair } from "../../resolve.js";

/** The REPAIR_ID argument of the repair subcommands. */
export const REPAIR_ID = { name: "REPAIR_ID", help: "the repair's id, or a unique prefix of it (as lists print)" } as const;

/** The repair the first positional names (full id or unique prefix). */
export async function repairArg(ctx: CommandContext, positionals: readonly string[]): Promise<string> {
  return resolveRepair(await ctx.api(), positionals[0] as string);
}
