import { CreatePrincipalResponseSchema, CreateTokenResponseSchema, ListTokensResponseSchema, RevokeTokenResponseSchema, WhoAmIResponseSchema } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { connectApi } from "../client.js";
import { readLogin, removeLogin, resolveApiUrl, writeLogin } from "../config.js";
import { parse, str, type CommandContext } from "../context.js";
import { tokenLine } from "../format.js";
import { UsageError } from "../io.js";

/** `seraph login [--token T]`: verifies the token against the API, then stores it (0600) with the API URL. */
export async function login(ctx: CommandContext, args: readonly string[]): Promise<number> {
  const { values } = parse(args, { token: { type: "string" } }, { min: 0, max: 0, names: "" });
  const stored = await readLogin(ctx.io);
  const url = resolveApiUrl(ctx.io, ctx.apiFlag, stored);
  let token = str(values, "token") || ctx.io.env["SERAPH_TOKEN"] || "";
  if (token === "") token = await ctx.io.readLine("API token: ");
  if (token === "") throw new UsageError("no token given (--token, SERAPH_TOKEN or stdin)");
  const res = await ctx.track(connectApi(url, token)).principals.whoAmI({});
  const file = await writeLogin(ctx.io, { api: url, token });
  if (ctx.json) ctx.json1(WhoAmIResponseSchema, res);
  ctx.say(`logged in to ${url} as ${res.principal?.name} (${res.principal?.id}); token stored in ${file}`);
  return 0;
}

/** `seraph logout`: forgets the stored token. */
export async function logout(ctx: CommandContext, args: readonly string[]): Promise<number> {
  parse(args, {}, { min: 0, max: 0, names: "" });
  await removeLogin(ctx.io);
  ctx.say("logged out");
  return 0;
}

/** `seraph whoami`. */
export async function whoami(ctx: CommandContext, args: readonly string[]): Promise<number> {
  parse(args, {}, { min: 0, max: 0, names: "" });
  const res = await (await ctx.api()).principals.whoAmI({});
  if (ctx.json) ctx.json1(WhoAmIResponseSchema, res);
  const p = res.principal;
  ctx.say(`${p?.name} ${p?.id}${p && p.rootId !== p.id ? ` (operator root ${p.rootId})` : " (operator root)"}`);
  return 0;
}

/** `seraph token create NAME | list | revoke ID`. */
export async function token(ctx: CommandContext, args: readonly string[]): Promise<number> {
  const [sub, ...rest] = args;
  const api = await ctx.api();
  switch (sub) {
    case "create": {
      const { positionals } = parse(rest, {}, { min: 1, max: 1, names: "NAME" });
      const res = await api.principals.createToken({ name: positionals[0] as string });
      if (ctx.json) ctx.json1(CreateTokenResponseSchema, res);
      ctx.say(`${tokenLine(res.token!)}\nsecret (shown once, store it now): ${res.secret}`);
      return 0;
    }
    case "list": {
      parse(rest, {}, { min: 0, max: 0, names: "" });
      const res = await api.principals.listTokens({});
      if (ctx.json) ctx.json1(ListTokensResponseSchema, res);
      for (const t of res.tokens) ctx.say(tokenLine(t));
      return 0;
    }
    case "revoke": {
      const { positionals } = parse(rest, {}, { min: 1, max: 1, names: "TOKEN_ID" });
      const res = await api.principals.revokeToken({ tokenId: positionals[0] as string });
      if (ctx.json) ctx.json1(RevokeTokenResponseSchema, res);
      ctx.say(`revoked ${tokenLine(res.token!)}`);
      return 0;
    }
    default:
      throw new UsageError("seraph token create NAME | list | revoke TOKEN_ID");
  }
}

/** `seraph principal create NAME [--new-root]`: a new principal and its first token. */
export async function principal(ctx: CommandContext, args: readonly string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub !== "create") throw new UsageError("seraph principal create NAME [--new-root]");
  const { values, positionals } = parse(rest, { "new-root": { type: "boolean" } }, { min: 1, max: 1, names: "NAME" });
  const res = await (await ctx.api()).principals.createPrincipal({ name: positionals[0] as string, newRoot: values["new-root"] === true });
  if (ctx.json) ctx.json1(CreatePrincipalResponseSchema, res);
  ctx.say(`principal ${res.principal?.name} ${res.principal?.id} (root ${res.principal?.rootId})\nsecret (shown once): ${res.secret}`);
  return 0;
}

