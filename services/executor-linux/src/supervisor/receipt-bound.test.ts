import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, test } from "vitest";
import {
  CleanupStatsSchema,
  CommandResultSchema,
  CommandSpecSchema,
  ContainmentReportSchema,
  OwnerMarkerSchema,
  ReceiptSchema,
  StreamStatsSchema,
  type ContainmentReport,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { NativeSystem } from "../native/native-system.js";
import { newCommandState } from "./command-state.js";
import type { Containment } from "./containment.js";
import { DescendantLedger } from "./process-tree.js";
import { Reaper } from "./reaper.js";
import { buildReceipt } from "./receipt-build.js";
import { MAX_RECEIPT_MESSAGE_CHARS, receiptJsonText, receiptSizeBound } from "./receipt-bound.js";
import { MAX_STORAGE_NOTES, StorageNotes } from "./storage.js";

const names = (schema: { fields: readonly { name: string }[] }): string[] => schema.fields.map((f) => f.name);

/** The largest template a spec allows: 8 commands of 64 long arguments, a job user, a long cgroup path, a marker with bindings. */
function bigTemplate(problem: string) {
  const commands = Array.from({ length: 8 }, (_, i) =>
    newCommandState(create(CommandSpecSchema, { name: `step-${i}-${"n".repeat(20)}`, argv: Array.from({ length: 64 }, (_, k) => `/a/${"\u00e9".repeat(120)}${k}`), cwd: "/w" }), i),
  );
  for (const c of commands) {
    c.pid = 4_000_000;
    c.startedUnixMs = Date.now();
    c.endedUnixMs = Date.now();
    c.exit = { kind: "signaled", signal: 64, coreDumped: true };
    c.leftovers = 3;
  }
  const marker = create(OwnerMarkerSchema, {
    supervisor: { pid: 4_194_304, startTimeTicks: 2n ** 63n, bootId: "b".repeat(36) },
    jobId: "j".repeat(64),
    attempt: 99,
    fence: 2n ** 62n,
    supervisorSourceSha256: "f".repeat(64),
    socketPath: `/${"d".repeat(90)}/ctl.sock`,
    runDir: `/${"d".repeat(90)}`,
    specSha256: "e".repeat(64),
    bindings: { approvalId: "a".repeat(64), approvalDocumentSha256: "c".repeat(64), isolationClaim: "separate_job_uid", resourceEnforcement: "admission_wall_timeout_and_cgroup:cpu,memory,pids", nodeId: "n".repeat(63) },
  });
  const report: ContainmentReport = create(ContainmentReportSchema, {
    jobUser: { uid: 64001, gid: 64001, name: "seraph-job-1" },
    cgroupPath: `/sys/fs/cgroup/${"p/".repeat(200)}job`,
    cgroupLayout: "hybrid",
    enforced: ["cpu", "memory", "pids"],
    problem,
  });
  const containment = { cgroup: {}, problem, report: () => report } as unknown as Containment;
  return { commands, marker, containment };
}

describe("the receipt's size bound (the space reserved before GO)", () => {
  test("every receipt field is one receiptSizeBound knows: a new field must be bounded there (worstCase) before it is added here", () => {
    expect(names(ReceiptSchema)).toEqual([
      "outcome", "reason", "message", "commands", "cleanup", "leftover_descendants", "echild_observed", "cancelled_before_go", "cancel_requested",
      "deadline_reached", "marker", "go_unix_ms", "finished_unix_ms", "duration_ms", "output_kept_bytes", "containment", "controller_loss_policy",
      "controller_lost", "storage_errors",
    ]);
    expect(names(CommandResultSchema)).toEqual(["name", "argv", "started", "exit_code", "signal", "started_unix_ms", "ended_unix_ms", "stdout", "stderr", "leftover_descendants", "oom_kills", "pid_limit_hits"]);
    expect(names(StreamStatsSchema)).toEqual(["bytes", "kept_bytes", "truncated", "sha256", "produced_sha256", "head_bytes", "tail_bytes", "elided_bytes", "storage_error"]);
    expect(names(CleanupStatsSchema)).toEqual(["descendants_found", "signalled_term", "signalled_kill", "reaped", "identity_refusals", "echild_observed", "cleanup_ms", "rounds"]);
    expect(names(ContainmentReportSchema)).toEqual([
      "job_user", "cgroup_path", "cgroup_layout", "enforced", "ceilings", "cgroup_kill_used", "populated_zero_observed", "oom_kills", "pid_limit_hits",
      "memory_limit_hits", "memory_peak_bytes", "cgroups_removed", "problem",
    ]);
  });

  test("a receipt with every free text far past its cap (a 100 000-character error, a 10 000-character cgroup problem) fits the bound of its template, binary and JSON", () => {
    // Worst characters for each form: U+0800 is 3 UTF-8 bytes, U+0001 is 6 bytes escaped in JSON.
    for (const ch of ["\u0800", "\u0001"]) {
      const { commands, marker, containment } = bigTemplate(ch.repeat(10_000));
      const input = (fatal: unknown, storageErrors: string[]) => ({
        cleanup: undefined,
        commands,
        ledger: new DescendantLedger(),
        reaper: new Reaper({} as NativeSystem),
        containment,
        marker,
        startedUnixMs: Date.now(),
        cancelsOnLoss: true,
        state: { fatal, overran: true, controllerLost: true, cancelEffective: true, cancelledBeforeGo: false, cancelReason: ch.repeat(100_000), deadlineReached: true, goUnixMs: Date.now() },
        storageErrors,
      });
      const bound = receiptSizeBound(buildReceipt(input(undefined, [])));
      const notes = new StorageNotes();
      for (let i = 0; i < 40; i++) notes.note(`cmd-${i}.stdout`, ch.repeat(500));
      expect(notes.lines()).toHaveLength(MAX_STORAGE_NOTES);
      const r = buildReceipt(input(new Error(ch.repeat(100_000)), notes.lines()));
      expect(r.message.length).toBe(MAX_RECEIPT_MESSAGE_CHARS);
      expect(toBinary(ReceiptSchema, r).length).toBeLessThanOrEqual(bound.binary);
      expect(Buffer.byteLength(receiptJsonText(r))).toBeLessThanOrEqual(bound.json);
      // And the bound is not absurd: well within the 1 MiB per step the free-space floor counts.
      expect(bound.binary + bound.json).toBeLessThan(1024 * 1024);
    }
  });

  test("a small job's reserve is a few pages", () => {
    const r = create(ReceiptSchema, { commands: [{ name: "test", argv: ["/usr/bin/node", "--test"] }], marker: { jobId: "j", runDir: "/r" } });
    const bound = receiptSizeBound(r);
    expect(bound.binary % 4096).toBe(0);
    expect(bound.binary + bound.json).toBeLessThanOrEqual(64 * 1024);
  });
});
