import { clone, create } from "@bufbuild/protobuf";
import {
  CheckPrerequisitesResponseSchema,
  GetSandboxSettingsResponseSchema,
  ModelRouteSchema,
  SandboxBackend,
  SandboxSettingsSchema,
  UpdateSandboxSettingsResponseSchema,
} from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { LimitsSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { intFlag, parse, str, strs, type CommandContext } from "../context.js";
import { prerequisitesText, settingsText } from "../format.js";
import { UsageError } from "../io.js";

const LIMIT_FIELDS: Record<string, string> = {
  snapshot_bytes: "snapshotBytes",
  source_files: "sourceFiles",
  source_file_bytes: "sourceFileBytes",
  dependency_files: "dependencyFiles",
  dependency_file_bytes: "dependencyFileBytes",
  patch_bytes: "patchBytes",
  output_bytes: "outputBytes",
  stream_bytes: "streamBytes",
  wall_ms: "wallMs",
};
const UINT32 = new Set(["sourceFiles", "dependencyFiles", "wallMs"]);

const SET_USAGE = `seraph settings set [--backend local] [--runtime ABS_PATH] [--enable | --disable] [--root DIR ...] [--clear-roots]
    [--ttl SECONDS] [--limit NAME=VALUE ...] [--revision N]
    [--model-route ID --model-base-url URL --model NAME [--model-key-env VAR] [--model-timeout-ms N] [--model-attempts N]]
    [--remove-model-route ID]`;

/** `seraph settings show | set ... | check [--node ID]`. */
export async function settings(ctx: CommandContext, args: readonly string[]): Promise<number> {
  const [sub, ...rest] = args;
  const api = await ctx.api();
  switch (sub) {
    case "show": {
      parse(rest, {}, { min: 0, max: 0, names: "" });
      const res = await api.settings.getSandboxSettings({});
      if (ctx.json) ctx.json1(GetSandboxSettingsResponseSchema, res);
      ctx.say(settingsText(res.settings!, res.profiles));
      return 0;
    }
    case "set": {
      const { values } = parse(
        rest,
        {
          backend: { type: "string" },
          runtime: { type: "string" },
          enable: { type: "boolean" },
          disable: { type: "boolean" },
          root: { type: "string", multiple: true },
          "clear-roots": { type: "boolean" },
          ttl: { type: "string" },
          limit: { type: "string", multiple: true },
          revision: { type: "string" },
          "model-route": { type: "string" },
          "model-base-url": { type: "string" },
          model: { type: "string" },
          "model-key-env": { type: "string" },
          "model-timeout-ms": { type: "string" },
          "model-attempts": { type: "string" },
          "remove-model-route": { type: "string", multiple: true },
        },
        { min: 0, max: 0, names: "" },
      );
      const current = (await api.settings.getSandboxSettings({})).settings!;
      const next = clone(SandboxSettingsSchema, current);
      const backend = str(values, "backend");
      if (backend !== undefined) {
        if (backend === "local") next.backend = SandboxBackend.LOCAL;
        else if (backend === "docker") next.backend = SandboxBackend.DOCKER;
        else throw new UsageError("--backend is local or docker");
      }
      const runtime = str(values, "runtime");
      if (runtime !== undefined) next.runtimePath = runtime;
      if (values["enable"] === true && values["disable"] === true) throw new UsageError("--enable and --disable exclude each other");
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
    }
    case "check": {
      const { values } = parse(rest, { node: { type: "string" } }, { min: 0, max: 0, names: "" });
      const res = await api.settings.checkPrerequisites({ nodeId: str(values, "node") ?? "" });
      if (ctx.json) ctx.json1(CheckPrerequisitesResponseSchema, res);
      ctx.say(prerequisitesText(res.reports));
      return res.reports.length > 0 && res.reports.every((r) => r.ok) ? 0 : 1;
    }
    default:
      throw new UsageError(`seraph settings show | check [--node NODE_ID] | set ...\n  ${SET_USAGE}`);
  }
}
