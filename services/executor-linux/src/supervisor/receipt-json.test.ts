import { create } from "@bufbuild/protobuf";
import { describe, expect, test } from "vitest";
import { ControllerLossPolicy, Outcome, ReceiptSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { outcomeName, receiptToJson } from "./receipt-json.js";

describe("receiptToJson", () => {
  test("lowercase outcome, numbers, nulls, the last started command at top level", () => {
    const receipt = create(ReceiptSchema, {
      outcome: Outcome.REJECTED_LEFTOVER_DESCENDANTS,
      reason: "leftover_descendants",
      commands: [
        { name: "build", argv: ["/bin/true"], started: true, exitCode: 0, startedUnixMs: 10n, endedUnixMs: 15n, stdout: { bytes: 3n, keptBytes: 3n, sha256: "aa" } },
        { name: "test", argv: ["/bin/sh"], started: true, signal: "SIGKILL", startedUnixMs: 20n, endedUnixMs: 50n, stdout: { bytes: 5n, keptBytes: 4n, truncated: true, sha256: "bb", producedSha256: "cc", headBytes: 2n, tailBytes: 2n, elidedBytes: 1n } },
      ],
      cleanup: { descendantsFound: 2, reaped: 3, echildObserved: true, cleanupMs: 12 },
      leftoverDescendants: 2,
      echildObserved: true,
      marker: { supervisor: { pid: 7, startTimeTicks: 99n, bootId: "b" }, jobId: "j", attempt: 2, fence: 9n },
      durationMs: 40,
      controllerLossPolicy: ControllerLossPolicy.CANCEL,
      controllerLost: true,
    });
    const json = receiptToJson(receipt);
    expect(json.outcome).toBe("rejected_leftover_descendants");
    expect(json.exitCode).toBeNull();
    expect(json.signal).toBe("SIGKILL");
    expect(json.stdout).toEqual({ bytes: 5, keptBytes: 4, truncated: true, sha256: "bb", producedSha256: "cc", headBytes: 2, tailBytes: 2, elidedBytes: 1, storageError: "" });
    expect(json.controllerLossPolicy).toBe("cancel");
    expect(json.controllerLost).toBe(true);
    expect(receiptToJson(create(ReceiptSchema, {})).controllerLossPolicy).toBe("keep");
    expect(json.commands[0]?.exitCode).toBe(0);
    expect(json.commands[0]?.durationMs).toBe(5);
    expect(json.cleanup.reaped).toBe(3);
    expect(json.supervisor).toMatchObject({ pid: 7, startTimeTicks: "99", bootId: "b" });
    expect(json.fence).toBe("9");
    expect(JSON.parse(JSON.stringify(json))).toEqual(json);
  });

  test("every outcome has its lowercase name", () => {
    expect(
      [Outcome.SUCCEEDED, Outcome.FAILED, Outcome.TIMED_OUT, Outcome.CANCELLED, Outcome.REJECTED_LEFTOVER_DESCENDANTS, Outcome.UNKNOWN, Outcome.UNSPECIFIED].map(outcomeName),
    ).toEqual(["succeeded", "failed", "timed_out", "cancelled", "rejected_leftover_descendants", "unknown", "unknown"]);
  });
});
