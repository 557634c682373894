import { createNatsSignals, createRootLogger, DRAIN_MS, SHUTDOWN_BUDGET_MS, LINGER_MS } from "@seraph/kit";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestNats, type TestNatsServer } from "./harness/nats-server.js";

// signals.close() drains the NATS connection; a drain needs a server that answers. With the
// server hung (SIGSTOPped: accepting nothing, answering nothing), or gone while the client
// reconnects, the drain never ended and close() never returned.
let nats: TestNatsServer;
const log = createRootLogger({ name: "signals-close", level: "silent" });

beforeAll(async () => {
  nats = await startTestNats({ nodes: ["node-a"] });
});
afterAll(async () => {
  const pid = nats?.pid;
  if (pid) process.kill(pid, "SIGCONT");
  await nats?.close();
});

describe("closing NATS signals", () => {
  it("returns within the drain bound while the server hangs, and the connection is closed", async () => {
    const s = await createNatsSignals(nats.url, "seraph-jobs", log, nats.users.jobs);
    s.subscribe("seraph.work.queued", () => undefined);
    process.kill(nats.pid!, "SIGSTOP");
    try {
      const t0 = Date.now();
      await s.close();
      expect(Date.now() - t0).toBeLessThan(DRAIN_MS + 1500);
      expect(s.nats?.isClosed()).toBe(true);
    } finally {
      process.kill(nats.pid!, "SIGCONT");
    }
  });

  it("returns at once while the server is gone and the client reconnects", async () => {
    const s = await createNatsSignals(nats.url, "seraph-jobs", log, nats.users.jobs);
    await nats.stop();
    try {
      const t0 = Date.now();
      await s.close();
      expect(Date.now() - t0).toBeLessThan(DRAIN_MS + 1500);
      expect(s.nats?.isClosed()).toBe(true);
    } finally {
      await nats.start();
    }
  });

  it("a process whose shutdown steps are done exits even while a handle still holds it", async () => {
    const kit = new URL("../packages/kit/dist/index.js", import.meta.url).href;
    const script = `const { installShutdown, createRootLogger } = await import(${JSON.stringify(kit)});
      setInterval(() => {}, 1000); // a handle nothing closes (a client reconnecting forever)
      installShutdown(createRootLogger({ name: "t", level: "warn" }), [{ name: "quick", run: async () => {} }]);
      process.stdout.write("ready\\n");`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "pipe"], cwd: fileURLToPath(new URL("..", import.meta.url)) });
    let err = "";
    child.stderr.on("data", (b: Buffer) => (err += b.toString()));
    await new Promise<void>((resolve) => child.stdout.once("data", () => resolve()));
    const t0 = Date.now();
    child.kill("SIGTERM");
    const killer = setTimeout(() => child.kill("SIGKILL"), SHUTDOWN_BUDGET_MS);
    const signal = await new Promise<string | null>((resolve) => child.once("exit", (_c, sig) => resolve(sig)));
    clearTimeout(killer);
    expect(signal, err).toBeNull();
    expect(Date.now() - t0).toBeLessThan(LINGER_MS + 2000);
  });
});
