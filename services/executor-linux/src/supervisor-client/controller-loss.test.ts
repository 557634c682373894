// Real supervisors whose controller goes away: under policy cancel the supervisor cancels after
// the grace, cleans up to ECHILD and writes its receipt (policy and cause recorded); under
// policy keep it runs on for a new incarnation to re-adopt; a controller that comes back within
// the grace keeps the job.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { afterAll, describe, expect, test } from "vitest";
import { ControllerLossPolicy, Outcome, Phase, ReceiptSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { launchSupervisor, type SupervisorHandle } from "./launch.js";
import { delay, facilityGate, liveTagged, newTag, processesTagged, removeScenarioRunDirs, scenarioSpec, stopScenario, waitFor } from "../../testing/supervisor-test-kit.js";

const skipReason = await facilityGate();

describe.skipIf(skipReason !== undefined)("supervisor: lost-controller policy", () => {
  afterAll(() => removeScenarioRunDirs());

  test.concurrent("policy cancel: the controller's connection closes, no HELLO within the grace → cancelled, cleaned to ECHILD, receipt written", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, deadlineMs: 60_000, commands: [{ script: "sleep 120 & echo started; sleep 120" }] });
    spec.controllerLossPolicy = ControllerLossPolicy.CANCEL;
    spec.controllerLossGraceMs = 500;
    let handle: SupervisorHandle | undefined;
    try {
      handle = await launchSupervisor(spec);
      const conn = await handle.connect("cli-1");
      await conn.go();
      expect(await waitFor(() => liveTagged(tag).length >= 3, 5000)).toBe(true);
      // What the kernel does when seraph-exec is killed: its end of the socket closes.
      await conn.close();
      expect(await handle.waitGone(30_000)).toBe(true);
      const receiptPath = join(spec.runDir, RunDirFiles.receipt);
      expect(existsSync(receiptPath)).toBe(true);
      const receipt = fromBinary(ReceiptSchema, readFileSync(receiptPath));
      expect(receipt.outcome).toBe(Outcome.CANCELLED);
      expect(receipt.reason).toBe("controller_lost");
      expect(receipt.controllerLost).toBe(true);
      expect(receipt.controllerLossPolicy).toBe(ControllerLossPolicy.CANCEL);
      expect(receipt.deadlineReached).toBe(false);
      expect(receipt.echildObserved).toBe(true);
      expect(receipt.commands[0]?.signal).toBe("SIGTERM");
      expect(JSON.parse(readFileSync(join(spec.runDir, RunDirFiles.receiptJson), "utf8"))).toMatchObject({ controllerLossPolicy: "cancel", controllerLost: true });
      expect(processesTagged(tag)).toEqual([]);
    } finally {
      await stopScenario(handle, tag);
    }
  });

  test.concurrent("policy cancel: a controller that re-attaches within the grace keeps the job", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, deadlineMs: 60_000, commands: [{ script: "echo started; sleep 120" }] });
    spec.controllerLossPolicy = ControllerLossPolicy.CANCEL;
    spec.controllerLossGraceMs = 1500;
    let handle: SupervisorHandle | undefined;
    try {
      handle = await launchSupervisor(spec);
      const first = await handle.connect("cli-1");
      await first.go();
      await first.close();
      const second = await handle.connect("cli-2");
      await delay(2500);
      // Past the grace measured from the first close: still running, because cli-2 is attached.
      expect((await second.status()).phase).toBe(Phase.RUNNING);
      await second.cancel("test done");
      const receipt = await second.receipt(true);
      expect(receipt?.reason).toBe("cancelled");
      expect(receipt?.controllerLost).toBe(false);
      expect(receipt?.controllerLossPolicy).toBe(ControllerLossPolicy.CANCEL);
      await second.close();
      expect(await handle.waitGone(5000)).toBe(true);
      expect(processesTagged(tag)).toEqual([]);
    } finally {
      await stopScenario(handle, tag);
    }
  });

  test.concurrent("policy keep: with no controller the job runs on past the grace and is re-adopted by a new incarnation", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, deadlineMs: 60_000, commands: [{ script: "echo started; sleep 120" }] });
    spec.controllerLossPolicy = ControllerLossPolicy.KEEP;
    spec.controllerLossGraceMs = 300;
    let handle: SupervisorHandle | undefined;
    try {
      handle = await launchSupervisor(spec);
      const first = await handle.connect("executor-1");
      await first.go();
      await first.close();
      await delay(1500);
      expect(await handle.verify()).toBe("alive");
      expect(liveTagged(tag).length).toBeGreaterThanOrEqual(1);
      const second = await handle.connect("executor-2");
      expect(second.previousIncarnationId).toBe("executor-1");
      expect((await second.status()).phase).toBe(Phase.RUNNING);
      await second.cancel("test done");
      const receipt = await second.receipt(true);
      expect(receipt?.reason).toBe("cancelled");
      expect(receipt?.controllerLost).toBe(false);
      expect(receipt?.controllerLossPolicy).toBe(ControllerLossPolicy.KEEP);
      await second.close();
      expect(await handle.waitGone(5000)).toBe(true);
      expect(processesTagged(tag)).toEqual([]);
    } finally {
      await stopScenario(handle, tag);
    }
  });
});
