import { readFile } from "node:fs/promises";
import { GiveConsentResponseSchema, ProposePatchResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Command } from "../../command-spec.js";
import { need, str } from "../../context.js";
import { REPAIR_ID, repairArg } from "./shared.js";

/** `seraph repair consent`: consent to sending the inspected source to a model route. */
export const consent: Command = {
  spec: {
    name: "repair consent",
    summary: "Consent to sending the inspected source to a model route (no_learning); needed before `propose --model`.",
    args: [REPAIR_ID],
    flags: {
      route: { type: "string", value: "ROUTE_ID", help: "the model route (from `seraph settings show`)", required: true },
      inspection: { type: "string", value: "SHA256", help: "the inspection you read; it must be the repair's current one", defaultText: "the repair's current inspection" },
    },
  },
  async run(ctx, { values, positionals }) {
    const api = await ctx.api();
    const repairId = await repairArg(ctx, positionals);
    const inspection = str(values, "inspection") ?? (await api.repairs.getRepair({ repairId })).repair?.inspection?.inspectionSha256 ?? "";
    const res = await api.repairs.giveConsent({ repairId, inspectionSha256: inspection, modelRouteId: need(values, "route") });
    if (ctx.json) ctx.json1(GiveConsentResponseSchema, res);
    ctx.say(`consented: the inspected source of ${repairId} (inspection ${inspection}) may be sent to model route ${res.repair?.consent?.modelRouteId}; no_learning`);
    return 0;
  },
};

/** `seraph repair propose`: a patch from a file or from the consented model route. */
export const propose: Command = {
  spec: {
    name: "repair propose",
    summary: "Propose a patch, from a unified diff file or from the consented model route; it is validated against the allowed paths.",
    args: [REPAIR_ID],
    flags: {
      patch: { type: "string", value: "FILE", help: "a unified diff to propose (manual route)" },
      model: { type: "boolean", help: "ask the consented model route for the patch" },
    },
    oneOf: [{ flags: ["patch", "model"], required: true }],
    notes: [
      "On a repair whose latest attempt's run ended (any outcome; an UNKNOWN one only after `seraph repair recover`), a valid patch opens the next attempt, which needs its own fresh exact approval; `seraph repair attempts` lists them.",
      "Exit status 1 when the proposal is invalid (the reasons are printed) or refused (while the latest attempt's job is queued or running, or its slot is held).",
    ],
  },
  async run(ctx, { values, positionals }) {
    const patch = str(values, "patch");
    const route = patch !== undefined ? { case: "manualDiff" as const, value: await readFile(patch, "utf8") } : { case: "model" as const, value: true };
    const repairId = await repairArg(ctx, positionals);
    const res = await (await ctx.api()).repairs.proposePatch({ repairId, route });
    if (ctx.json) ctx.json1(ProposePatchResponseSchema, res);
    const p = res.proposal!;
    ctx.say(`proposal ${p.id}: ${p.valid ? "valid" : "INVALID"} (${p.changedPaths.join(", ") || "no files"}), sha256 ${p.diffSha256}, attempt ${p.attempt}`);
    const earlier = res.repair?.attempts.filter((a) => a.number < p.attempt) ?? [];
    if (p.valid && earlier.length > 0 && res.repair?.attempts.at(-1)?.proposalIds.length === 1) {
      ctx.say(`attempt ${p.attempt} opened (after ${earlier.map((a) => `#${a.number} ${a.jobOutcome || "?"}`).join(", ")}); it needs its own fresh exact approval`);
    }
    for (const r of p.reasons) ctx.say(`  - ${r.code}${r.subject ? ` [${r.subject}]` : ""}: ${r.message}`);
    if (p.valid) ctx.say(`next: seraph repair approve ${repairId.slice(0, 8)}   (prints the exact document and asks)`);
    return p.valid ? 0 : 1;
  },
};
