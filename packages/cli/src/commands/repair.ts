import { readFile } from "node:fs/promises";
import { toJson } from "@bufbuild/protobuf";
import {
  ApproveResponseSchema,
  ApprovalDocumentSchema,
  CancelRepairResponseSchema,
  CreateRepairResponseSchema,
  GetRepairResponseSchema,
  GiveConsentResponseSchema,
  ListRepairsResponseSchema,
  ProposePatchResponseSchema,
  ReadRepairSourceResponseSchema,
  RecoverProcessCleanupResponseSchema,
  RepairState,
  WatchRepairResponseSchema,
  type Repair,
} from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { intFlag, need, parse, str, strs, type CommandContext } from "../context.js";
import { documentText, enumName, jobLine, repairLine, repairText } from "../format.js";
import { UsageError } from "../io.js";

const USAGE = `seraph repair create --goal GOAL_ID [--goal-revision N] --repo REPO_ID --source PATH ... --allow PATH ...
                      (--criteria TEXT | --criteria-file FILE) [--selection "npm test" | "npm run build" | "npm run build test"]
       seraph repair list [--goal GOAL_ID] | show ID | watch ID [--until STATE] | source ID PATH
       seraph repair consent ID --route ROUTE_ID [--inspection SHA256]
       seraph repair propose ID (--patch FILE | --model)
       seraph repair approve ID [--proposal PROPOSAL_ID] [--yes]
       seraph repair cancel ID [--reason TEXT] | recover ID`;

