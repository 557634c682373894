import { readFile } from "node:fs/promises";
import { toJson } from "@bufbuild/protobuf";
import {
  ApproveBaselineResponseSchema,
  ApproveResponseSchema,
  GetRepairResultsResponseSchema,
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
  StreamOutputResponseSchema,
  WatchRepairResponseSchema,
  type ApprovalDocument,
  type Repair,
} from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { backoffDelay, isTransient } from "@seraph/kit/retry";
import type { CommandGroup } from "../command-spec.js";
import { intFlag, need, str, strs, type CommandContext } from "../context.js";
import { badge, documentText, enumName, jobLine, OUTCOME_EXIT, repairLine, repairText, resultsText, statusOf, TIMEOUT_EXIT } from "../format.js";
import { JOB_OUTCOMES } from "@seraph/profiles/outcome";
import { CliFailure, UsageError } from "../io.js";
import { goalId as resolveGoal, proposalId as resolveProposal, repairId as resolveRepair, repositoryId } from "../resolve.js";

const REPAIR_ID = { name: "REPAIR_ID", help: "the repair's id, or a unique prefix of it (as lists print)" } as const;

/** The repair the first positional names (full id or unique prefix). */
async function repairArg(ctx: CommandContext, positionals: readonly string[]): Promise<string> {
  return resolveRepair(await ctx.api(), positionals[0] as string);
}

/** The approval document as JSON, every field emitted (the `document` of approve and baseline --json). */
function documentJson(doc: ApprovalDocument): unknown {
  return toJson(ApprovalDocumentSchema, doc, { alwaysEmitImplicit: true });
}

/**
 * Prints an approval document and asks for "yes" on a terminal (unless `yes`): false when the
 * prompt is declined; without a terminal, a UsageError (exit 2, nothing approved; with --json the
 * document is printed first so it can be reviewed).
 */
async function confirmDocument(ctx: CommandContext, doc: ApprovalDocument, yes: boolean, command: "approve" | "baseline"): Promise<boolean> {
  if (!ctx.json) ctx.io.stdout.write(documentText(doc));
  if (yes) return true;
  if (!ctx.io.stdinIsTTY) {
    if (ctx.json) ctx.io.stdout.write(`${JSON.stringify({ document: documentJson(doc) })}\n`);
    const id = doc.repairId.slice(0, 8);
    throw new UsageError(`refusing to approve without a terminal to confirm on: review the document above (seraph repair ${command} ${id} --json prints it as JSON), then approve exactly it with seraph repair ${command} ${id} --yes`, { showUsage: false });
  }
  const answer = await ctx.io.readLine(`Approve exactly this ${command === "baseline" ? "baseline " : ""}document (sha256 ${doc.documentSha256})? Type "yes": `);
  if (answer === "yes") return true;
  ctx.say("not approved");
  return false;
}

/**
 * A `next:` line when the repair is waiting for its owner rather than for a job: a watch of an
 * inspected repair never ends by itself (a baseline job's end does not end it either).
 */
function waitingOnYou(r: Repair): string {
  const id = r.id.slice(0, 8);
  if (r.state === RepairState.INSPECTED || r.state === RepairState.CONSENTED) return `next: it waits for a proposal: seraph repair propose ${id} --patch FILE\n`;
  if (r.state === RepairState.PROPOSED) return `next: it waits for your approval: seraph repair approve ${id}\n`;
  return "";
}

