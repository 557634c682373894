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
import type { CommandGroup } from "../command-spec.js";
import { intFlag, need, str, strs } from "../context.js";
import { documentText, enumName, jobLine, repairLine, repairText } from "../format.js";
import { UsageError } from "../io.js";

const REPAIR_ID = { name: "REPAIR_ID", help: "the repair's id" } as const;
const REPAIR_STATES = Object.keys(RepairState).filter((k) => Number.isNaN(Number(k)) && k !== "UNSPECIFIED").map((k) => k.toLowerCase());

/** `seraph repair ...`: the repair journey from the command line. */
export const repair: CommandGroup = {
  name: "repair",
  summary: "The repair journey: create (inspect), read the source, consent, propose a patch, approve the exact execution, watch, cancel, recover.",
  subcommands: {
    create: {
      spec: {
        name: "repair create",
        summary: "Open a repair of a repository for a goal; the executor node inspects it read-only and the repair is INSPECTED or BLOCKED.",
        flags: {
          goal: { type: "string", value: "GOAL_ID", help: "the goal the repair is for", required: true },
          "goal-revision": { type: "int", value: "N", help: "the goal revision the repair is for; it must be the current one", defaultText: "the goal's current revision" },
          repo: { type: "string", value: "REPO_ID", help: "the registered repository (from `seraph repo add`)", required: true },
          source: { type: "string", value: "PATH", multiple: true, required: true, help: "a repository-relative path whose files are inspected and may be read and sent" },
          allow: { type: "string", value: "PATH", multiple: true, required: true, help: "a repository-relative path a patch may change" },
          criteria: { type: "string", value: "TEXT", help: "the acceptance criteria, in words" },
          "criteria-file": { type: "string", value: "FILE", help: "read the acceptance criteria from FILE" },
          selection: { type: "string", value: "STEPS", default: "npm test", help: 'the steps to run: "npm test", "npm run build" or "npm run build test"' },
        },
        oneOf: [{ flags: ["criteria", "criteria-file"], required: true }],
        notes: ["Exit status 1 when the inspection blocks the repair (the reasons are printed)."],
      },
      async run(ctx, { values }) {
        const api = await ctx.api();
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
          selection: (str(values, "selection") ?? "").split(/\s+/).filter((t) => t !== "").join("\n"),
        });
        if (ctx.json) ctx.json1(CreateRepairResponseSchema, res);
        ctx.say(repairText(res.repair!));
        return res.repair?.state === RepairState.BLOCKED ? 1 : 0;
      },
    },
    list: {
      spec: {
        name: "repair list",
        summary: "List your repairs, one line each (id, state, revision, job).",
        flags: { goal: { type: "string", value: "GOAL_ID", help: "only the repairs of this goal", defaultText: "every goal" } },
      },
      async run(ctx, { values }) {
        const res = await (await ctx.api()).repairs.listRepairs({ goalId: str(values, "goal") ?? "" });
        if (ctx.json) ctx.json1(ListRepairsResponseSchema, res);
        for (const r of res.repairs) ctx.say(repairLine(r));
        return 0;
      },
    },
    show: {
      spec: {
        name: "repair show",
        summary: "Print a repair in full: inspection (steps, suppressed hooks, identities), consent, proposals, approval, job.",
        args: [REPAIR_ID],
      },
      async run(ctx, { positionals }) {
        const res = await (await ctx.api()).repairs.getRepair({ repairId: positionals[0] as string });
        if (ctx.json) ctx.json1(GetRepairResponseSchema, res);
        ctx.say(repairText(res.repair!));
        return 0;
      },
    },
    watch: {
      spec: {
        name: "repair watch",
        summary: "Follow a repair's changes as they happen, one line each (with --json, one WatchRepairResponse per line).",
        args: [REPAIR_ID],
        flags: {
          until: { type: "string", value: "STATE", help: `stop once the repair reaches STATE (approved waits for its job): ${REPAIR_STATES.join(", ")}`, defaultText: "until the server ends the stream" },
        },
        notes: ["Exit status 1 when the last state seen is stale, blocked or cancelled (or nothing was seen), else 0."],
      },
      async run(ctx, { values, positionals }) {
        const until = str(values, "until")?.toUpperCase();
        if (until !== undefined && !(until in RepairState)) throw new UsageError(`--until is a repair state: ${REPAIR_STATES.join(", ")}`);
        let last: Repair | undefined;
        for await (const m of (await ctx.api()).repairs.watchRepair({ repairId: positionals[0] as string })) {
          const r = m.repair!;
          if (ctx.json) ctx.json1(WatchRepairResponseSchema, m);
          else ctx.say(`${new Date().toISOString().slice(11, 19)}  ${describeChange(last, r)}`);
          last = r;
          if (until !== undefined && enumName(RepairState, r.state) === until && (r.state !== RepairState.APPROVED || r.job !== undefined)) break;
        }
        if (!last) return 1;
        return last.staleReason !== "" || last.state === RepairState.BLOCKED || last.state === RepairState.CANCELLED ? 1 : 0;
      },
    },
    source: {
      spec: {
        name: "repair source",
        summary: "Print one file of the repair's inspected source (raw bytes; with --json, base64 content and sha256).",
        args: [REPAIR_ID, { name: "PATH", help: "a repository-relative file path under the repair's sources" }],
      },
      async run(ctx, { positionals }) {
        const res = await (await ctx.api()).repairs.readRepairSource({ repairId: positionals[0] as string, path: positionals[1] as string });
        if (ctx.json) ctx.json1(ReadRepairSourceResponseSchema, res);
        else ctx.io.stdout.write(Buffer.from(res.content).toString("utf8"));
        return 0;
      },
    },
    consent: {
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
        const repairId = positionals[0] as string;
        const inspection = str(values, "inspection") ?? (await api.repairs.getRepair({ repairId })).repair?.inspection?.inspectionSha256 ?? "";
        const res = await api.repairs.giveConsent({ repairId, inspectionSha256: inspection, modelRouteId: need(values, "route") });
        if (ctx.json) ctx.json1(GiveConsentResponseSchema, res);
        ctx.say(`consented: the inspected source of ${repairId} (inspection ${inspection}) may be sent to model route ${res.repair?.consent?.modelRouteId}; no_learning`);
        return 0;
      },
    },
    propose: {
      spec: {
        name: "repair propose",
        summary: "Propose a patch, from a unified diff file or from the consented model route; it is validated against the allowed paths.",
        args: [REPAIR_ID],
        flags: {
          patch: { type: "string", value: "FILE", help: "a unified diff to propose (manual route)" },
          model: { type: "boolean", help: "ask the consented model route for the patch" },
        },
        oneOf: [{ flags: ["patch", "model"], required: true }],
        notes: ["Exit status 1 when the proposal is invalid (the reasons are printed)."],
      },
      async run(ctx, { values, positionals }) {
        const patch = str(values, "patch");
        const route = patch !== undefined ? { case: "manualDiff" as const, value: await readFile(patch, "utf8") } : { case: "model" as const, value: true };
        const res = await (await ctx.api()).repairs.proposePatch({ repairId: positionals[0] as string, route });
        if (ctx.json) ctx.json1(ProposePatchResponseSchema, res);
        const p = res.proposal!;
        ctx.say(`proposal ${p.id}: ${p.valid ? "valid" : "INVALID"} (${p.changedPaths.join(", ") || "no files"}), sha256 ${p.diffSha256}`);
        for (const r of p.reasons) ctx.say(`  - ${r.code}${r.subject ? ` [${r.subject}]` : ""}: ${r.message}`);
        return p.valid ? 0 : 1;
      },
    },
    approve: {
      spec: {
        name: "repair approve",
        summary: "Print the exact approval document (steps, argv, every input hash, limits) and approve exactly it; the job is queued.",
        args: [REPAIR_ID],
        flags: {
          proposal: { type: "string", value: "PROPOSAL_ID", help: "the proposal to approve", defaultText: "the latest valid proposal" },
          yes: { type: "boolean", help: 'approve without asking (otherwise you type "yes" on a terminal)' },
        },
        notes: [
          "Without --yes and without a terminal on stdin, nothing is approved and the exit status is 2.",
          "Exit status 1 when the prompt is declined. With --json: one object {document, repair, approval}.",
        ],
      },
      async run(ctx, { values, positionals }) {
        const api = await ctx.api();
        const repairId = positionals[0] as string;
        let proposalId = str(values, "proposal");
        if (proposalId === undefined) {
          const current = (await api.repairs.getRepair({ repairId })).repair!;
          proposalId = [...current.proposals].reverse().find((p) => p.valid)?.id;
          if (proposalId === undefined) throw new UsageError(`repair ${repairId} has no valid proposal to approve`, { showUsage: false });
        }
        const { document } = await api.repairs.getApprovalDocument({ repairId, proposalId });
        const doc = document!;
        if (!ctx.json) ctx.io.stdout.write(documentText(doc));
        if (values["yes"] !== true) {
          if (!ctx.io.stdinIsTTY) {
            // The refusal points at --json to review the document: print it (nothing is approved).
            if (ctx.json) ctx.io.stdout.write(`${JSON.stringify({ document: toJson(ApprovalDocumentSchema, doc, { alwaysEmitImplicit: true }) })}\n`);
            throw new UsageError("refusing to approve without a terminal to confirm on: review the document (seraph repair approve ID --json shows it) and pass --yes", { showUsage: false });
          }
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
      },
    },
    cancel: {
      spec: {
        name: "repair cancel",
        summary: "Cancel a repair; a running job is asked to stop.",
        args: [REPAIR_ID],
        flags: { reason: { type: "string", value: "TEXT", help: "why, recorded on the repair", defaultText: '"cancelled by the owner"' } },
      },
      async run(ctx, { values, positionals }) {
        const res = await (await ctx.api()).repairs.cancelRepair({ repairId: positionals[0] as string, reason: str(values, "reason") ?? "" });
        if (ctx.json) ctx.json1(CancelRepairResponseSchema, res);
        ctx.say(repairLine(res.repair!));
        return 0;
      },
    },
    recover: {
      spec: {
        name: "repair recover",
        summary: "For a job whose outcome is unknown: ask its node to prove process cleanup and release the physical slot (the outcome stays unknown).",
        args: [REPAIR_ID],
        notes: ["Exit status 0 when the slot is released, 1 when it stays held (the refusal code and message are printed)."],
      },
      async run(ctx, { positionals }) {
        const res = await (await ctx.api()).repairs.recoverProcessCleanup({ repairId: positionals[0] as string });
        if (ctx.json) ctx.json1(RecoverProcessCleanupResponseSchema, res);
        ctx.say(res.released ? "physical slot released (process cleanup only; the task outcome stays unknown)" : `slot stays held: ${res.refusalCode}: ${res.refusalMessage}`);
        if (res.repair?.job?.recovery) {
          const rc = res.repair.job.recovery;
          ctx.say(`  cleanup_receipt_verified=${rc.cleanupReceiptVerified} process_cleanup_readback_sha256=${rc.processCleanupReadbackSha256} readback_scope=${rc.readbackScope}`);
        }
        return res.released ? 0 : 1;
      },
    },
  },
};

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
