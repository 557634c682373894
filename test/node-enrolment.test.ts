import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keyFingerprint, NODE_PUBLIC_KEY_FILE } from "@seraph/attestation";
import { main, type CliIo } from "@seraph/cli";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startJourneyStack, type JourneyStack } from "./journey-stack.js";

// Enrolling a new executor node through the CLI, against the real API, jobs service and a real
// executor process: the jobs service enrols only node-a by itself (as an embedded instance
// enrols only its own node); node-new registers with the key it generated in its data directory,
// is pending (not registered, can do nothing) until the instance operator approves exactly that
// key's fingerprint with `seraph nodes approve`, and then registers and heartbeats.
describe("node enrolment through the CLI (real API, jobs service and executor)", () => {
  let stack: JourneyStack;
  let configDir: string;
  let nodeDir: string;
  const abort = new AbortController();

  beforeAll(async () => {
    stack = await startJourneyStack({ autoEnrolNodes: ["node-a"] });
    configDir = await mkdtemp(join(tmpdir(), "seraph-cli-config-"));
    nodeDir = await mkdtemp(join(tmpdir(), "seraph-node-new-"));
  }, 120_000);
  afterAll(async () => {
    abort.abort();
    await stack?.stop();
    await rm(configDir, { recursive: true, force: true });
  }, 60_000);

  async function seraph(args: string[], token = stack.operatorToken): Promise<{ code: number; out: string; err: string }> {
    let out = "";
    let err = "";
    const io: CliIo = {
      env: { SERAPH_CONFIG_DIR: configDir, SERAPH_API_URL: stack.api.server.grpcUrl, SERAPH_TOKEN: token },
      stdout: { write: (s: string) => (out += s) },
      stderr: { write: (s: string) => (err += s) },
      stdinIsTTY: false,
      home: configDir,
      readLine: async () => "",
    };
    return { code: await main(args, io), out, err };
  }

  it("lists the new node as pending with its key's fingerprint, enrols only that fingerprint, and then the node registers", async () => {
    const started = stack.startNode("node-new", { dataDir: nodeDir, signal: abort.signal });
    started.catch(() => undefined);
    await expect.poll(async () => (await seraph(["nodes", "list"])).out, { timeout: 30_000 }).toContain("node-new  pending");
    const fingerprint = keyFingerprint(await readFile(join(nodeDir, NODE_PUBLIC_KEY_FILE), "utf8"));
    const listed = await seraph(["nodes", "list"]);
    expect(listed.out).toContain(`node-new  pending   key ${fingerprint}`);
    expect(listed.out).toContain(`seraph nodes approve node-new --fingerprint ${fingerprint}`);
    expect(await stack.db.selectFrom("nodes").select("id").where("id", "=", "node-new").executeTakeFirst()).toBeUndefined();
    // Only the instance operator approves; a fingerprint is required, and only the pending one enrols.
    const member = await stack.operator.principals.createPrincipal({ name: "member", newRoot: false });
    const denied = await seraph(["nodes", "approve", "node-new", "--fingerprint", fingerprint], member.secret);
    expect([denied.code, denied.err]).toEqual([1, expect.stringContaining("operator_required")]);
    expect((await seraph(["nodes", "approve", "node-new"])).code).toBe(2);
    const wrong = await seraph(["nodes", "approve", "node-new", "--fingerprint", "0".repeat(64)]);
    expect([wrong.code, wrong.err]).toEqual([1, expect.stringContaining("fingerprint_mismatch")]);
    expect((await stack.db.selectFrom("node_credentials").select("state").where("node_id", "=", "node-new").executeTakeFirstOrThrow()).state).toBe("pending");
    const ok = await seraph(["--json", "nodes", "approve", "node-new", "--fingerprint", fingerprint]);
    expect(ok.code, ok.err).toBe(0);
    expect(JSON.parse(ok.out.trim().split("\n").at(-1) as string)).toMatchObject({ nodeId: "node-new", fingerprint, approved: true });
    // The executor's registration, retried with backoff, is accepted now.
    const handle = await started;
    expect(handle.identity.nodeId).toBe("node-new");
    const after = await seraph(["--json", "nodes", "list"]);
    const nodes = JSON.parse(after.out.trim().split("\n").at(-1) as string) as { nodes: { nodeId: string; state: string; keyFingerprint: string }[]; pending?: unknown[] };
    expect(nodes.nodes.find((n) => n.nodeId === "node-new")).toMatchObject({ keyFingerprint: fingerprint, state: "NODE_STATE_LIVE" });
    expect(nodes.pending ?? []).toEqual([]);
    expect((await seraph(["nodes", "list"])).out).toMatch(new RegExp(`node-new  live .* key ${fingerprint}`));
  }, 90_000);
});
