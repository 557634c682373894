import { CreatePrincipalResponseSchema, CreateTokenResponseSchema, ListTokensResponseSchema, RevokeTokenResponseSchema, WhoAmIResponseSchema } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { connectApi } from "../client.js";
import type { Command, CommandGroup } from "../command-spec.js";
import { readLogin, removeLogin, resolveApiUrl, writeLogin } from "../config.js";
import { str } from "../context.js";
import { tokenLine } from "../format.js";
import { UsageError } from "../io.js";
import { tokenId } from "../resolve.js";

/** `seraph login [--token T]`: verifies the token against the API, then stores it (0600) with the API URL. */
export const login: Command = {
  spec: {
    name: "login",
    summary: "Verify a token against the API (WhoAmI), then store it with the API URL in login.json (directory 0700, file 0600).",
    flags: {
      token: { type: "string", value: "TOKEN", help: "the bearer token to store", defaultText: "$SERAPH_TOKEN, else one line read from stdin" },
    },
    notes: ["The file is $SERAPH_CONFIG_DIR/login.json, else $XDG_CONFIG_HOME/seraph/login.json, else ~/.config/seraph/login.json."],
  },
  async run(ctx, { values }) {
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
  },
};

/** `seraph logout`: forgets the stored token. */
export const logout: Command = {
  spec: { name: "logout", summary: "Remove the stored login (login.json); tokens stay valid until revoked." },
  async run(ctx) {
    await removeLogin(ctx.io);
    ctx.say("logged out");
    return 0;
  },
};

/** `seraph whoami`. */
export const whoami: Command = {
  spec: { name: "whoami", summary: "Print the principal the token belongs to and its operator root." },
  async run(ctx) {
    const res = await (await ctx.api()).principals.whoAmI({});
    if (ctx.json) ctx.json1(WhoAmIResponseSchema, res);
    const p = res.principal;
    ctx.say(`${p?.name} ${p?.id}${p && p.rootId !== p.id ? ` (operator root ${p.rootId})` : " (operator root)"}`);
    return 0;
  },
};

/** `seraph token create NAME | list | revoke TOKEN_ID`. */
export const token: CommandGroup = {
  name: "token",
  summary: "Manage the API tokens of the logged-in principal.",
  subcommands: {
    create: {
      spec: {
        name: "token create",
        summary: "Create a token for yourself; its secret is printed once.",
        args: [{ name: "NAME", help: "a name to recognise the token by" }],
      },
      async run(ctx, { positionals }) {
        const res = await (await ctx.api()).principals.createToken({ name: positionals[0] as string });
        if (ctx.json) ctx.json1(CreateTokenResponseSchema, res);
        ctx.say(`${tokenLine(res.token!)}\nsecret (shown once, store it now): ${res.secret}`);
        return 0;
      },
    },
    list: {
      spec: { name: "token list", summary: "List your tokens (id, prefix, name, created, revoked)." },
      async run(ctx) {
        const res = await (await ctx.api()).principals.listTokens({});
        if (ctx.json) ctx.json1(ListTokensResponseSchema, res);
        if (res.tokens.length === 0) ctx.say("no tokens");
        for (const t of res.tokens) ctx.say(tokenLine(t));
        return 0;
      },
    },
    revoke: {
      spec: {
        name: "token revoke",
        summary: "Revoke a token; requests with it are UNAUTHENTICATED from then on.",
        args: [{ name: "TOKEN_ID", help: "the token's id (from `seraph token list`), or a unique prefix of it" }],
      },
      async run(ctx, { positionals }) {
        const api = await ctx.api();
        const res = await api.principals.revokeToken({ tokenId: await tokenId(api, positionals[0] as string) });
        if (ctx.json) ctx.json1(RevokeTokenResponseSchema, res);
        ctx.say(`revoked ${tokenLine(res.token!)}`);
        return 0;
      },
    },
  },
};

/** `seraph principal create NAME [--new-root]`: a new principal and its first token. */
export const principal: CommandGroup = {
  name: "principal",
  summary: "Create principals (users) and their first token.",
  subcommands: {
    create: {
      spec: {
        name: "principal create",
        summary: "Create a principal and its first token; the secret is printed once.",
        args: [{ name: "NAME", help: "the principal's name" }],
        flags: {
          "new-root": { type: "boolean", help: "make it an operator root of its own (instance operator only) instead of a member of your root" },
        },
      },
      async run(ctx, { values, positionals }) {
        const res = await (await ctx.api()).principals.createPrincipal({ name: positionals[0] as string, newRoot: values["new-root"] === true });
        if (ctx.json) ctx.json1(CreatePrincipalResponseSchema, res);
        ctx.say(`principal ${res.principal?.name} ${res.principal?.id} (root ${res.principal?.rootId})\nsecret (shown once): ${res.secret}`);
        return 0;
      },
    },
  },
};
