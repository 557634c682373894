import { clone, create, ScalarType } from "@bufbuild/protobuf";
import {
  CheckPrerequisitesResponseSchema,
  GetSandboxSettingsResponseSchema,
  ModelRouteSchema,
  SandboxBackend,
  SandboxSettingsSchema,
  UpdateSandboxSettingsResponseSchema,
} from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { LimitsSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { CommandGroup } from "../command-spec.js";
import { intFlag, str, strs } from "../context.js";
import { prerequisitesText, settingsText } from "../format.js";
import { UsageError } from "../io.js";

/** `--limit` names (the Limits message's field names) → the message's property names. */
const LIMIT_FIELDS: Record<string, string> = Object.fromEntries(LimitsSchema.fields.map((f) => [f.name, f.localName]));
/** Limits fields that are 32-bit (numbers) rather than 64-bit (bigints) in protobuf-es. */
const UINT32 = new Set(LimitsSchema.fields.filter((f) => f.fieldKind === "scalar" && f.scalar === ScalarType.UINT32).map((f) => f.localName));

/** `seraph settings show | set ... | check [--node ID]`. */
export const settings: CommandGroup = {
  name: "settings",
  summary: "Show, change and check the sandbox settings (operator root only for set).",
  subcommands: {
    show: {
      spec: { name: "settings show", summary: "Print the settings (model route keys are never shown, only whether one is set) and the profiles." },
      async run(ctx) {
        const res = await (await ctx.api()).settings.getSandboxSettings({});
        if (ctx.json) ctx.json1(GetSandboxSettingsResponseSchema, res);
        ctx.say(settingsText(res.settings!, res.profiles));
        return 0;
      },
    },
    set: {
      spec: {
        name: "settings set",
        summary: "Change the settings: reads the current ones, applies the flags, saves with a compare-and-set on the revision. Starts nothing and grants nothing.",
        flags: {
          backend: { type: "string", value: "local|docker", help: "the sandbox backend (docker is shown but blocked for Node)", defaultText: "unchanged" },
          profile: { type: "string", value: "NAME", help: "the execution profile: repo-python3-v1 (the default of a new instance) or repo-node24-npm-v1; never falls back to the other", defaultText: "unchanged" },
          runtime: { type: "string", value: "ABS_PATH", help: "absolute path of the profile's runtime: a CPython 3.11 interpreter for repo-python3-v1, a Node 24 executable for repo-node24-npm-v1", defaultText: "unchanged" },
          "runtime-sha256": { type: "string", value: "HEX", help: "require the runtime executable to have this SHA-256 (empty: any hash; the inspected hash is bound by every approval either way)", defaultText: "unchanged" },
          enable: { type: "boolean", help: "enable execution" },
          disable: { type: "boolean", help: "disable execution" },
          root: { type: "string", value: "DIR", multiple: true, help: "add an absolute directory under which repositories may be registered" },
          "clear-roots": { type: "boolean", help: "remove every root first (then --root adds)" },
          ttl: { type: "int", value: "SECONDS", help: "how long an approval stays valid", defaultText: "unchanged" },
          limit: { type: "string", value: "NAME=VALUE", multiple: true, help: `set a profile limit; NAME is one of ${Object.keys(LIMIT_FIELDS).join(", ")}` },
          revision: { type: "int", value: "N", help: "the settings revision you last saw; a newer one is ABORTED", defaultText: "the current revision" },
          "model-route": { type: "string", value: "ID", help: "add or change the model route with this id (consent names it)" },
          "model-base-url": { type: "string", value: "URL", help: "the route's OpenAI-compatible base URL (needed for a new route)" },
          model: { type: "string", value: "NAME", help: "the route's model name (needed for a new route)" },
          "model-key-env": { type: "string", value: "VAR", help: "read the route's API key from this environment variable (the key never appears on the command line)" },
          "model-timeout-ms": { type: "int", value: "N", help: "the route's request timeout in milliseconds (at most 600000)", defaultText: "unchanged" },
          "model-attempts": { type: "int", value: "N", help: "the route's maximum attempts (at most 5)", defaultText: "unchanged" },
          "remove-model-route": { type: "string", value: "ID", multiple: true, help: "remove the model route with this id" },
          "public-model-routes-only": { type: "boolean", help: "contact model routes only at public addresses (refuse loopback, private, link-local, ... hosts)" },
          "allow-private-model-routes": { type: "boolean", help: "allow model routes at any address again (the default)" },
        },
        oneOf: [
          { flags: ["enable", "disable"], required: false },
          { flags: ["public-model-routes-only", "allow-private-model-routes"], required: false },
        ],
        notes: ["--model-base-url, --model, --model-key-env, --model-timeout-ms and --model-attempts apply to the route named by --model-route."],
      },
      async run(ctx, { values }) {
        const api = await ctx.api();
        const current = (await api.settings.getSandboxSettings({})).settings!;
        const next = clone(SandboxSettingsSchema, current);
        const backend = str(values, "backend");
        if (backend !== undefined) {
          if (backend === "local") next.backend = SandboxBackend.LOCAL;
          else if (backend === "docker") next.backend = SandboxBackend.DOCKER;
          else throw new UsageError("--backend is local or docker");
        }
        const profile = str(values, "profile");
        if (profile !== undefined) next.profile = profile;
        const runtime = str(values, "runtime");
        if (runtime !== undefined) next.runtimePath = runtime;
        const runtimeSha256 = str(values, "runtime-sha256");
        if (runtimeSha256 !== undefined) next.runtimeSha256 = runtimeSha256;
        if (values["public-model-routes-only"] === true) next.modelRoutesPublicOnly = true;
        if (values["allow-private-model-routes"] === true) next.modelRoutesPublicOnly = false;
        if (values["enable"] === true) next.enabled = true;
        if (values["disable"] === true) next.enabled = false;
        if (values["clear-roots"] === true) next.repositoryRoots = [];
        for (const r of strs(values, "root")) if (!next.repositoryRoots.includes(r)) next.repositoryRoots.push(r);
        const ttl = intFlag(values, "ttl");
        if (ttl !== undefined) next.approvalTtlSeconds = ttl;
        const limits = clone(LimitsSchema, next.limits ?? create(LimitsSchema));
        for (const item of strs(values, "limit")) {
          const [name, raw] = item.split("=", 2);
          const field = LIMIT_FIELDS[name ?? ""];
          if (!field || raw === undefined || !/^\d+$/.test(raw)) throw new UsageError(`--limit NAME=VALUE with NAME one of ${Object.keys(LIMIT_FIELDS).join(", ")}`);
          (limits as unknown as Record<string, number | bigint>)[field] = UINT32.has(field) ? Number(raw) : BigInt(raw);
        }
        next.limits = limits;
        for (const id of strs(values, "remove-model-route")) next.modelRoutes = next.modelRoutes.filter((r) => r.id !== id);
        const routeId = str(values, "model-route");
        if (routeId !== undefined) {
          const existing = next.modelRoutes.find((r) => r.id === routeId);
          const route = existing ?? create(ModelRouteSchema, { id: routeId });
          const baseUrl = str(values, "model-base-url");
          const model = str(values, "model");
          if (baseUrl !== undefined) route.baseUrl = baseUrl;
          if (model !== undefined) route.model = model;
          if (!route.baseUrl || !route.model) throw new UsageError("a new model route needs --model-base-url and --model");
          const keyEnv = str(values, "model-key-env");
          if (keyEnv !== undefined) {
            const key = ctx.io.env[keyEnv];
            if (!key) throw new UsageError(`--model-key-env ${keyEnv}: that environment variable is empty`);
            route.apiKey = key;
          }
          const timeout = intFlag(values, "model-timeout-ms");
          if (timeout !== undefined) route.timeoutMs = timeout;
          const attempts = intFlag(values, "model-attempts");
          if (attempts !== undefined) route.maxAttempts = attempts;
          if (!existing) next.modelRoutes.push(route);
        } else if (str(values, "model-base-url") !== undefined || str(values, "model") !== undefined || str(values, "model-key-env") !== undefined) {
          throw new UsageError("--model-base-url, --model and --model-key-env need --model-route ID");
        }
        const expected = intFlag(values, "revision");
        const res = await api.settings.updateSandboxSettings({ settings: next, expectedRevision: expected === undefined ? current.revision : BigInt(expected) });
        if (ctx.json) ctx.json1(UpdateSandboxSettingsResponseSchema, res);
        ctx.say(settingsText(res.settings!, []));
        ctx.say("Saved. Saving settings starts nothing and grants nothing; every execution needs its own exact approval.");
        return 0;
      },
    },
    check: {
      spec: {
        name: "settings check",
        summary: "Check each executor node's prerequisites for the saved settings (runtime, roots, Linux facilities; as root, whether every slot's job user can execute the runtime).",
        flags: { node: { type: "string", value: "NODE_ID", help: "check only this node", defaultText: "every registered node" } },
        notes: ["Exit status 0 when at least one node is checked and every checked node is ready, else 1."],
      },
      async run(ctx, { values }) {
        const res = await (await ctx.api()).settings.checkPrerequisites({ nodeId: str(values, "node") ?? "" });
        if (ctx.json) ctx.json1(CheckPrerequisitesResponseSchema, res);
        ctx.say(prerequisitesText(res.reports));
        return res.reports.length > 0 && res.reports.every((r) => r.ok) ? 0 : 1;
      },
    },
  },
};
