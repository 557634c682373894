import { execFileSync, spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { main, type CliIo } from "@seraph/cli";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADD_BUGGY, createJsTestProject, fixAddPatch, fixturePatch } from "@seraph/executor-linux/testing";
import { startJourneyStack, type JourneyStack } from "./journey-stack.js";

/** A test that prints a coloured line every 150 ms for about 30 s (it is cancelled long before), so its output can be read while it runs. */
const SLOW_TEST = [
  'import test from "node:test";',
  'import assert from "node:assert/strict";',
  'import { add } from "../src/math.js";',
  "",
  'test("add adds, slowly", async () => {',
  "  for (let i = 0; i < 200; i++) {",
  "    console.log(`\\u001b[32mtick ${i}\\u001b[0m`);",
  "    await new Promise((r) => setTimeout(r, 150));",
  "  }",
  "  assert.equal(add(2, 3), 5);",
  "});",
  "",
].join("\n");

/** The tick numbers of SLOW_TEST's lines, in the order they were printed. */
const ticks = (out: string): number[] => [...out.matchAll(/tick (\d+)\u001b/g)].map((m) => Number(m[1]));

/** A TCP relay to `target` whose open connections can be cut (both sides destroyed) once. */
async function startRelay(target: URL): Promise<{ url: string; cut: () => void; cuts: number; close: () => Promise<void> }> {
  const open = new Set<import("node:net").Socket>();
  const server = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    for (const s of [client, upstream]) {
      open.add(s);
      s.on("close", () => open.delete(s));
      s.on("error", () => undefined);
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const relay = {
    url: `http://127.0.0.1:${(server.address() as import("node:net").AddressInfo).port}`,
    cuts: 0,
    cut: () => {
      relay.cuts++;
      for (const s of open) s.destroy();
    },
    close: async () => {
      for (const s of open) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  return relay;
}

const until = async (what: string, fn: () => Promise<boolean>, ms = 60_000) => {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
};

// The CLI's outcome-facing commands against the real stack (jobs, api, one executor node with
// one slot): badges, watch exit statuses, why a job waits, live logs, artifacts, diff, slots,
// id prefixes, next steps on errors, --version, and a reader that goes away (EPIPE).
describe("seraph CLI outcomes", () => {
  let stack: JourneyStack;
  let configDir: string;
  let env: Record<string, string>;
  let corrupt = false;

  beforeAll(async () => {
    stack = await startJourneyStack({
      // The API's reads of stored artifacts can be corrupted (one byte flipped) to prove `artifact get` checks the sha256.
      wrapJobs: (real) => ({
        readArtifact: async (req) => {
          const res = await real.readArtifact(req);
          if (corrupt && res.content.length > 0) res.content[0] = (res.content[0] as number) ^ 0xff;
          return res;
        },
      }),
    });
    configDir = await mkdtemp(join(tmpdir(), "seraph-cli-outcomes-"));
    env = { SERAPH_CONFIG_DIR: configDir, SERAPH_API_URL: stack.api.server.grpcUrl, SERAPH_TOKEN: stack.operatorToken };
  });
  afterAll(async () => {
    await stack?.stop();
    await rm(configDir, { recursive: true, force: true });
  }, 120_000);

  async function seraph(args: string[], extraEnv: Record<string, string> = {}, onOut?: (soFar: string) => void): Promise<{ code: number; out: string; err: string; bytes: Buffer }> {
    let out = "";
    let err = "";
    const chunks: Buffer[] = [];
    const io: CliIo = {
      env: { ...env, ...extraEnv },
      stdout: { write: (s: string) => (out += s) },
      stderr: { write: (s: string) => (err += s) },
      stdinIsTTY: false,
      home: configDir,
      readLine: async () => "",
      writeBytes: async (d) => {
        chunks.push(Buffer.from(d));
        out += Buffer.from(d).toString("utf8");
        onOut?.(out);
      },
    };
    const code = await main(args, io);
    return { code, out, err, bytes: Buffer.concat(chunks) };
  }

  async function openRepair(name: string, testFile?: string): Promise<string> {
    const goal = (await stack.operator.goals.createGoal({ title: `goal ${name}` })).goal!;
    const repo = await createJsTestProject({ parent: stack.root, failing: true, name, ...(testFile ? { extraFiles: { "test/math.test.js": testFile } } : {}) });
    await stack.operator.repositories.registerRepository({ path: repo.dir, name });
    // Goal by an 8-character prefix, repository by its registered name.
    const created = await seraph(["repair", "create", "--goal", goal.id.slice(0, 8), "--repo", name, "--source", "src", "--source", "test", "--allow", "src", "--criteria", "add(2, 3) === 5", "--json"]);
    expect(created.code, created.err).toBe(0);
    return JSON.parse(created.out.trim().split("\n")[0] as string).repair.id as string;
  }

  async function proposeAndApprove(id: string, patch: string): Promise<void> {
    const file = join(configDir, `${id}.patch`);
    await writeFile(file, patch);
    const p = await seraph(["repair", "propose", id.slice(0, 8), "--patch", file]);
    expect(p.code, p.err).toBe(0);
    const a = await seraph(["repair", "approve", id.slice(0, 8), "--yes"]);
    expect(a.code, a.err).toBe(0);
  }

  it("prints its version and gives the next step for a bad token, a refused connection and a missing file", async () => {
    const v = await seraph(["--version"]);
    expect([v.code, v.out]).toEqual([0, "seraph 0.1.0\n"]);
    await stack.operator.settings.updateSandboxSettings({
      settings: { ...(await stack.operator.settings.getSandboxSettings({})).settings!, enabled: true, profile: "repo-node24-npm-v1", runtimePath: stack.node, repositoryRoots: [stack.root] },
      expectedRevision: (await stack.operator.settings.getSandboxSettings({})).settings!.revision,
    });

    // settings check also checks the two root lists: the node's, and the settings' narrowing of them.
    const check = await seraph(["settings", "check"]);
    expect(check.out).toMatch(new RegExp(`ok +repository_roots +Repositories may be registered under ${stack.root}`));
    const disjoint = await seraph(["settings", "set", "--clear-roots", "--root", "/elsewhere"]);
    expect(disjoint.code, disjoint.err).toBe(0);
    const blocked = await seraph(["settings", "check"]);
    expect(blocked.code).toBe(1);
    expect(blocked.out).toMatch(/FAIL repository_roots +roots_disjoint: None of the settings' roots \(\/elsewhere\)/);
    expect((await seraph(["settings", "set", "--clear-roots", "--root", stack.root])).code).toBe(0);

    const bad = await seraph(["whoami"], { SERAPH_TOKEN: "sk_not_a_token" });
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/^error: UNAUTHENTICATED: .*\nnext: run `seraph login`/);

    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, "127.0.0.1", () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const refused = await seraph(["--api", `http://127.0.0.1:${port}`, "repair", "list"]);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain(`is \`npm start\` running on 127.0.0.1:${port}?`);

    const id = await openRepair("nofile");
    const missing = await seraph(["repair", "propose", id, "--patch", join(configDir, "nope.patch")]);
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/^seraph repair propose: ENOENT: no such file or directory/);
    expect(missing.err).not.toContain("ENOENT: ENOENT");
  });

  it("says `no repairs` for an empty list, and resolves unique prefixes but lists the candidates of an ambiguous one", async () => {
    const other = await stack.operator.principals.createPrincipal({ name: "newcomer" });
    const empty = await seraph(["repair", "list"], { SERAPH_TOKEN: other.secret });
    expect([empty.code, empty.out]).toEqual([0, "no repairs\n"]);

    // 17 goals: by pigeonhole two share their first hex digit.
    const ids: string[] = [];
    for (let i = 0; i < 17; i++) ids.push((await stack.clients(other.secret).goals.createGoal({ title: `g${i}` })).goal!.id);
    const first = ids.map((g) => g[0]).find((c, i, all) => all.indexOf(c) !== i) as string;
    const amb = await seraph(["goal", "show", first], { SERAPH_TOKEN: other.secret });
    expect(amb.code).toBe(1);
    expect(amb.err).toContain(`"${first}" is ambiguous`);
    for (const g of ids.filter((g) => g.startsWith(first))) expect(amb.err).toContain(g);
    const one = ids[0] as string;
    const shown = await seraph(["goal", "show", one.slice(0, 13)], { SERAPH_TOKEN: other.secret });
    expect(shown.code, shown.err).toBe(0);
    expect(shown.out).toContain(one);
    const none = await seraph(["goal", "show", "zzz"], { SERAPH_TOKEN: other.secret });
    expect(none.code).toBe(1);
    expect(none.err).toContain('no goal is named or has an id starting with "zzz"');
    // Prefixes resolve over the caller's own things only: the operator's goals are not candidates.
    const mine = await seraph(["goal", "show", one.slice(0, 13)]);
    expect(mine.code).toBe(1);
    expect(mine.err).toContain("no goal id starts with");
  });

  it("follows a running job's live log, shows UNKNOWN after a cancel, explains the queued job behind its held slot, and ends every watch with the outcome's exit status", async () => {
    const slowId = await openRepair("slow", SLOW_TEST);
    await proposeAndApprove(slowId, fixAddPatch("js"));
    // The follower reaches the API through a TCP relay that is cut once, mid-stream.
    const relay = await startRelay(new URL(stack.api.server.grpcUrl));
    let followedSoFar = "";
    const follow = seraph(["repair", "logs", slowId.slice(0, 8), "--step", "test", "--follow"], { SERAPH_API_URL: relay.url }, (s) => (followedSoFar = s));

    // The live log grows while the step runs: two reads, the second from the first's end.
    let firstLen = 0n;
    await until("live output", async () => {
      for await (const m of stack.operator.repairs.streamOutput({ repairId: slowId, step: "test", stream: "stdout", offset: 0n })) {
        if (m.source === "live" && m.data.length > 0) firstLen = m.offset + BigInt(m.data.length);
      }
      return firstLen > 0n;
    });
    let grown = false;
    await until("more live output", async () => {
      for await (const m of stack.operator.repairs.streamOutput({ repairId: slowId, step: "test", stream: "stdout", offset: firstLen })) {
        if (m.data.length > 0 && !grown) {
          // The first new bytes start exactly where the previous read ended.
          expect(m.offset).toBe(firstLen);
          expect(m.source).toBe("live");
          grown = true;
        }
      }
      return grown;
    });

    // Cut the follower's connection after a few lines; it resumes from its offset on a new one.
    await until("the follower's first lines", async () => followedSoFar.includes("tick 2\u001b"));
    const cutAt = ticks(followedSoFar).at(-1)!;
    relay.cut();
    await until("lines after the cut", async () => (ticks(followedSoFar).at(-1) ?? 0) >= cutAt + 3);
    // While it runs, show says since when the step runs (the jobs service's time).
    const running = await seraph(["repair", "show", slowId.slice(0, 8)]);
    expect(running.out).toMatch(/step test: running since \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z \(\d+\.\d s\)/);

    const cancel = await seraph(["repair", "cancel", slowId.slice(0, 8)]);
    expect(cancel.code, cancel.err).toBe(0);
    expect(cancel.out).toContain("outcome will be UNKNOWN");
    const watchUnknown = await seraph(["repair", "watch", slowId.slice(0, 8), "--exit-status", "--timeout", "60"]);
    expect(watchUnknown.code, watchUnknown.out + watchUnknown.err).toBe(6);
    expect(watchUnknown.out).toContain("[UNKNOWN]");
    const followed = await follow;
    // --follow ends with the job's outcome and watch --exit-status's status (6: unknown).
    expect(followed.code, followed.err).toBe(6);
    expect(followed.err).toMatch(/== job UNKNOWN \(unknown_external_effect\)/);
    expect(followed.out).toContain("\u001b[32mtick 0\u001b[0m");
    // Across the cut: every line exactly once, in order, none lost — the resumed stream began at
    // the byte the first one ended on.
    expect(relay.cuts).toBe(1);
    expect(followed.err).toMatch(/\(stream interrupted: .*; resuming from offset \d+\)/);
    const seen = ticks(followed.out);
    expect(seen.length).toBeGreaterThan(cutAt + 3);
    expect(seen).toEqual(seen.map((_, i) => i));
    await relay.close();
    const shown = await seraph(["repair", "show", slowId.slice(0, 8)]);
    expect(shown.out).toMatch(/^repair [0-9a-f-]{36}  \[UNKNOWN\]\n  RECOVERY NEEDED/);
    expect(shown.out).toContain(`seraph repair recover ${slowId.slice(0, 8)}`);
    expect(shown.out).toMatch(/sha256 [0-9a-f]{64}/);
    // The job's recorded preflight, as the executor recorded it at claim (issue 14).
    expect(shown.out).toContain("recorded job preflight (evidence recorded when this job was prepared on its executor; not a fresh readiness claim");
    expect(shown.out).toMatch(/ {6}preparation recorded at \d{4}-\d\d-\d\dT/);
    expect(shown.out).toMatch(/ {6}runtime \S+ v24\.15\.0 {2}sha256 [0-9a-f]{64}/);
    expect(shown.out).toMatch(/ {6}linux facilities ok \(x64 /);

    // The only slot stays held by the unknown job: the next job waits, and says behind what.
    const failId = await openRepair("stillfails");
    await proposeAndApprove(failId, fixturePatch("src/math.js", `export function add(a, b) {\n${ADD_BUGGY}\n}\n`, `export function add(a, b) {\n  // still wrong\n${ADD_BUGGY}\n}\n`));
    await until("the wait reason", async () => (await stack.operator.repairs.getRepair({ repairId: failId })).repair!.waitReason !== "");
    const queued = await seraph(["repair", "show", failId.slice(0, 8)]);
    expect(queued.out).toContain("[QUEUED]");
    expect(queued.out).toMatch(new RegExp(`waiting +slot 0 on node \\S+ is held by job [0-9a-f]{8} \\(unknown_external_effect; it stays held until recovery\\)`));
    const slots = await seraph(["slots"]);
    expect(slots.code, slots.err).toBe(0);
    expect(slots.out).toMatch(/slot 0 +held +job [0-9a-f-]{36} +\[UNKNOWN\]/);
    const notOperator = await seraph(["slots"], { SERAPH_TOKEN: (await stack.operator.principals.createPrincipal({ name: "member" })).secret });
    expect(notOperator.code).toBe(1);
    expect(notOperator.err).toContain("(operator_required)\nnext: ask the instance operator");

    const timedOut = await seraph(["repair", "watch", failId.slice(0, 8), "--timeout", "1"]);
    expect(timedOut.code).toBe(7);
    // While nothing changes, the watch says it is alive and what the job waits for.
    const beating = await seraph(["repair", "watch", failId.slice(0, 8), "--timeout", "3", "--heartbeat", "1"]);
    expect(beating.code).toBe(7);
    expect(beating.out).toMatch(/\[QUEUED\] +still job queued for \d+:\d\d \(waiting: slot 0 on node \S+ is held by job [0-9a-f]{8}/);
    // Cancelling the ended unknown job again names what is left to do, before and after recovery.
    const cancelHeld = await seraph(["repair", "cancel", slowId.slice(0, 8)]);
    expect(cancelHeld.code).toBe(1);
    expect(cancelHeld.err).toContain(`there is nothing to cancel. Its slot stays held until its process cleanup is recovered (RecoverProcessCleanup: seraph repair recover ${slowId.slice(0, 8)}).`);
    expect((await seraph(["repair", "recover", slowId.slice(0, 8)])).code).toBe(0);
    const cancelReleased = await seraph(["repair", "cancel", slowId.slice(0, 8)]);
    expect(cancelReleased.code).toBe(1);
    expect(cancelReleased.err).toContain("there is nothing to cancel. Its process cleanup was already recovered and its slot released.");
    const failed = await seraph(["repair", "watch", failId.slice(0, 8), "--exit-status", "--timeout", "90"]);
    expect(failed.code, failed.out + failed.err).toBe(3);
    expect(failed.out).toContain("[FAILED]");
    const failedLogs = await seraph(["repair", "logs", failId.slice(0, 8), "--follow"]);
    expect(failedLogs.code, failedLogs.err).toBe(3);
    expect(failedLogs.err).toMatch(/== job FAILED \(\w+\): test not passed \(exit 1\) ==/);
    expect((await seraph(["repair", "watch", failId.slice(0, 8)])).code).toBe(1);

    const list = await seraph(["repair", "list"]);
    expect(list.out).toMatch(new RegExp(`${slowId}  \\[UNKNOWN\\]`));
    expect(list.out).toMatch(new RegExp(`${failId}  \\[FAILED\\]`));
    // A page of summaries, newest first, saying when more exist; a limit out of range is a usage error.
    const one = await seraph(["repair", "list", "--limit", "1"]);
    expect(one.out.split("\n").filter((l) => / {2}\[[A-Z]+\] /.test(l))).toHaveLength(1);
    expect(one.out).toMatch(/\(the newest 1; more exist: --limit 2 shows more\)/);
    const bad = await seraph(["repair", "list", "--limit", "0"]);
    expect([bad.code, bad.err]).toEqual([2, expect.stringContaining("--limit must be between 1 and 500, got 0")]);
  }, 180_000);

  it("prints the diff, the stored logs and artifacts (sha256-checked), a succeeded watch exits 0, and its signed receipt verifies offline until a byte changes", async () => {
    const id = await openRepair("fixed");
    const unsigned = await seraph(["repair", "attestation", id.slice(0, 8)]);
    expect([unsigned.code, unsigned.out]).toEqual([1, ""]);
    expect(unsigned.err).toContain(`repair ${id.slice(0, 8)} has no job (status inspected), so nothing was signed`);
    await proposeAndApprove(id, fixAddPatch("js"));
    const watched = await seraph(["repair", "watch", id.slice(0, 8), "--exit-status", "--timeout", "90"]);
    expect(watched.code, watched.out + watched.err).toBe(0);
    expect(watched.out).toContain("[SUCCEEDED]");

    const diff = await seraph(["repair", "diff", id.slice(0, 8)]);
    expect(diff.out).toBe(fixAddPatch("js"));
    const logs = await seraph(["repair", "logs", id.slice(0, 8), "--step", "test"]);
    expect(logs.code, logs.err).toBe(0);
    expect(logs.out).toMatch(/pass 1\n/);

    const ls = await seraph(["artifact", "ls", id.slice(0, 8)]);
    expect(ls.out).toMatch(/test_output +test\.stdout/);
    const got = await seraph(["artifact", "get", id.slice(0, 8), "test.stdout"]);
    expect(got.code, got.err).toBe(0);
    expect(got.bytes.toString("utf8")).toBe(logs.out);
    corrupt = true;
    try {
      const bad = await seraph(["artifact", "get", id.slice(0, 8), "test.stdout"]);
      expect(bad.code).toBe(1);
      expect(bad.bytes.length).toBe(0);
      expect(bad.err).toContain("does not match its recorded sha256");
    } finally {
      corrupt = false;
    }

    // The job's signed receipt: downloaded through ReadArtifact, verified offline with the node's key.
    const dir = await mkdtemp(join(configDir, "receipt-"));
    const file = join(dir, "receipt.intoto.json");
    const att = await seraph(["repair", "attestation", id.slice(0, 8), "--output", file]);
    expect(att.code, att.err).toBe(0);
    expect(att.err).toContain(`next: seraph verify ${file} --key`);
    expect((await seraph(["repair", "attestation", id.slice(0, 8)])).bytes).toEqual(await readFile(file));
    const attJson = JSON.parse((await seraph(["repair", "attestation", id.slice(0, 8), "--json"])).out) as { artifact: { kind: string; name: string }; envelope: unknown };
    expect(attJson.artifact).toMatchObject({ kind: "attestation", name: "attestation.intoto.json" });
    expect(attJson.envelope).toEqual(JSON.parse(await readFile(file, "utf8")));
    const artifacts = join(dir, "artifacts");
    await mkdir(artifacts);
    const listed = JSON.parse((await seraph(["artifact", "ls", id.slice(0, 8), "--json"])).out) as { artifacts: { kind: string; name: string }[] };
    const names = listed.artifacts.filter((a) => a.kind !== "attestation").map((a) => a.name);
    expect(names).toContain("test.stdout");
    for (const name of names) expect((await seraph(["artifact", "get", id.slice(0, 8), name, "--output", join(artifacts, name)])).code).toBe(0);
    const key = join(stack.executorDataDir, "node-key.pub");
    const ok = await seraph(["verify", file, "--key", key, "--artifacts", artifacts]);
    expect(ok.code, ok.err).toBe(0);
    expect(ok.out).toMatch(/node +node-a /);
    expect(ok.out).toMatch(/outcome +SUCCEEDED/);
    expect(ok.out).toMatch(/cleanup +ECHILD observed/);
    expect(ok.out).toContain(`${names.length} checked against the files`);
    // The recipe of the README's "Verifying a receipt", with standard tools only.
    const recipe = [
      "set -eu",
      "jq -r .payload receipt.intoto.json | base64 -d > payload.json",
      "jq -r '.signatures[0].sig' receipt.intoto.json | base64 -d > sig.bin",
      "type=$(jq -r .payloadType receipt.intoto.json)",
      'printf "DSSEv1 %d %s %d " "${#type}" "$type" "$(wc -c < payload.json)" > pae.bin',
      "cat payload.json >> pae.bin",
      `openssl pkeyutl -verify -pubin -inkey ${key} -rawin -in pae.bin -sigfile sig.bin`,
      `jq -r '.subject[] | "\\(.digest.sha256)  artifacts/\\(.name)"' payload.json | sha256sum -c`,
    ].join("\n");
    expect(execFileSync("sh", ["-c", recipe], { cwd: dir, encoding: "utf8" })).toContain("Signature Verified Successfully");
    // One changed byte in an artifact, then in the envelope: not verified, and by either tool.
    const stdoutFile = join(artifacts, "test.stdout");
    const original = await readFile(stdoutFile);
    await writeFile(stdoutFile, Buffer.concat([original.subarray(0, -1), Buffer.from([original.at(-1)! ^ 1])]));
    const changedArtifact = await seraph(["verify", file, "--key", key, "--artifacts", artifacts]);
    expect(changedArtifact.code).toBe(1);
    expect(changedArtifact.err).toContain("NOT VERIFIED: subject_digest_mismatch: Artifact test.stdout has SHA-256");
    expect(() => execFileSync("sh", ["-c", recipe], { cwd: dir, stdio: "pipe" })).toThrow();
    await writeFile(stdoutFile, original);
    const envelope = JSON.parse(await readFile(file, "utf8")) as { payload: string };
    const payload = Buffer.from(envelope.payload, "base64");
    payload[payload.length >> 1] = payload[payload.length >> 1]! ^ 1;
    await writeFile(file, JSON.stringify({ ...envelope, payload: payload.toString("base64") }));
    const changedEnvelope = await seraph(["verify", file, "--key", key, "--artifacts", artifacts]);
    expect(changedEnvelope.code).toBe(1);
    expect(changedEnvelope.err).toContain("NOT VERIFIED: signature_invalid");
    expect(() => execFileSync("sh", ["-c", recipe], { cwd: dir, stdio: "pipe" })).toThrow();
  }, 120_000);

  it("stops quietly with status 0 when the reader of its output goes away (EPIPE)", async () => {
    const bin = new URL("../packages/cli/bin/seraph.js", import.meta.url).pathname;
    const child = spawn(process.execPath, [bin, "--help"], { stdio: ["ignore", "pipe", "pipe"] });
    child.stdout.destroy();
    let err = "";
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
    expect(err).toBe("");
    expect(code).toBe(0);
  });
});
