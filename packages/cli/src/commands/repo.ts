import { resolve } from "node:path";
import { ListRepositoriesResponseSchema, RegisterRepositoryResponseSchema } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { parse, str, type CommandContext } from "../context.js";
import { repositoryLine } from "../format.js";
import { UsageError } from "../io.js";

/** `seraph repo add PATH [--name N] [--node ID] | list`. */
export async function repo(ctx: CommandContext, args: readonly string[]): Promise<number> {
  const [sub, ...rest] = args;
  const api = await ctx.api();
  switch (sub) {
    case "add": {
      const { values, positionals } = parse(rest, { name: { type: "string" }, node: { type: "string" } }, { min: 1, max: 1, names: "PATH" });
      // The path is on the executor node; a relative path is resolved here for convenience (embedded mode).
      const raw = positionals[0] as string;
      const path = raw.startsWith("/") ? raw : resolve(raw);
      const res = await api.repositories.registerRepository({ path, name: str(values, "name") ?? "", nodeId: str(values, "node") ?? "" });
      if (ctx.json) ctx.json1(RegisterRepositoryResponseSchema, res);
      ctx.say(repositoryLine(res.repository!));
      return 0;
    }
    case "list": {
      parse(rest, {}, { min: 0, max: 0, names: "" });
      const res = await api.repositories.listRepositories({});
      if (ctx.json) ctx.json1(ListRepositoriesResponseSchema, res);
      for (const r of res.repositories) ctx.say(repositoryLine(r));
      return 0;
    }
    default:
      throw new UsageError("seraph repo add PATH [--name N] [--node NODE_ID] | list");
  }
}
