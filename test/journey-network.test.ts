// The attack of issue 24: an approved job (its own uid) connected to PostgreSQL on loopback,
// where the host trusts loopback, and could reach every service port. Through the whole stack on
// a root executor: by default the approval says network_claim=own_loopback_only and the job's
// test, which tries the stack's PostgreSQL, its API and a service of this test on the host, is
// refused every one of them while a server of its own on 127.0.0.1 works; with
// SERAPH_JOB_NETWORK=host the document says host_network and the same test reaches them.
import { createServer, type Server } from "node:net";
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { testPostgresUrl } from "@seraph/kit/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch } from "@seraph/executor-linux/testing";
import { defaultContainmentSettings } from "@seraph/executor-linux";
import { startJourneyStack, type JourneyStack } from "./journey-stack.js";

const isRoot = process.geteuid?.() === 0;
if (process.env["CI"] === "true" && !isRoot) throw new Error("this journey needs a root executor (job users, network namespaces) in CI");

/** The repository's test: each host port must be refused, and a server of the job's own must answer. */
function reachTest(ports: Record<string, number>): string {
  return [
    'import test from "node:test";',
    'import net from "node:net";',
    'import { add } from "../src/math.js";',
    "const reach = (port) => new Promise((done) => {",
    '  const c = net.connect(port, "127.0.0.1");',
    '  c.on("connect", () => { c.destroy(); done("connected"); });',
    '  c.on("error", (e) => done(e.code));',
    "});",
    'test("add adds; no port of the host is reachable; the job\'s own loopback is", async () => {',
    "  if (add(2, 3) !== 5) throw new Error('add is broken');",
    `  for (const [name, port] of Object.entries(${JSON.stringify(ports)})) {`,
    "    const got = await reach(port);",
    '    if (got !== "ECONNREFUSED") throw new Error(`${name} on 127.0.0.1:${port}: ${got}`);',
    "  }",
    "  const own = net.createServer((k) => k.end()).listen(0, \"127.0.0.1\");",
    '  await new Promise((r) => own.on("listening", r));',
    "  const got = await reach(own.address().port);",
    "  own.close();",
    '  if (got !== "connected") throw new Error(`own loopback: ${got}`);',
    "});",
    "",
  ].join("\n");
}

async function runRepair(stack: JourneyStack, ports: Record<string, number>, name: string) {
  const c = stack.operator;
  await c.settings.updateSandboxSettings({
    expectedRevision: 0n,
    settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: stack.node, enabled: true, repositoryRoots: [stack.root] },
  });
  const repo = await createJsTestProject({ parent: stack.root, failing: true, name, extraFiles: { "test/math.test.js": reachTest(ports) } });
  const { goal } = await c.goals.createGoal({ title: "network" });
  const { repository } = await c.repositories.registerRepository({ path: repo.dir });
  const { repair } = await c.repairs.createRepair({
    goalId: goal!.id,
    goalRevision: 1,
    repositoryId: repository!.id,
    sourcePaths: ["src", "test"],
    allowedPatchPaths: ["src"],
    acceptanceCriteria: "tests pass",
    selection: "npm test",
  });
  expect(repair?.state).toBe(RepairState.INSPECTED);
  const proposed = await c.repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch("js") } });
  const { document: doc } = await c.repairs.getApprovalDocument({ repairId: repair!.id, proposalId: proposed.proposal!.id });
  await c.repairs.approve({ repairId: repair!.id, documentSha256: doc!.documentSha256 });
  let last: Repair | undefined;
  for await (const m of c.repairs.watchRepair({ repairId: repair!.id })) last = m.repair;
  return { doc: doc!, job: last!.job! };
}

describe.skipIf(!isRoot)("repair journey: the job's network", () => {
  let service: Server;
  let accepted = 0;
  let ports: (stack: JourneyStack) => Record<string, number>;
  beforeAll(async () => {
    // A service of the host on every address (as NATS or a database would be).
    service = createServer((k) => {
      accepted++;
      k.end();
    });
    await new Promise<void>((r) => service.listen(0, "0.0.0.0", r));
    const servicePort = (service.address() as { port: number }).port;
    ports = (stack) => ({
      service: servicePort,
      postgresql: Number(new URL(testPostgresUrl()).port || 5432),
      api: Number(new URL(stack.api.server.grpcUrl).port),
    });
  });
  afterAll(async () => {
    await new Promise((r) => service.close(r));
  });

  it("by default: the document says own_loopback_only, and the job's test reaches no port of the host (PostgreSQL, the API, a service) while its own loopback works", async () => {
    const stack = await startJourneyStack();
    try {
      const before = accepted;
      const { doc, job } = await runRepair(stack, ports(stack), "network-none");
      expect(doc.isolationClaim).toBe("separate_job_uid");
      expect(doc.containment?.networkClaim).toBe("own_loopback_only");
      expect(doc.containment?.protects.join("\n")).toMatch(/reach no port of the host \(its database, NATS, the API\)/);
      expect(doc.containment?.doesNotProtect.join("\n")).not.toMatch(/host's network access/);
      expect(job.state, `${job.outcome}: ${job.outcomeMessage}`).toBe(JobState.SUCCEEDED);
      expect(job.receipt?.containment?.networkIsolated).toBe(true);
      expect(job.receipt?.containment?.networkNamespace).toMatch(/^net:\[\d+\]$/);
      expect(job.receipt?.containment?.networkInterfaces).toEqual(["lo"]);
      expect(accepted).toBe(before);
    } finally {
      await stack.stop();
    }
  }, 120_000);

  it("SERAPH_JOB_NETWORK=host: the document says host_network, and the same test reaches the host's ports (so it fails)", async () => {
    const stack = await startJourneyStack({ containment: { ...defaultContainmentSettings(1), network: "host" } });
    try {
      const before = accepted;
      const { doc, job } = await runRepair(stack, ports(stack), "network-host");
      expect(doc.containment?.networkClaim).toBe("host_network");
      expect(doc.containment?.doesNotProtect.join("\n")).toMatch(/the network: the command has the host's network access \(SERAPH_JOB_NETWORK=host\)/);
      expect(job.state, `${job.outcome}: ${job.outcomeMessage}`).toBe(JobState.FAILED);
      expect(job.receipt?.containment?.networkIsolated).toBe(false);
      expect(accepted).toBeGreaterThan(before);
    } finally {
      await stack.stop();
    }
  }, 120_000);
});
