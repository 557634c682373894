import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { ApprovalDocumentSchema, ApproveResponseSchema, ProposalSchema, RepairSchema, type ApproveRequest } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { describe, expect, it } from "vitest";
import type { Api } from "../../client.js";
import { createContext } from "../../context.js";
import { CliFailure, type CliIo } from "../../io.js";
import { approve } from "./approve.js";

// The approve prompt against an in-memory API: what the person is shown before "yes", and that
// nothing is approved when the diff shown is not the one the document binds.

const REPAIR = "11111111-2222-4333-8444-555555555555";
const PROPOSAL = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee";
const FIX = "--- a/src/math.js\n+++ b/src/math.js\n@@ -1,3 +1,3 @@\n export function add(a, b) {\n-  return a - b;\n+  return a + b;\n }\n";
const sha = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");

interface Run {
  code: number | undefined;
  error: unknown;
  out: string;
  /** stdout as it was when the prompt was asked (undefined when it never was). */
  outAtPrompt: string | undefined;
  prompt: string | undefined;
  approved: ApproveRequest[];
}

async function runApprove(o: { diff?: string; documentSha?: string; answer?: string; tty?: boolean; stdoutTTY?: boolean; env?: Record<string, string>; yes?: boolean; networkClaim?: string } = {}): Promise<Run> {
  const diff = o.diff ?? FIX;
  const run: Run = { code: undefined, error: undefined, out: "", outAtPrompt: undefined, prompt: undefined, approved: [] };
  const proposal = create(ProposalSchema, { id: PROPOSAL, diff, diffSha256: sha(diff), changedPaths: ["src/math.js"], valid: true });
  const repair = create(RepairSchema, { id: REPAIR, proposals: [proposal] });
  const document = create(ApprovalDocumentSchema, { kind: "local_host_execution", repairId: REPAIR, proposalId: PROPOSAL, proposalSha256: o.documentSha ?? sha(diff), documentSha256: "d".repeat(64), ...(o.networkClaim !== undefined ? { containment: { networkClaim: o.networkClaim } } : {}) });
  const api = {
    repairs: {
      getRepair: async () => ({ repair }),
      getApprovalDocument: async () => ({ document }),
      approve: async (req: ApproveRequest) => {
        run.approved.push(req);
        return create(ApproveResponseSchema, { approval: { id: "approval-1", documentSha256: req.documentSha256 } });
      },
    },
  } as unknown as Api;
  const io: CliIo = {
    env: o.env ?? {},
    stdout: { write: (s: string) => (run.out += s) },
    stderr: { write: () => undefined },
    stdinIsTTY: o.tty ?? true,
    stdoutIsTTY: o.stdoutTTY ?? false,
    home: "/nonexistent",
    readLine: async (prompt) => {
      run.prompt = prompt;
      run.outAtPrompt = run.out;
      return o.answer ?? "";
    },
  };
  const ctx = { ...createContext(io, false, undefined), api: async () => api };
  try {
    run.code = await approve.run(ctx, { values: o.yes ? { yes: true } : {}, positionals: [REPAIR] });
  } catch (err) {
    run.error = err;
  }
  return run;
}