/** True when the repair can change no more, or its job ended (unknown included). */
function isTerminal(r: Repair): boolean {
  if (r.state === RepairState.FINISHED || r.state === RepairState.CANCELLED || r.state === RepairState.BLOCKED) return true;
  if (r.staleReason !== "" && r.approval === undefined) return true;
  return r.job !== undefined && ["succeeded", "failed", "rejected", "cancelled", "unknown"].includes(statusOf(r));
}
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
          selection: { type: "string", value: "STEPS", help: 'the steps to run, in the settings profile\'s words: "npm test", "npm run build" or "npm run build test" (repo-node24-npm-v1); "test" (the declared command), "python -m unittest FILE..." or "python -m pytest FILE..." (repo-python3-v1) (default: the settings profile\'s own test selection, "test" for repo-python3-v1, "npm test" for repo-node24-npm-v1)' },
        },
        oneOf: [{ flags: ["criteria", "criteria-file"], required: true }],
        notes: ["Exit status 1 when the inspection blocks the repair (the reasons are printed)."],
      },
      async run(ctx, { values }) {
        const api = await ctx.api();
        const goalId = await resolveGoal(api, need(values, "goal"));
        const criteriaFile = str(values, "criteria-file");
        const criteria = criteriaFile !== undefined ? await readFile(criteriaFile, "utf8") : need(values, "criteria");
        const goalRevision = intFlag(values, "goal-revision") ?? (await api.goals.getGoal({ goalId })).goal?.revision ?? 0;
        // Without --selection, the default selection of the profile the settings select, as the
        // server's profile registry (ListProfiles) names it: "test" for Python, "npm test" for Node.
        const selection = str(values, "selection") ?? (await defaultSelection(api));
        const res = await api.repairs.createRepair({
          goalId,
          goalRevision,
          repositoryId: await repositoryId(api, need(values, "repo")),
          sourcePaths: strs(values, "source"),
          allowedPatchPaths: strs(values, "allow"),
          acceptanceCriteria: criteria,
          // One token a line, as the API takes it.
          selection: selection.split(/\s+/).filter((t) => t !== "").join("\n"),
        });
        if (ctx.json) ctx.json1(CreateRepairResponseSchema, res);
        ctx.say(repairText(res.repair!, ctx.colour));
        const id8 = res.repair!.id.slice(0, 8);
        if (res.repair?.state === RepairState.INSPECTED) ctx.say(`next: seraph repair propose ${id8} --patch FILE   (or seraph repair consent ${id8} --route ROUTE_ID, then propose --model)`);
        else if (res.repair?.state === RepairState.BLOCKED) ctx.say("next: change what the reasons name in the repository, then create a new repair (a blocked one stays blocked)");
        return res.repair?.state === RepairState.BLOCKED ? 1 : 0;
      },
    },
    list: {
      spec: {
        name: "repair list",
        summary: "List your repairs, one line each: id, outcome badge (succeeded, failed, rejected, cancelled, unknown, queued, running...), state, revision, job.",
        flags: { goal: { type: "string", value: "GOAL_ID", help: "only the repairs of this goal (id or unique prefix)", defaultText: "every goal" } },
      },
      async run(ctx, { values }) {
        const api = await ctx.api();
        const goal = str(values, "goal");
        const res = await api.repairs.listRepairs({ goalId: goal === undefined ? "" : await resolveGoal(api, goal) });
        if (ctx.json) ctx.json1(ListRepairsResponseSchema, res);
        if (res.repairs.length === 0) ctx.say(goal === undefined ? "no repairs" : "no repairs for that goal");
        for (const r of res.repairs) ctx.say(repairLine(r, ctx.colour));
        return 0;
      },
    },
    show: {
      spec: {
        name: "repair show",
        summary: "Print a repair in full: inspection (steps, suppressed hooks, identities), consent, proposals, approval, job, and the job's recorded preflight.",
        notes: [
          "The recorded job preflight is the executor's durable evidence of the job's preparation (facility report, runtime and compiler identities, repository root check, limits in force, backend and enforcement claims, times): evidence of that job's preparation, not a fresh readiness claim. PREPARATION BLOCKED names the reasons when preparation stopped the job, or says that no evidence was recorded for a claimed job.",
        ],
        args: [REPAIR_ID],
      },
      async run(ctx, { positionals }) {
        const res = await (await ctx.api()).repairs.getRepair({ repairId: await repairArg(ctx, positionals) });
        if (ctx.json) ctx.json1(GetRepairResponseSchema, res);
        ctx.say(repairText(res.repair!, ctx.colour));
        return 0;
      },
    },
    watch: {
      spec: {
        name: "repair watch",
        summary: "Follow a repair's changes as they happen, one line each with its outcome badge (with --json, one WatchRepairResponse per line); ends when the repair or its job ends.",
        args: [REPAIR_ID],
        flags: {
          until: { type: "string", value: "STATE", help: `stop once the repair reaches STATE (approved waits for its job): ${REPAIR_STATES.join(", ")}`, defaultText: "until the repair or its job ends (unknown included)" },
          "exit-status": { type: "boolean", help: "make the exit status follow the job's outcome: 0 succeeded, 3 failed, 4 rejected, 5 cancelled, 6 unknown" },
          timeout: { type: "int", value: "SECONDS", help: "give up after SECONDS (exit status 7)", defaultText: "no limit" },
        },
        notes: [
          "Exit status without --exit-status: 1 when the last status seen is failed, rejected, cancelled, unknown, blocked or stale (or nothing was seen), else 0.",
          "With --exit-status: 0 succeeded, 3 failed, 4 rejected, 5 cancelled, 6 unknown (recovery needed), 1 blocked or stale; 0 when --until was reached first.",
          "Exit status 7 when --timeout passed first, with or without --exit-status; when the repair waits for you (a proposal, your approval), a next: line names the command.",
        ],
      },
      async run(ctx, { values, positionals }) {
        const until = str(values, "until")?.toUpperCase();
        if (until !== undefined && !(until in RepairState)) throw new UsageError(`--until is a repair state: ${REPAIR_STATES.join(", ")}`);
        const timeout = intFlag(values, "timeout");
        const api = await ctx.api();
        const repairId = await repairArg(ctx, positionals);
        const stop = new AbortController();
        let timedOut = false;
        const timer = timeout === undefined ? undefined : setTimeout(() => {
          timedOut = true;
          stop.abort();
        }, timeout * 1000);
        let last: Repair | undefined;
        let reachedUntil = false;
        try {
          for await (const m of api.repairs.watchRepair({ repairId }, { signal: stop.signal })) {
            const r = m.repair!;
            if (ctx.json) ctx.json1(WatchRepairResponseSchema, m);
            else ctx.say(`${serverTime(r)}  ${r.id.slice(0, 8)}  ${badge(statusOf(r), ctx.colour)} ${describeChange(last, r)}`);
            last = r;
            if (until !== undefined && enumName(RepairState, r.state) === until && (r.state !== RepairState.APPROVED || r.job !== undefined)) {
              reachedUntil = true;
              break;
            }
            if (isTerminal(r)) break;
          }
        } catch (err) {
          if (!(timedOut && err instanceof ConnectError && err.code === Code.Canceled)) throw err;
        } finally {
          if (timer) clearTimeout(timer);
        }
        if (timedOut) {
          ctx.io.stderr.write(`seraph repair watch: --timeout ${timeout}s passed; last status ${last ? statusOf(last) : "none"}\n${last ? waitingOnYou(last) : ""}`);
          return TIMEOUT_EXIT;
        }
        if (!last) return 1;
        const status = statusOf(last);
        if (reachedUntil && !isTerminal(last)) return 0;
        if (values["exit-status"] === true) return OUTCOME_EXIT[status] ?? (status === "blocked" || status === "stale" ? 1 : 0);
        return ["failed", "rejected", "cancelled", "unknown", "blocked", "stale"].includes(status) ? 1 : 0;
      },
    },
    diff: {
      spec: {
        name: "repair diff",
        summary: "Print a proposal's unified diff (the approved one, else the latest valid, else the latest).",
        args: [REPAIR_ID],
        flags: { proposal: { type: "string", value: "PROPOSAL_ID", help: "the proposal (id or unique prefix)", defaultText: "the approved proposal, else the latest valid one, else the latest" } },
      },
      async run(ctx, { values, positionals }) {
        const api = await ctx.api();
        const repair = (await api.repairs.getRepair({ repairId: await repairArg(ctx, positionals) })).repair!;
        const given = str(values, "proposal");
        let proposal;
        if (given !== undefined) {
          const id = await resolveProposal(repair, given);
          proposal = repair.proposals.find((p) => p.id === id);
        } else {
          proposal = [...repair.proposals].reverse().find((p) => p.valid) ?? repair.proposals.at(-1);
        }
        if (!proposal) throw new CliFailure(`repair ${repair.id} has no proposal yet; next: seraph repair propose ${repair.id.slice(0, 8)} --patch FILE`);
        if (ctx.json) ctx.io.stdout.write(`${JSON.stringify({ proposalId: proposal.id, valid: proposal.valid, diffSha256: proposal.diffSha256, diff: proposal.diff })}\n`);
        else ctx.io.stdout.write(proposal.diff.endsWith("\n") || proposal.diff === "" ? proposal.diff : `${proposal.diff}\n`);
        return 0;
      },
    },
    logs: {
      spec: {
        name: "repair logs",
        summary: "Print a job step's output: live from the node while the step runs, then the stored artifact; --follow keeps reading until the step ends.",
        args: [REPAIR_ID],
        flags: {
          follow: { type: "boolean", help: "keep the stream open while the step runs (reconnects resume from the last offset)" },
          step: { type: "string", value: "build|test", help: "only this step", defaultText: "every step of the repair, in order" },
          stream: { type: "string", value: "stdout|stderr", help: "which stream", default: "stdout" },
        },
        notes: ["The bytes are written as the step wrote them (ANSI colours included). A step that wrote nothing to stdout but has stderr (unittest reports there) gets one line on stderr naming --stream stderr. With --json: one StreamOutputResponse per line."],
      },
      async run(ctx, { values, positionals }) {
        const step = str(values, "step");
        if (step !== undefined && step !== "build" && step !== "test") throw new UsageError("--step is build or test");
        const stream = str(values, "stream") ?? "stdout";
        if (stream !== "stdout" && stream !== "stderr") throw new UsageError("--stream is stdout or stderr");
        const api = await ctx.api();
        const repairId = await repairArg(ctx, positionals);
        const repair = (await api.repairs.getRepair({ repairId })).repair!;
        const steps = step !== undefined ? [step] : (repair.inspection?.steps.map((s) => s.name) ?? []).filter((n) => n === "build" || n === "test");
        if (steps.length === 0) throw new CliFailure(`repair ${repair.id} has no steps (its inspection did not admit it)`);
        if (!repair.job && values["follow"] !== true) {
          ctx.io.stderr.write(`no output yet: repair ${repair.id.slice(0, 8)} has no job (status ${statusOf(repair)}); --follow waits for it\n`);
          return 0;
        }
        const follow = values["follow"] === true;
        for (const name of steps) {
          if (steps.length > 1 && !ctx.json) await ctx.bytes(Buffer.from(`==> ${name} ${stream} <==\n`));
          let offset = 0n;
          for (let attempt = 0; ; attempt++) {
            try {
              for await (const m of api.repairs.streamOutput({ repairId, step: name, stream, offset, follow })) {
                attempt = 0;
                if (ctx.json) ctx.json1(StreamOutputResponseSchema, m);
                else if (m.data.length > 0) await ctx.bytes(m.data);
                offset = m.offset + BigInt(m.data.length);
                if (m.eof && m.neverStarted && !ctx.json) ctx.io.stderr.write(`(step ${name} did not start)\n`);
              }
              // Nothing on the stream shown by default, but the other one has bytes (unittest
              // reports on stderr): say where the output is instead of printing nothing.
              const other = repair.job?.artifacts.find((a) => a.name === `${name}.stderr`);
              if (offset === 0n && stream === "stdout" && !ctx.json && other !== undefined && other.size > 0n) {
                ctx.io.stderr.write(`(step ${name} wrote nothing to stdout; its stderr has ${other.size} B: seraph repair logs ${repair.id.slice(0, 8)} --step ${name} --stream stderr)\n`);
              }
              break;
            } catch (err) {
              // A dropped connection surfaces as UNAVAILABLE, or as CANCELED when the HTTP/2 stream
              // is reset under us (this process never cancels its own stream): kit's isTransient.
              if (!follow || !isTransient(err) || attempt >= 5) throw err;
              ctx.io.stderr.write(`(stream interrupted: ${(err as ConnectError).rawMessage}; resuming from offset ${offset})\n`);
              await new Promise((r) => setTimeout(r, backoffDelay(attempt, { initialMs: 500, maxMs: 8000 })));
            }
          }
        }
        return 0;
      },
    },
    source: {
      spec: {
        name: "repair source",
        summary: "Print one file of the repair's inspected source (raw bytes; with --json, base64 content and sha256).",
        args: [REPAIR_ID, { name: "PATH", help: "a repository-relative file path under the repair's sources" }],
      },
      async run(ctx, { positionals }) {
        const res = await (await ctx.api()).repairs.readRepairSource({ repairId: await repairArg(ctx, positionals), path: positionals[1] as string });
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
        const repairId = await repairArg(ctx, positionals);
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
        const repairId = await repairArg(ctx, positionals);
        const res = await (await ctx.api()).repairs.proposePatch({ repairId, route });
        if (ctx.json) ctx.json1(ProposePatchResponseSchema, res);
        const p = res.proposal!;
        ctx.say(`proposal ${p.id}: ${p.valid ? "valid" : "INVALID"} (${p.changedPaths.join(", ") || "no files"}), sha256 ${p.diffSha256}`);
        for (const r of p.reasons) ctx.say(`  - ${r.code}${r.subject ? ` [${r.subject}]` : ""}: ${r.message}`);
        if (p.valid) ctx.say(`next: seraph repair approve ${repairId.slice(0, 8)}   (prints the exact document and asks)`);
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
        const repairId = await repairArg(ctx, positionals);
        const given = str(values, "proposal");
        const current = (await api.repairs.getRepair({ repairId })).repair!;
        let proposalId = given === undefined ? undefined : await resolveProposal(current, given);
        if (proposalId === undefined) {
          proposalId = [...current.proposals].reverse().find((p) => p.valid)?.id;
          if (proposalId === undefined) throw new UsageError(`repair ${repairId} has no valid proposal to approve`, { showUsage: false });
        }
        const { document } = await api.repairs.getApprovalDocument({ repairId, proposalId });
        const doc = document!;
        if (!(await confirmDocument(ctx, doc, values["yes"] === true, "approve"))) return 1;
        const res = await api.repairs.approve({ repairId, documentSha256: doc.documentSha256 });
        if (ctx.json) {
          ctx.io.stdout.write(`${JSON.stringify({ document: documentJson(doc), ...(toJson(ApproveResponseSchema, res, { alwaysEmitImplicit: true }) as object) })}\n`);
        }
        ctx.say(`approved ${res.approval?.id} (document ${res.approval?.documentSha256})`);
        if (res.repair?.job) ctx.say(jobLine(res.repair.job));
        return 0;
      },
    },
    baseline: {
      spec: {
        name: "repair baseline",
        summary: "Print the exact baseline document (the same selection on the unpatched snapshot, no patch) and approve exactly it; the baseline job is queued.",
        args: [REPAIR_ID],
        flags: { yes: { type: "boolean", help: 'approve without asking (otherwise you type "yes" on a terminal)' } },
        notes: [
          "The baseline is its own job on its own approval; `seraph repair results` compares it with the patched run.",
          "Without --yes and without a terminal on stdin, nothing is approved and the exit status is 2; 1 when the prompt is declined. With --json: one object {document, repair, approval}.",
        ],
      },
      async run(ctx, { values, positionals }) {
        const api = await ctx.api();
        const repairId = await repairArg(ctx, positionals);
        const doc = (await api.repairs.getBaselineApprovalDocument({ repairId })).document!;
        if (!(await confirmDocument(ctx, doc, values["yes"] === true, "baseline"))) return 1;
        const res = await api.repairs.approveBaseline({ repairId, documentSha256: doc.documentSha256 });
        if (ctx.json) ctx.io.stdout.write(`${JSON.stringify({ document: documentJson(doc), ...(toJson(ApproveBaselineResponseSchema, res, { alwaysEmitImplicit: true }) as object) })}\n`);
        ctx.say(`baseline approved ${res.approval?.id} (document ${res.approval?.documentSha256})`);
        if (res.repair?.baselineJob) ctx.say(jobLine(res.repair.baselineJob));
        return 0;
      },
    },
    results: {
      spec: {
        name: "repair results",
        summary: "Per-test results of the patched run (failures first, with their messages) and, with a baseline, fail→pass / pass→fail against it.",
        args: [REPAIR_ID],
        notes: [
          "Exit status follows the patched job's outcome, as repair watch --exit-status: 0 succeeded, 3 failed, 4 rejected, 5 cancelled, 6 unknown; 1 when it has not ended (or there is none). The results and the comparison never change it.",
          "With --json: one GetRepairResultsResponse.",
        ],
      },
      async run(ctx, { positionals }) {
        const res = await (await ctx.api()).repairs.getRepairResults({ repairId: await repairArg(ctx, positionals) });
        if (ctx.json) ctx.json1(GetRepairResultsResponseSchema, res);
        else ctx.io.stdout.write(resultsText(res));
        const ended = res.patched ? JOB_OUTCOMES[res.patched.jobState] : undefined;
        return ended !== undefined ? (OUTCOME_EXIT[ended] ?? 1) : 1;
      },
    },
    cancel: {
      spec: {
        name: "repair cancel",
        summary: "Cancel a repair; a running job is asked to stop (its outcome becomes unknown and its slot stays held until `repair recover`).",
        args: [REPAIR_ID],
        flags: {
          reason: { type: "string", value: "TEXT", help: "why, recorded on the repair", defaultText: '"cancelled by the owner"' },
          baseline: { type: "boolean", help: "cancel the repair's baseline job instead (the repair itself is not cancelled)" },
        },
      },
      async run(ctx, { values, positionals }) {
        const res = await (await ctx.api()).repairs.cancelRepair({ repairId: await repairArg(ctx, positionals), reason: str(values, "reason") ?? "", baseline: values["baseline"] === true });
        if (ctx.json) ctx.json1(CancelRepairResponseSchema, res);
        ctx.say(repairLine(res.repair!, ctx.colour));
        const job = res.repair?.job;
        if (job && job.cancelRequested && (job.state === JobState.RUNNING || job.state === JobState.STARTING || job.state === JobState.PREPARING)) {
          ctx.say(`The running job is being stopped: its outcome will be UNKNOWN and its slot stays held until recovery.\nnext: seraph repair watch ${res.repair!.id.slice(0, 8)}, then seraph repair recover ${res.repair!.id.slice(0, 8)}`);
        }
        return 0;
      },
    },
    recover: {
      spec: {
        name: "repair recover",
        summary: "For a job whose outcome is unknown: ask its node to prove process cleanup and release the physical slot (the outcome stays unknown).",
        args: [REPAIR_ID],
        flags: { baseline: { type: "boolean", help: "recover the repair's baseline job instead of its patched job" } },
        notes: ["Exit status 0 when the slot is released, 1 when it stays held (the refusal code and message are printed)."],
      },
      async run(ctx, { values, positionals }) {
        const res = await (await ctx.api()).repairs.recoverProcessCleanup({ repairId: await repairArg(ctx, positionals), baseline: values["baseline"] === true });
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
  const b = r.baselineJob;
  if (b && (!prev?.baselineJob || prev.baselineJob.state !== b.state || prev.baselineJob.revision !== b.revision)) parts.push(`baseline job ${enumName(JobState, b.state)}${b.outcome ? ` (${b.outcome})` : ""}`);
  if (r.waitReason && r.waitReason !== prev?.waitReason) parts.push(`waiting: ${r.waitReason}`);
  if (parts.length === 0) parts.push(`revision ${r.revision}`);
  return parts.join("; ");
}

/** The server's time of the latest change (the repair's or its job's), HH:MM:SS UTC. */
function serverTime(r: Repair): string {
  const ms = Number(r.job && r.job.updatedUnixMs > r.updatedUnixMs ? r.job.updatedUnixMs : r.updatedUnixMs);
  return ms > 0 ? new Date(ms).toISOString().slice(11, 19) : "--:--:--";
}

/** The default selection text of the settings' profile, from the server's ListProfiles. */
async function defaultSelection(api: Awaited<ReturnType<CommandContext["api"]>>): Promise<string> {
  const [{ settings }, { profiles }] = await Promise.all([api.settings.getSandboxSettings({}), api.settings.listProfiles({})]);
  const profile = profiles.find((p) => p.name === settings?.profile) ?? profiles.find((p) => p.isDefault);
  if (profile === undefined) throw new CliFailure(`the server lists no execution profile "${settings?.profile ?? ""}"; pass --selection`);
  return profile.defaultSelection;
}
