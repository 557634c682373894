import type { Logger } from "./log.js";
import type { NativeSystem } from "../native/native-system.js";
import type { ProcFs } from "../native/proc-fs.js";
import type { SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { Containment } from "./containment.js";
import type { StorageNotes } from "./storage.js";

/** Everything a supervisor needs; the real values are wired in main.ts, fakes in tests. */
export interface SupervisorOptions {
  readonly native: NativeSystem;
  readonly proc: ProcFs;
  readonly log: Logger;
  readonly spec: SupervisorSpec;
  /** SHA-256 (hex) of the spec bytes the supervisor was launched with. */
  readonly specSha256: string;
  /** SHA-256 (hex) of the supervisor's own code (supervisorSourceSha256). */
  readonly sourceSha256: string;
  readonly bootId: string;
  /** Start time (field 22) of the supervisor process. */
  readonly selfStartTimeTicks: bigint;
  /** The supervisor's PID namespace (readlink /proc/self/ns/pid); "" when unreadable. */
  readonly pidNamespace?: string;
  /** Monotonic clock in ms (default performance.now). */
  readonly now?: () => number;
  /**
   * How long the supervisor stays reachable after writing its receipt (default 2000 ms).
   * It leaves earlier once a controller fetched the receipt and every connection closed.
   */
  readonly lingerMs?: number;
  /** Backup reap poll while a command runs (default 20 ms); exits are seen at once via pidfd. */
  readonly reapIntervalMs?: number;
  /** Job user and per-job cgroup (containment.ts), when the spec asks for them. */
  readonly containment?: Containment;
  /**
   * Files of the run directory written complete but not yet flushed (a warm supervisor's
   * spec.binpb): fsynced with the token and markers, before the owner marker appears.
   */
  readonly unflushed?: readonly string[] | undefined;
  /** Where writes the storage refused are noted (shared with the log; default: a fresh one). */
  readonly storage?: StorageNotes | undefined;
}

/**
 * Cleanup time a supervisor takes when it finds itself already past its deadline (it was
 * stopped, e.g. SIGSTOP from the command, or starved): the deadline is lost either way — the
 * receipt says unknown, `deadline_overrun` — but the tree is still killed and reaped.
 */
export const LATE_CLEANUP_MS = 2000;
