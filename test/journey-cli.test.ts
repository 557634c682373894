import { createHash } from "node:crypto";
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { main, type CliIo } from "@seraph/cli";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch } from "@seraph/executor-linux/testing";
import { answer, startFakeModelServer, type FakeModelServer } from "./journey-model-server.js";
import { startJourneyStack, type JourneyStack } from "./journey-stack.js";

// The `seraph` CLI through the real API: login, tokens, settings, goal, repository, and a repair
// from create to an approved job, with --json output and error codes.
describe("seraph CLI journey", () => {
  let stack: JourneyStack;
  let model: FakeModelServer;
  let configDir: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    stack = await startJourneyStack();
    model = await startFakeModelServer();
    configDir = await mkdtemp(join(tmpdir(), "seraph-cli-config-"));
    env = { SERAPH_CONFIG_DIR: configDir, SERAPH_API_URL: stack.api.server.grpcUrl, MODEL_KEY: "sk-from-env" };
  });
  afterAll(async () => {
    await model?.close();
    await stack?.stop();
    await rm(configDir, { recursive: true, force: true });
  });

  async function seraph(args: string[], opts: { tty?: boolean; extraEnv?: Record<string, string> } = {}): Promise<{ code: number; out: string; err: string }> {
    let out = "";
    let err = "";
    const io: CliIo = {
      env: { ...env, ...opts.extraEnv },
      stdout: { write: (s: string) => (out += s) },
      stderr: { write: (s: string) => (err += s) },
      stdinIsTTY: opts.tty ?? false,
      home: configDir,
      readLine: async () => "",
    };
    const code = await main(args, io);
    return { code, out, err };
  }
  const json = (s: string) => JSON.parse(s.trim().split("\n").at(-1) as string) as Record<string, any>;

  it("takes a repair from create to an approved, queued job", async () => {
    expect((await seraph(["whoami"])).code).toBe(2);
    const login = await seraph(["login", "--token", stack.operatorToken]);
    expect(login.code, login.err).toBe(0);
    expect((await stat(join(configDir, "login.json"))).mode & 0o777).toBe(0o600);
    expect((await seraph(["whoami"])).out).toMatch(/^operator /);

    const tok = json((await seraph(["--json", "token", "create", "ci"])).out);
    expect(tok.secret).toMatch(/^sk_/);
    expect((await seraph(["token", "list"])).out).toContain("ci");
    expect((await seraph(["whoami"], { extraEnv: { SERAPH_TOKEN: tok.secret } })).code).toBe(0);
    expect((await seraph(["token", "revoke", tok.token.id])).code).toBe(0);
    const revoked = await seraph(["whoami"], { extraEnv: { SERAPH_TOKEN: tok.secret } });
    expect(revoked.code).toBe(1);
    expect(revoked.err).toMatch(/^error: UNAUTHENTICATED: /);

    const set = await seraph([
      "settings", "set", "--enable", "--profile", "repo-node24-npm-v1", "--runtime", stack.node, "--root", stack.root,
      "--model-route", "default", "--model-base-url", model.baseUrl, "--model", "fake", "--model-key-env", "MODEL_KEY", "--model-timeout-ms", "5000",
    ]);
    expect(set.code, set.err).toBe(0);
    expect(set.out).toContain("key set");
    expect(set.out).not.toContain("sk-from-env");
    const check = await seraph(["settings", "check"]);
    expect(check.out).toContain("node_version");
    expect(check.out).toContain("v24.15.0");
    // As root the node's job users must reach the runtime (node --test starts each file by its path).
    if (process.geteuid?.() === 0) expect(check.out).toMatch(/ok {3}job_user_runtime +Every slot's job user \(64000:64000\) can execute \//);

    const goal = json((await seraph(["--json", "goal", "create", "--title", "Make add add"])).out).goal;
    const repo = await createJsTestProject({ parent: stack.root, failing: true });
    const repository = json((await seraph(["repo", "add", repo.dir, "--json"])).out).repository;
    const bad = await seraph(["repair", "create", "--goal", goal.id, "--repo", repository.id, "--source", "../x", "--allow", "src", "--criteria", "c"]);
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/^error: INVALID_ARGUMENT: source_paths\[0\]: .*\(path_traversal\)/);

    const created = await seraph(["repair", "create", "--goal", goal.id, "--repo", repository.id, "--source", "src", "--source", "test", "--allow", "src", "--criteria", "add(2, 3) === 5", "--selection", "npm test", "--json"]);
    expect(created.code, created.err).toBe(0);
    const repair = json(created.out).repair;
    expect(repair.state).toBe("REPAIR_STATE_INSPECTED");
    const shown = await seraph(["repair", "show", repair.id]);
    expect(shown.out).toContain('test: "node --test test/math.test.js"');
    expect(shown.out).toContain("pretest");
    expect((await seraph(["repair", "source", repair.id, "src/math.js"])).out).toContain("return a - b;");

    const noConsent = await seraph(["repair", "propose", repair.id, "--model"]);
    expect(noConsent.code).toBe(1);
    expect(noConsent.err).toContain("FAILED_PRECONDITION");
    expect(noConsent.err).toContain("(consent_required)");
    expect((await seraph(["repair", "consent", repair.id, "--route", "default"])).code).toBe(0);
    model.behave(answer(`\`\`\`diff\n${fixAddPatch("js")}\`\`\``));
    const proposed = await seraph(["repair", "propose", repair.id, "--model"]);
    expect(proposed.code, proposed.err).toBe(0);
    expect(proposed.out).toMatch(/valid \(src\/math.js\)/);
    expect(model.requests[0]?.authorization).toBe("Bearer sk-from-env");
    const patchFile = join(configDir, "fix.patch");
    await writeFile(patchFile, fixAddPatch("js"));
    const proposedManual = await seraph(["repair", "propose", repair.id, "--patch", patchFile]);
    expect(proposedManual.code).toBe(0);
    expect(proposedManual.out).toContain(`\nnext: seraph repair approve ${repair.id.slice(0, 8)}   (prints the exact document and asks)\n`);

    // A watch of a proposed repair waits for its owner, and its timeout says what it waits for.
    const waiting = await seraph(["repair", "watch", repair.id, "--timeout", "1"]);
    expect(waiting.code).toBe(7);
    expect(waiting.err).toContain(`last status proposed\nnext: it waits for your approval: seraph repair approve ${repair.id.slice(0, 8)}\n`);

    const refused = await seraph(["repair", "approve", repair.id]);
    expect(refused.code).toBe(2);
    // As root (CI) the node runs commands as a per-slot job user and the document says exactly that.
    const claim = process.geteuid?.() === 0 ? "separate_job_uid" : "none";
    expect(refused.out).toContain(`isolation_claim     ${claim}`);
    // As root the node runs each step in a network namespace of its own, and the document says so.
    expect(refused.out).toContain(`network_claim       ${claim === "none" ? "host_network" : "own_loopback_only"}   (`);
    // The patch is inside the approval: the diff itself, and its sha256 equal to the one the document binds.
    const fixSha = createHash("sha256").update(fixAddPatch("js")).digest("hex");
    expect(refused.out).toContain(`  diff sha256         ${fixSha}   (computed here from the diff below)\n  proposal sha256     ${fixSha}   (in the document: matches)\n`);
    expect(refused.out).toContain(`----- diff -----\n${fixAddPatch("js")}----- end of diff -----\n`);
    if (claim !== "none") {
      expect(refused.out).toContain("code runs as job user uid = gid = 64000 + slot index, uid range 64000");
      expect(refused.out).toMatch(/protects:\n {4}the supervisor process/);
      expect(refused.out).toMatch(/does not protect:\n[\s\S]*world-readable/);
    }
    // The refusal names the command to run next, with this repair's id.
    expect(refused.err).toContain(`then approve exactly it with seraph repair approve ${repair.id.slice(0, 8)} --yes`);
    // The refusal says --json shows the document: it does, and nothing is approved.
    const refusedJson = await seraph(["repair", "approve", repair.id, "--json"]);
    expect(refusedJson.code).toBe(2);
    expect(json(refusedJson.out).document.isolationClaim).toBe(claim);
    expect(json(refusedJson.out).approval).toBeUndefined();
    const declined = await seraph(["repair", "approve", repair.id], { tty: true });
    expect(declined.code).toBe(1);
    expect(declined.out).toContain("not approved");

    const approved = await seraph(["repair", "approve", repair.id, "--yes", "--json"]);
    expect(approved.code, approved.err).toBe(0);
    const result = json(approved.out);
    expect(result.document.resourceEnforcement).toBe("admission_and_wall_timeout_only");
    expect(result.approval.documentSha256).toBe(result.document.documentSha256);
    expect(result.repair.state).toBe("REPAIR_STATE_APPROVED");
    expect(result.repair.job.approvalId).toBe(result.approval.id);

    const watched = await seraph(["repair", "watch", repair.id, "--until", "approved"]);
    expect(watched.code, watched.err).toBe(0);
    expect(watched.out).toMatch(/state APPROVED|job /);
    // A repeat answers as the first approval did while its job runs; once the job ended it is
    // refused (an approval runs once). Which one depends on how fast the job ran; both are exact
    // (repair-attempts.int.test.ts and journey-attempts.test.ts pin each).
    const again = await seraph(["repair", "approve", repair.id, "--yes", "--json"]);
    if (again.code === 0) expect(json(again.out).approval.id).toBe(result.approval.id);
    else expect([again.code, again.err]).toEqual([1, expect.stringContaining("(attempt_already_ran)")]);

    const missing = await seraph(["repair", "show", "00000000-0000-4000-8000-000000000000"]);
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/^error: NOT_FOUND: /);
    expect((await seraph(["goal", "list", "--json"])).out).toContain(goal.id);
    expect((await seraph(["nonsense"])).code).toBe(2);
  });
});