/** `seraph repair ...`: the repair journey from the command line. */
export async function repair(ctx: CommandContext, args: readonly string[]): Promise<number> {
  const [sub, ...rest] = args;
  const api = await ctx.api();
  switch (sub) {
    case "create": {
      const { values } = parse(
        rest,
        {
          goal: { type: "string" },
          "goal-revision": { type: "string" },
          repo: { type: "string" },
          source: { type: "string", multiple: true },
          allow: { type: "string", multiple: true },
          criteria: { type: "string" },
          "criteria-file": { type: "string" },
          selection: { type: "string" },
        },
        { min: 0, max: 0, names: "" },
      );
      const goalId = need(values, "goal");
      const criteriaFile = str(values, "criteria-file");
      const criteria = criteriaFile !== undefined ? await readFile(criteriaFile, "utf8") : need(values, "criteria");
      const goalRevision = intFlag(values, "goal-revision") ?? (await api.goals.getGoal({ goalId })).goal?.revision ?? 0;
      const res = await api.repairs.createRepair({
        goalId,
        goalRevision,
        repositoryId: need(values, "repo"),
        sourcePaths: strs(values, "source"),
        allowedPatchPaths: strs(values, "allow"),
        acceptanceCriteria: criteria,
        // One token a line, as the API takes it.
        selection: (str(values, "selection") ?? "npm test").split(/\s+/).filter((t) => t !== "").join("\n"),
      });
      if (ctx.json) ctx.json1(CreateRepairResponseSchema, res);
      ctx.say(repairText(res.repair!));
      return res.repair?.state === RepairState.BLOCKED ? 1 : 0;
    }
    case "list": {
      const { values } = parse(rest, { goal: { type: "string" } }, { min: 0, max: 0, names: "" });
      const res = await api.repairs.listRepairs({ goalId: str(values, "goal") ?? "" });
      if (ctx.json) ctx.json1(ListRepairsResponseSchema, res);
      for (const r of res.repairs) ctx.say(repairLine(r));
      return 0;
    }
    case "show": {
      const { positionals } = parse(rest, {}, { min: 1, max: 1, names: "REPAIR_ID" });
      const res = await api.repairs.getRepair({ repairId: positionals[0] as string });
      if (ctx.json) ctx.json1(GetRepairResponseSchema, res);
      ctx.say(repairText(res.repair!));
      return 0;
    }
    case "watch": {
      const { values, positionals } = parse(rest, { until: { type: "string" } }, { min: 1, max: 1, names: "REPAIR_ID" });
      const until = str(values, "until")?.toUpperCase();
      if (until !== undefined && !(until in RepairState)) throw new UsageError(`--until is a repair state: ${Object.keys(RepairState).filter((k) => Number.isNaN(Number(k)) && k !== "UNSPECIFIED").join(", ").toLowerCase()}`);
      let last: Repair | undefined;
      for await (const m of api.repairs.watchRepair({ repairId: positionals[0] as string })) {
        const r = m.repair!;
        if (ctx.json) ctx.json1(WatchRepairResponseSchema, m);
        else ctx.say(`${new Date().toISOString().slice(11, 19)}  ${describeChange(last, r)}`);
        last = r;
        if (until !== undefined && enumName(RepairState, r.state) === until && (r.state !== RepairState.APPROVED || r.job !== undefined)) break;
      }
      if (!last) return 1;
      return last.staleReason !== "" || last.state === RepairState.BLOCKED || last.state === RepairState.CANCELLED ? 1 : 0;
    }
    case "source": {
      const { positionals } = parse(rest, {}, { min: 2, max: 2, names: "REPAIR_ID PATH" });
      const res = await api.repairs.readRepairSource({ repairId: positionals[0] as string, path: positionals[1] as string });
      if (ctx.json) ctx.json1(ReadRepairSourceResponseSchema, res);
      else ctx.io.stdout.write(Buffer.from(res.content).toString("utf8"));
      return 0;
    }
    case "consent": {
      const { values, positionals } = parse(rest, { route: { type: "string" }, inspection: { type: "string" } }, { min: 1, max: 1, names: "REPAIR_ID" });
      const repairId = positionals[0] as string;
      const inspection = str(values, "inspection") ?? (await api.repairs.getRepair({ repairId })).repair?.inspection?.inspectionSha256 ?? "";
      const res = await api.repairs.giveConsent({ repairId, inspectionSha256: inspection, modelRouteId: need(values, "route") });
      if (ctx.json) ctx.json1(GiveConsentResponseSchema, res);
      ctx.say(`consented: the inspected source of ${repairId} (inspection ${inspection}) may be sent to model route ${res.repair?.consent?.modelRouteId}; no_learning`);
      return 0;
    }
    case "propose": {
      const { values, positionals } = parse(rest, { patch: { type: "string" }, model: { type: "boolean" } }, { min: 1, max: 1, names: "REPAIR_ID" });
      const patch = str(values, "patch");
      if ((patch === undefined) === (values["model"] !== true)) throw new UsageError("give exactly one of --patch FILE or --model");
      const route = patch !== undefined ? { case: "manualDiff" as const, value: await readFile(patch, "utf8") } : { case: "model" as const, value: true };
      const res = await api.repairs.proposePatch({ repairId: positionals[0] as string, route });
      if (ctx.json) ctx.json1(ProposePatchResponseSchema, res);
      const p = res.proposal!;
      ctx.say(`proposal ${p.id}: ${p.valid ? "valid" : "INVALID"} (${p.changedPaths.join(", ") || "no files"}), sha256 ${p.diffSha256}`);
      for (const r of p.reasons) ctx.say(`  - ${r.code}${r.subject ? ` [${r.subject}]` : ""}: ${r.message}`);
      return p.valid ? 0 : 1;
    }
    case "approve": {
      const { values, positionals } = parse(rest, { proposal: { type: "string" }, yes: { type: "boolean" } }, { min: 1, max: 1, names: "REPAIR_ID" });
      const repairId = positionals[0] as string;
      let proposalId = str(values, "proposal");
      if (proposalId === undefined) {
        const current = (await api.repairs.getRepair({ repairId })).repair!;
        proposalId = [...current.proposals].reverse().find((p) => p.valid)?.id;
        if (proposalId === undefined) throw new UsageError(`repair ${repairId} has no valid proposal to approve`);
      }
      const { document } = await api.repairs.getApprovalDocument({ repairId, proposalId });
      const doc = document!;
      if (!ctx.json) ctx.io.stdout.write(documentText(doc));
      if (values["yes"] !== true) {
        if (!ctx.io.stdinIsTTY) throw new UsageError("refusing to approve without a terminal to confirm on: review the document (seraph repair approve ID --json shows it) and pass --yes");
        const answer = await ctx.io.readLine(`Approve exactly this document (sha256 ${doc.documentSha256})? Type "yes": `);
        if (answer !== "yes") {
          ctx.say("not approved");
          return 1;
        }
      }
      const res = await api.repairs.approve({ repairId, documentSha256: doc.documentSha256 });
      if (ctx.json) {
        ctx.io.stdout.write(`${JSON.stringify({ document: toJson(ApprovalDocumentSchema, doc, { alwaysEmitImplicit: true }), ...(toJson(ApproveResponseSchema, res, { alwaysEmitImplicit: true }) as object) })}\n`);
      }
      ctx.say(`approved ${res.approval?.id} (document ${res.approval?.documentSha256})`);
      if (res.repair?.job) ctx.say(jobLine(res.repair.job));
      return 0;
    }
    case "cancel": {
      const { values, positionals } = parse(rest, { reason: { type: "string" } }, { min: 1, max: 1, names: "REPAIR_ID" });
      const res = await api.repairs.cancelRepair({ repairId: positionals[0] as string, reason: str(values, "reason") ?? "" });
      if (ctx.json) ctx.json1(CancelRepairResponseSchema, res);
      ctx.say(repairLine(res.repair!));
      return 0;
    }
    case "recover": {
      const { positionals } = parse(rest, {}, { min: 1, max: 1, names: "REPAIR_ID" });
      const res = await api.repairs.recoverProcessCleanup({ repairId: positionals[0] as string });
      if (ctx.json) ctx.json1(RecoverProcessCleanupResponseSchema, res);
      ctx.say(res.released ? "physical slot released (process cleanup only; the task outcome stays unknown)" : `slot stays held: ${res.refusalCode}: ${res.refusalMessage}`);
      if (res.repair?.job?.recovery) {
        const rc = res.repair.job.recovery;
        ctx.say(`  cleanup_receipt_verified=${rc.cleanupReceiptVerified} process_cleanup_readback_sha256=${rc.processCleanupReadbackSha256} readback_scope=${rc.readbackScope}`);
      }
      return res.released ? 0 : 1;
    }
    default:
      throw new UsageError(USAGE);
  }
}

/** One progress line: what changed since the previous update. */
function describeChange(prev: Repair | undefined, r: Repair): string {
  const parts: string[] = [];
  if (!prev || prev.state !== r.state) parts.push(`state ${enumName(RepairState, r.state)}`);
  if (r.staleReason && r.staleReason !== prev?.staleReason) parts.push(`stale: ${r.staleReason}`);
  if (prev && r.proposals.length > prev.proposals.length) {
    const p = r.proposals.at(-1)!;
    parts.push(`proposal ${p.id} ${p.valid ? "valid" : "invalid"}`);
  }
  if (r.consent && !prev?.consent) parts.push(`consent for route ${r.consent.modelRouteId}`);
  if (r.job && (!prev?.job || prev.job.state !== r.job.state || prev.job.revision !== r.job.revision)) parts.push(`job ${enumName(JobState, r.job.state)}${r.job.outcome ? ` (${r.job.outcome})` : ""}`);
  if (parts.length === 0) parts.push(`revision ${r.revision}`);
  return `${r.id.slice(0, 8)}  ${parts.join("; ")}`;
}
