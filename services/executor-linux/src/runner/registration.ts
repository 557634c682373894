import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { reasonOf, type Logger } from "@seraph/kit";
import { retry } from "@seraph/kit/retry";
import type { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { FacilityReport } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";

/** The identity this executor process registers under. */
export interface NodeIdentity {
  readonly nodeId: string;
  /** The host's boot id, from the one source the node's supervisors read too. */
  readonly bootId: string;
  /** Fresh per process start. */
  readonly incarnationId: string;
}


/** What the node registers. */
export interface RegistrationInput extends NodeIdentity {
  readonly slotCount: number;
  readonly address: string;
  readonly repositoryRoots: readonly string[];
  readonly facilities: FacilityReport;
  /** The node key's public half (SPKI PEM): the identity the jobs service binds this node id to. */
  readonly publicKey: string;
}

/** Registers the node with the jobs service once (throws on failure). */
export async function registerNodeOnce(jobs: Client<typeof JobsService>, input: RegistrationInput, log: Logger): Promise<void> {
  await jobs.registerNode(
    {
      nodeId: input.nodeId,
      bootId: input.bootId,
      incarnationId: input.incarnationId,
      slotCount: input.slotCount,
      address: input.address,
      repositoryRoots: [...input.repositoryRoots],
      facilities: input.facilities,
      publicKey: input.publicKey,
    },
    { timeoutMs: 5000 },
  );
  log.info({ incarnationId: input.incarnationId, bootId: input.bootId, slots: input.slotCount, address: input.address, facilitiesOk: input.facilities.ok }, "node registered");
}

/**
 * Registers the node with the jobs service, retrying with backoff until it succeeds or `signal`
 * aborts (the jobs service may still be migrating).
 */
export async function registerNode(jobs: Client<typeof JobsService>, input: RegistrationInput, log: Logger, signal?: AbortSignal): Promise<void> {
  // Kit's one retry policy, without a deadline: every failure but a refused registration
  // (INVALID_ARGUMENT: a malformed node, never better on a retry) is repeated until `signal` aborts.
  // A node whose key waits for the operator's approval (node_not_enrolled) retries until approved.
  let lastReason: string | undefined;
  await retry(() => registerNodeOnce(jobs, input, log), {
    initialMs: 200,
    maxMs: 5000,
    retryable: (err) => !(err instanceof ConnectError && err.code === Code.InvalidArgument),
    ...(signal ? { signal } : {}),
    onRetry: (err, attempt, delayMs) => {
      const reason = err instanceof ConnectError ? reasonOf(err) : undefined;
      if (reason === "node_not_enrolled" || reason === "node_key_mismatch") {
        // Said once as an error with its next step (in the message), then every 60 retries.
        if (reason !== lastReason || attempt % 60 === 0) log.error({ reason, err }, reason === "node_not_enrolled" ? "this node's key is not enrolled yet: the instance operator approves it (the message names the command); registration is retried" : "the jobs service has another key enrolled for this node id: this node cannot register under it (replace it under a new node id)");
      } else log.warn({ err, retryInMs: delayMs }, "node registration failed; retrying");
      lastReason = reason;
    },
  });
}

/** A running heartbeat. */
export interface Heartbeat {
  stop(): void;
}

/**
 * Heartbeats every `intervalMs`. When the jobs service answers that this incarnation was
 * superseded (another process registered the same node id) `onSuperseded` runs once and the
 * heartbeat stops, as it does when the node was fenced (PERMISSION_DENIED `node_fenced`: the node
 * can never report again); other failures are logged and retried on the next tick.
 */
export function startHeartbeat(
  jobs: Client<typeof JobsService>,
  id: NodeIdentity,
  intervalMs: number,
  log: Logger,
  onSuperseded: () => void,
): Heartbeat {
  let stopped = false;
  let failures = 0;
  const tick = async () => {
    try {
      await jobs.heartbeat({ nodeId: id.nodeId, incarnationId: id.incarnationId }, { timeoutMs: Math.max(1000, intervalMs) });
      failures = 0;
    } catch (err) {
      const fenced = err instanceof ConnectError && err.code === Code.PermissionDenied && reasonOf(err) === "node_fenced";
      if (fenced || (err instanceof ConnectError && err.code === Code.FailedPrecondition)) {
        if (fenced) log.error({ err, nodeId: id.nodeId }, "this node was fenced by the instance operator (seraph nodes fence): it can never report again and stops taking work; replace the node under a new id");
        else log.error({ err }, "this executor incarnation was superseded; it stops taking work");
        stopped = true;
        clearInterval(timer);
        onSuperseded();
        return;
      }
      failures += 1;
      if (failures === 1 || failures % 20 === 0) log.warn({ err, failures }, "heartbeat failed");
    }
  };
  const timer = setInterval(() => {
    if (!stopped) void tick();
  }, intervalMs);
  timer.unref();
  return {
    stop() {
      stopped = true;
      clearInterval(timer);
    },
  };
}
