import { resolve } from "node:path";
import { ListRepositoriesResponseSchema, RegisterRepositoryResponseSchema } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { CommandGroup } from "../command-spec.js";
import { str } from "../context.js";
import { repositoryLine } from "../format.js";

/** `seraph repo add PATH [--name N] [--node ID] | list`. */
export const repo: CommandGroup = {
  name: "repo",
  summary: "Register repositories that live on an executor node.",
  subcommands: {
    add: {
      spec: {
        name: "repo add",
        summary: "Register a repository directory on an executor node (it must lie under one of the node's repository roots, and under one of the settings' roots when they name any; seraph settings check lists both).",
        args: [{ name: "PATH", help: "the repository's directory on the node; a relative path is resolved against the current directory" }],
        flags: {
          name: { type: "string", value: "NAME", help: "a display name", defaultText: "the directory's base name" },
          node: { type: "string", value: "NODE_ID", help: "the executor node hosting it", defaultText: "the only registered node (required when there are several)" },
        },
      },
      async run(ctx, { values, positionals }) {
        // The path is on the executor node; a relative path is resolved here for convenience (embedded mode).
        const raw = positionals[0] as string;
        const path = raw.startsWith("/") ? raw : resolve(raw);
        const res = await (await ctx.api()).repositories.registerRepository({ path, name: str(values, "name") ?? "", nodeId: str(values, "node") ?? "" });
        if (ctx.json) ctx.json1(RegisterRepositoryResponseSchema, res);
        ctx.say(repositoryLine(res.repository!));
        return 0;
      },
    },
    list: {
      spec: { name: "repo list", summary: "List registered repositories (id, node, path, name)." },
      async run(ctx) {
        const res = await (await ctx.api()).repositories.listRepositories({});
        if (ctx.json) ctx.json1(ListRepositoriesResponseSchema, res);
        if (res.repositories.length === 0) ctx.say("no repositories (seraph repo add PATH registers one)");
        for (const r of res.repositories) ctx.say(repositoryLine(r));
        return 0;
      },
    },
  },
};
