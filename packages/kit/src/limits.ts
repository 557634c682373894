import { RateLimiterMemory, RateLimiterRes } from "rate-limiter-flexible";
import { ResourceExhaustedError } from "./errors.js";

const KiB = 1024;
const MiB = 1024 * KiB;

/**
 * Room for everything around a message's largest field: field tags and lengths, ids, the
 * acceptance criteria of a repair, the gRPC/Connect envelope. Generous against the real
 * overhead (a few KiB) so that no legitimate message comes near the bound.
 */
export const ENVELOPE_BYTES = 64 * KiB;

/**
 * The largest request a public listener (API, UI gateway) reads: ProposePatch with a manual
 * diff of 1 MiB (the seeds' patch bound, enforced again in bytes by the handler) plus the
 * envelope. Every other public request is smaller: CreateRepair carries at most 2 × 200 ASCII
 * paths of 1,024 bytes and 20,000 characters of criteria (≈ 0.5 MiB), settings far less.
 */
export const PUBLIC_READ_MAX_BYTES = MiB + ENVELOPE_BYTES;

/**
 * The largest request the executor node reads: CheckProposal carries a 1 MiB patch and the
 * inspection it is checked against, whose identities are bounded by the profile (2,000 source
 * and 512 dependency files, each a ≤ 1,024-byte path and a 64-hex hash: ≈ 2.7 MiB, plus
 * scripts and configs). 8 MiB leaves room and still bounds what an unauthenticated caller can
 * make the node buffer.
 */
export const EXECUTOR_READ_MAX_BYTES = 8 * MiB;

/**
 * The largest request the jobs service reads: StoreArtifact with the 17 MiB artifact bound of
 * jobs.proto (16 MiB output plus a 1 MiB patch), plus the envelope. EnqueueJob (patch plus
 * inspection) is smaller.
 */
export const JOBS_READ_MAX_BYTES = 17 * MiB + ENVELOPE_BYTES;

/** Bounds of one listener pair against large and slow clients (see {@link DEFAULT_LISTENER_LIMITS}). */
export interface ListenerLimits {
  /** readMaxBytes of every Connect/gRPC/gRPC-Web handler: larger requests are RESOURCE_EXHAUSTED while reading. */
  readonly readMaxBytes: number;
  /** HTTP/1.1: the request headers must arrive within this many ms (node's headersTimeout). */
  readonly headersTimeoutMs: number;
  /** HTTP/1.1 and h2: the whole request (headers and body) must arrive within this many ms. */
  readonly requestTimeoutMs: number;
  /** HTTP/1.1 keep-alive and h2 sessions without an open stream are closed after this many ms idle. */
  readonly idleTimeoutMs: number;
  /** h2: concurrent streams one connection may open (SETTINGS_MAX_CONCURRENT_STREAMS). */
  readonly maxConcurrentStreamsPerConnection: number;
  /** Concurrent server-streaming RPCs (WatchRepair…) one principal may hold open on this server. */
  readonly streamsPerPrincipal: number;
  /** Concurrent server-streaming RPCs all principals of one operator root may hold open together on this server. */
  readonly streamsPerRoot: number;
  /** Per listener: requests whose body is still being read (so not yet authenticated) at once. */
  readonly unauthenticatedRequests: number;
  /** Per listener: bytes read for those requests together (default: 16 MiB or 2 × readMaxBytes, the larger). */
  readonly unauthenticatedBytes: number;
  /** Concurrent grpc.health.v1.Health/Watch streams (public, unauthenticated) on this server. */
  readonly healthWatches: number;
  /** A Health/Watch stream ends (OK) after this many ms; the client watches again. */
  readonly healthWatchMaxMs: number;
  /**
   * h2: when one connection's answers not yet sent to a slow reader pass this many bytes, its new
   * calls are refused RESOURCE_EXHAUSTED `overloaded` with a retry hint (instead of node's
   * ENHANCE_YOUR_CALM resets, which clients see as INTERNAL).
   */
  readonly sessionBufferedBytes: number;
}

