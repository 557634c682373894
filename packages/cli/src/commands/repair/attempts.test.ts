import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  ApprovalSchema,
  CreateRepairResponseSchema,
  ProposalRoute,
  ProposalSchema,
  RepairAttemptSchema,
  RepairSchema,
  RepairState,
  type ApproveRequest,
  type CreateRepairRequest,
  type Repair,
} from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { InspectionSchema, PythonInspectionSchema, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { describe, expect, it } from "vitest";
import type { Api } from "../../client.js";
import type { Command } from "../../command-spec.js";
import { createContext } from "../../context.js";
import { UsageError, type CliIo } from "../../io.js";
import { approve } from "./approve.js";
import { attemptLine, attempts, nextForAttempts } from "./attempts.js";
import { create as createCommand } from "./create.js";

// The attempts commands against an in-memory API: what `repair attempts` prints for each state
// of the latest attempt, that `repair approve` of an attempt that ran prints no document and
// passes on the server's refusal, and what `repair create --from` copies.

const REPAIR = "11111111-2222-4333-8444-555555555555";
const ran = (n: number, state: JobState, extra: Record<string, unknown> = {}) =>
  create(RepairAttemptSchema, {
    number: n,
    state: RepairState.FINISHED,
    proposalId: `aaaaaaa${n}-bbbb-4ccc-8ddd-eeeeeeeeeeee`,
    proposalSha256: "c".repeat(64),
    route: ProposalRoute.MANUAL,
    changedPaths: ["src/math.js"],
    approval: create(ApprovalSchema, { id: `dddddddd-0000-4000-8000-00000000000${n}`, documentSha256: `${n}`.repeat(64), attempt: n }),
    jobId: `eeeeeeee-0000-4000-8000-00000000000${n}`,
    jobState: state,
    jobOutcome: JobState[state]!.toLowerCase(),
    ...extra,
  });
const repairWith = (as: ReturnType<typeof ran>[], extra: Record<string, unknown> = {}): Repair => create(RepairSchema, { id: REPAIR, attempt: as.length, attempts: as, ...extra });

type Values = Record<string, string | boolean | string[] | undefined>;

async function run(command: Command, api: Record<string, (req: never) => Promise<unknown>>, values: Values, positionals: string[] = [REPAIR]) {
  let out = "";
  const io: CliIo = { env: {}, stdout: { write: (s: string) => (out += s) }, stderr: { write: () => undefined }, stdinIsTTY: false, home: "/nonexistent", readLine: async () => "" };
  const full = { repairs: { listRepairs: async () => ({ repairs: [] }), ...api }, goals: { getGoal: async () => ({ goal: { revision: 4 } }) } } as unknown as Api;
  const ctx = { ...createContext(io, false, undefined), api: async () => full };
  try {
    return { code: await command.run(ctx, { values, positionals }), out, error: undefined as unknown };
  } catch (error) {
    return { code: undefined, out, error };
  }
}

describe("seraph repair attempts", () => {
  it("prints each attempt with its badge, proposal, approval and job, and names the next step for the latest one", async () => {
    const r = repairWith([ran(1, JobState.FAILED), ran(2, JobState.SUCCEEDED)]);
    const res = await run(attempts, { getRepair: async () => ({ repair: r }) }, {});
    expect(res.code).toBe(0);
    expect(res.out).toContain(`attempts of repair ${REPAIR} (2; the repair's state is attempt 2's)\n`);
    expect(res.out).toMatch(/ {2}#1 {3}\[FAILED\] {4}proposal aaaaaaa1 manual sha256 c{12}… changes src\/math\.js {2}approval dddddddd document 1{12}… {2}job eeeeeeee \(failed\)/);
    expect(res.out).toContain("#2   [SUCCEEDED] ");
    expect(res.out).toContain(`next: propose another patch: seraph repair propose 11111111 --patch FILE   (opens attempt 3; it needs a fresh exact approval)\n`);
  });

  it("names recover for a held UNKNOWN (not another patch), approve for a proposed attempt, watch for a running one", () => {
    expect(nextForAttempts(repairWith([ran(1, JobState.UNKNOWN, { slotHeld: true })]))).toBe("next: seraph repair recover 11111111   (the slot stays held until its cleanup is proved; then propose another patch)");
    expect(attemptLine(ran(1, JobState.UNKNOWN, { slotHeld: true }))).toContain("[UNKNOWN]");
    expect(attemptLine(ran(1, JobState.UNKNOWN, { slotHeld: true }))).toContain("(unknown) slot held");
    expect(nextForAttempts(repairWith([ran(1, JobState.UNKNOWN, { slotHeld: false })]))).toContain("propose another patch");
    const proposed = ran(2, JobState.UNSPECIFIED, { state: RepairState.PROPOSED, approval: undefined, jobId: "", jobOutcome: "" });
    expect(nextForAttempts(repairWith([ran(1, JobState.FAILED), proposed]))).toBe("next: seraph repair approve 11111111   (prints attempt 2's exact document and its diff, and asks)");
    expect(attemptLine(proposed)).toMatch(/#2 {3}\[PROPOSED\] .* {2}not approved/);
    expect(nextForAttempts(repairWith([ran(1, JobState.RUNNING)]))).toBe("next: seraph repair watch 11111111");
    expect(attemptLine(ran(1, JobState.RUNNING))).toContain("[RUNNING]");
  });
});

describe("seraph repair approve after a run", () => {
  it("prints no document and passes on the server's attempt_already_ran refusal, approving nothing new", async () => {
    const approved: ApproveRequest[] = [];
    const r = repairWith([ran(1, JobState.FAILED)], { proposals: [create(ProposalSchema, { id: "aaaaaaa1-bbbb-4ccc-8ddd-eeeeeeeeeeee", valid: true, attempt: 1 })] });
    const refusal = new ConnectError("Attempt 1 … Next: propose another patch: seraph repair propose 11111111 --patch FILE (attempt_already_ran)", Code.FailedPrecondition);
    let documents = 0;
    const res = await run(approve, {
      getRepair: async () => ({ repair: r }),
      getApprovalDocument: async () => {
        documents++;
        return {};
      },
      approve: async (req: ApproveRequest) => {
        approved.push(req);
        throw refusal;
      },
    }, { yes: true });
    expect(res.error).toBe(refusal);
    expect(res.out).toBe("");
    expect(documents).toBe(0);
    // The approved hash of the attempt that ran, so the server (the rule's one home) answers.
    expect(approved.map((a) => a.documentSha256)).toEqual(["1".repeat(64)]);
  });

  it("defaults to the latest attempt's proposal, never an earlier attempt's", async () => {
    const proposals = [create(ProposalSchema, { id: "aaaaaaa1-bbbb-4ccc-8ddd-eeeeeeeeeeee", valid: true, attempt: 1 })];
    const proposed = ran(2, JobState.UNSPECIFIED, { state: RepairState.PROPOSED, approval: undefined });
    // Attempt 2 is open but (in this fake) holds no proposal: nothing of attempt 1 is offered.
    const res = await run(approve, { getRepair: async () => ({ repair: repairWith([ran(1, JobState.FAILED), proposed], { proposals }) }) }, { yes: true });
    expect(res.error).toBeInstanceOf(UsageError);
    expect((res.error as Error).message).toBe("attempt 2 of repair 11111111-2222-4333-8444-555555555555 has no valid proposal to approve; next: seraph repair propose 11111111 --patch FILE");
  });
});

describe("seraph repair create --from", () => {
  const python = create(RepairSchema, {
    id: REPAIR,
    goalId: "99999999-0000-4000-8000-000000000000",
    repositoryId: "88888888-0000-4000-8000-000000000000",
    sourcePaths: ["src", "tests"],
    allowedPatchPaths: ["src"],
    acceptanceCriteria: "it parses",
    selection: Selection.PYTHON_PYTEST,
    inspection: create(InspectionSchema, { profile: "repo-python3-v1", details: { case: "python", value: create(PythonInspectionSchema, { testPaths: ["tests/test_a.py", "tests/test_b.py"] }) } }),
  });
  const creating = async (values: Values) => {
    const sent: CreateRepairRequest[] = [];
    const res = await run(createCommand, {
      getRepair: async () => ({ repair: python }),
      listRepairs: async () => ({ repairs: [python] }),
      createRepair: async (req: CreateRepairRequest) => {
        sent.push(req);
        return create(CreateRepairResponseSchema, { repair: { id: "77777777-0000-4000-8000-000000000000", state: RepairState.INSPECTED } });
      },
    }, values, []);
    return { ...res, sent };
  };

  it("copies goal, repository, sources, allowed paths, criteria and the selection in its profile's words, at the goal's current revision", async () => {
    const res = await creating({ from: "1111" });
    expect(res.code).toBe(0);
    expect(res.sent).toHaveLength(1);
    expect(res.sent[0]).toMatchObject({ goalId: python.goalId, goalRevision: 4, repositoryId: python.repositoryId, sourcePaths: ["src", "tests"], allowedPatchPaths: ["src"], acceptanceCriteria: "it parses", selection: "python\n-m\npytest\ntests/test_a.py\ntests/test_b.py" });
    expect(res.out).toContain(`copied the inputs of repair ${REPAIR} (inspected afresh)`);
  });

  it("lets a flag replace one copied input", async () => {
    const res = await creating({ from: REPAIR, allow: ["src/one.py"], criteria: "narrower", selection: "test" });
    expect(res.sent[0]).toMatchObject({ sourcePaths: ["src", "tests"], allowedPatchPaths: ["src/one.py"], acceptanceCriteria: "narrower", selection: "test" });
  });

  it("without --from, names the first missing input before asking the server anything", async () => {
    const cases: [Values, string][] = [
      [{}, "--goal is required"],
      [{ goal: "g", repo: "r", allow: ["a"], criteria: "c" }, "--source is required"],
      [{ goal: "g", repo: "r", source: ["s"], allow: ["a"] }, "one of --criteria or --criteria-file is required"],
    ];
    for (const [values, message] of cases) {
      const res = await creating(values);
      expect(res.error).toBeInstanceOf(UsageError);
      expect((res.error as Error).message).toBe(message);
      expect(res.sent).toEqual([]);
    }
  });
});