describe("seraph repair approve: the patch inside the approval", () => {
  it("prints the diff and its sha256 after the document and before asking, and the prompt names the patch's hash", async () => {
    const r = await runApprove({ answer: "no" });
    expect(r.code).toBe(1);
    expect(r.approved).toEqual([]);
    const shown = r.outAtPrompt ?? "";
    expect(shown).toContain("APPROVAL DOCUMENT (local_host_execution)");
    expect(shown.indexOf("APPROVAL DOCUMENT")).toBeLessThan(shown.indexOf("PATCH (proposal"));
    expect(shown).toContain(`PATCH (proposal ${PROPOSAL}): the diff this document runs, 7 lines`);
    expect(shown).toContain(`  diff sha256         ${sha(FIX)}   (computed here from the diff below)`);
    expect(shown).toContain(`  proposal sha256     ${sha(FIX)}   (in the document: matches)`);
    expect(shown).toContain(`----- diff -----\n${FIX}----- end of diff -----\n`);
    expect(shown).not.toContain("\u001b[");
    expect(r.prompt).toBe(`Approve exactly this document (sha256 ${"d".repeat(64)}) and its patch (sha256 ${sha(FIX)})? Type "yes": `);
  });

  it("says before asking whether the job runs without the network (an approval from before the claim reads as the host's network)", async () => {
    const none = await runApprove({ answer: "no", networkClaim: "own_loopback_only" });
    expect(none.outAtPrompt).toContain("  network_claim       own_loopback_only   (each step runs in a network namespace of its own: only its loopback, no port of the host, nothing outside)\n");
    const host = await runApprove({ answer: "no", networkClaim: "host_network" });
    expect(host.outAtPrompt).toContain("  network_claim       host_network   (code has the host's network: every port on its loopback, such as a database, and everything outside)\n");
    expect((await runApprove({ answer: "no" })).outAtPrompt).toContain("  network_claim       host_network   (");
  });

  it("approves exactly the document after the diff was shown and yes typed", async () => {
    const r = await runApprove({ answer: "yes" });
    expect(r.code).toBe(0);
    expect(r.approved.map((a) => [a.repairId, a.documentSha256])).toEqual([[REPAIR, "d".repeat(64)]]);
    expect(r.outAtPrompt).toContain("+  return a + b;");
  });

  it("colours the diff when stdout is a terminal, and not with NO_COLOR", async () => {
    const tty = await runApprove({ stdoutTTY: true });
    expect(tty.outAtPrompt).toContain("\u001b[31m-  return a - b;\u001b[0m");
    expect(tty.outAtPrompt).toContain("\u001b[32m+  return a + b;\u001b[0m");
    expect(tty.outAtPrompt).toContain("\u001b[36m@@ -1,3 +1,3 @@\u001b[0m");
    const plain = await runApprove({ stdoutTTY: true, env: { NO_COLOR: "1" } });
    expect(plain.outAtPrompt).toContain("\n-  return a - b;\n");
    expect(plain.outAtPrompt).not.toContain("\u001b[");
  });

  it("bounds a long diff with an explicit marker and the command that prints all of it", async () => {
    const long = `--- a/src/math.js\n+++ b/src/math.js\n@@ -1,0 +1,500 @@\n${Array.from({ length: 500 }, (_, i) => `+// line ${i}\n`).join("")}`;
    const r = await runApprove({ diff: long });
    const shown = r.outAtPrompt ?? "";
    expect(shown).toContain("+// line 396\n");
    expect(shown).not.toContain("+// line 397\n");
    expect(shown).toContain(`\n… 103 more lines not shown: seraph repair diff ${REPAIR.slice(0, 8)} --proposal ${PROPOSAL.slice(0, 8)} prints all of it\n----- end of diff -----`);
    expect(shown).toContain(`  diff sha256         ${sha(long)}`);
  });

  it("shows characters a terminal would act on as escapes, so a patch cannot hide a line", async () => {
    const sneaky = "--- a/src/math.js\n+++ b/src/math.js\n@@ -1 +1 @@\n-x\n+evil()\r\u001b[2K+  return a + b;\u202e\n";
    const r = await runApprove({ diff: sneaky, stdoutTTY: true });
    expect(r.outAtPrompt).toContain("+evil()\\u000d\\u001b[2K+  return a + b;\\u202e");
    expect(r.outAtPrompt).toContain(`  diff sha256         ${sha(sneaky)}`);
  });

  it("refuses, approving nothing, when the diff does not hash to the document's proposal sha256", async () => {
    const r = await runApprove({ documentSha: "0".repeat(64), answer: "yes" });
    expect(r.error).toBeInstanceOf(CliFailure);
    expect((r.error as Error).message).toMatch(/^not approved: the diff of proposal aaaaaaaa-[\s\S]* is not the one the document binds \(proposal sha256 0{64}\)/);
    expect(r.prompt).toBeUndefined();
    expect(r.approved).toEqual([]);
    expect(r.out).toContain("(in the document: DOES NOT MATCH)");
    const withYes = await runApprove({ documentSha: "0".repeat(64), yes: true });
    expect(withYes.error).toBeInstanceOf(CliFailure);
    expect(withYes.approved).toEqual([]);
  });
});