/**
 * The defaults: a public-sized read limit, 10 s for headers, 60 s for a whole request (a 1 MiB
 * body at ≥ 20 KiB/s), 30 s idle, 100 streams per h2 connection, 16 open streams per principal
 * (the UI watches one repair at a time; the CLI one per command) and 32 per operator root (its
 * members together: a root cannot multiply the bound by creating principals). Before
 * authentication, per listener: 256 requests being read (above the 100 streams one client may
 * have in flight, so a busy client is not refused) and 16 MiB read for them (the attack that
 * set this: 150 unfinished 1 MiB bodies without a token raised the API's RSS by 107–151 MiB);
 * 32 health watches per server, each at most 5 minutes (probes use Check; a load balancer
 * watches once per backend); 16 MiB of answers an h2 connection has not read yet before its new
 * calls are shed.
 */
export const DEFAULT_LISTENER_LIMITS: ListenerLimits = Object.freeze({
  readMaxBytes: PUBLIC_READ_MAX_BYTES,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  idleTimeoutMs: 30_000,
  maxConcurrentStreamsPerConnection: 100,
  streamsPerPrincipal: 16,
  streamsPerRoot: 32,
  unauthenticatedRequests: 256,
  unauthenticatedBytes: 16 * MiB,
  healthWatches: 32,
  healthWatchMaxMs: 300_000,
  sessionBufferedBytes: 16 * MiB,
});

/** One rate limit, per principal and per operator root: `points` operations per `durationSeconds` for each. */
export interface RateLimitSpec {
  /** What is limited, in the plural ("goals", "repositories", ...). */
  readonly what: string;
  /** The setting that configures it (named in the refusal and as the ErrorInfo metadata `limit`). */
  readonly setting: string;
  readonly points: number;
  readonly durationSeconds: number;
}

/** Who takes a point: a principal and the operator root it belongs to. */
export interface RateLimitKey {
  readonly id: string;
  readonly rootId: string;
}

/** A rate limit per principal and per root; `consume` throws RESOURCE_EXHAUSTED `rate_limited` naming the limit. */
export interface PrincipalRateLimit {
  readonly spec: RateLimitSpec;
  /**
   * Takes one point for the principal and one for its root, or throws ResourceExhaustedError
   * (metadata `limit`: the setting, `scope`: "principal" or "root") when either has none left.
   */
  consume(who: RateLimitKey): Promise<void>;
}

/**
 * A fixed-window limit kept in this process's memory (rate-limiter-flexible's RateLimiterMemory),
 * counted twice: per principal, and per operator root over all its principals together, so a
 * tenant cannot pass its bound through members it creates itself. Each API process counts on its
 * own, so N replicas allow N × the limit.
 */
export function createPrincipalRateLimit(spec: RateLimitSpec): PrincipalRateLimit {
  const perPrincipal = new RateLimiterMemory({ keyPrefix: `${spec.what}:principal`, points: spec.points, duration: spec.durationSeconds });
  const perRoot = new RateLimiterMemory({ keyPrefix: `${spec.what}:root`, points: spec.points, duration: spec.durationSeconds });
  const take = async (limiter: RateLimiterMemory, key: string, scope: "principal" | "root") => {
    try {
      await limiter.consume(key, 1);
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) throw err;
      const retry = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
      const who = scope === "principal" ? "per principal" : "per operator root, all its principals together";
      throw new ResourceExhaustedError(
        "rate_limited",
        `At most ${spec.points} ${spec.what} per ${spec.durationSeconds} s ${who} (${spec.setting}=${spec.points}); retry in ${retry} s.`,
        undefined,
        { limit: spec.setting, scope, retry_after_seconds: String(retry) },
      );
    }
  };
  return {
    spec,
    async consume(who) {
      // The principal's own bound first: a root principal hitting it is told "per principal".
      await take(perPrincipal, who.id, "principal");
      await take(perRoot, who.rootId, "root");
    },
  };
}
