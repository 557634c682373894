import type { Client } from "@connectrpc/connect";
import { createRootLogger, PermissionDeniedError, toConnectError } from "@seraph/kit";
import type { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { describe, expect, it } from "vitest";
import { startHeartbeat } from "./registration.js";

const log = createRootLogger({ name: "heartbeat-test", level: "silent" });
const id = { nodeId: "node-h", bootId: "boot-h", incarnationId: "inc-h" };

describe("startHeartbeat", () => {
  it("stops for good, and stops the runner, once the jobs service says the node was fenced", async () => {
    let calls = 0;
    const jobs = {
      async heartbeat() {
        calls++;
        throw toConnectError(new PermissionDeniedError("node_fenced", "node node-h was fenced"));
      },
    } as unknown as Client<typeof JobsService>;
    let stopped = 0;
    const hb = startHeartbeat(jobs, id, 20, log, () => stopped++);
    await new Promise((r) => setTimeout(r, 200));
    hb.stop();
    expect([calls, stopped]).toEqual([1, 1]);
  });

  it("keeps heartbeating through other failures", async () => {
    let calls = 0;
    const jobs = {
      async heartbeat() {
        calls++;
        throw toConnectError(new PermissionDeniedError("token_invalid", "no"));
      },
    } as unknown as Client<typeof JobsService>;
    let stopped = 0;
    const hb = startHeartbeat(jobs, id, 20, log, () => stopped++);
    await new Promise((r) => setTimeout(r, 200));
    hb.stop();
    expect(stopped).toBe(0);
    expect(calls).toBeGreaterThan(2);
  });
});
