import type { Interceptor, StreamResponse } from "@connectrpc/connect";
import { RateLimiterMemory, RateLimiterRes } from "rate-limiter-flexible";
import { principalKey } from "./auth.js";
import { ResourceExhaustedError, toConnectError } from "./errors.js";

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
}

/**
 * The defaults: a public-sized read limit, 10 s for headers, 60 s for a whole request (a 1 MiB
 * body at ≥ 20 KiB/s), 30 s idle, 100 streams per h2 connection, 16 open streams per principal
 * (the UI watches one repair at a time; the CLI one per command).
 */
export const DEFAULT_LISTENER_LIMITS: ListenerLimits = Object.freeze({
  readMaxBytes: PUBLIC_READ_MAX_BYTES,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  idleTimeoutMs: 30_000,
  maxConcurrentStreamsPerConnection: 100,
  streamsPerPrincipal: 16,
});

/**
 * Caps the server-streaming (and bidi) RPCs each authenticated principal holds open at once;
 * one more is RESOURCE_EXHAUSTED `stream_limit` naming the limit. Runs after authentication
 * (it needs the principal); unauthenticated streams never reach it. A stream is released when
 * its response ends, fails or the caller goes away.
 */
export function createStreamLimitInterceptor(maxPerPrincipal: number, setting = "streams_per_principal"): Interceptor {
  const open = new Map<string, number>();
  return (next) => async (req) => {
    if (req.method.methodKind !== "server_streaming" && req.method.methodKind !== "bidi_streaming") return next(req);
    const principal = req.contextValues.get(principalKey);
    if (principal === undefined) return next(req);
    const key = principal.id;
    const count = open.get(key) ?? 0;
    if (count >= maxPerPrincipal) {
      throw toConnectError(
        new ResourceExhaustedError(
          "stream_limit",
          `At most ${maxPerPrincipal} concurrent streams per principal (${setting}=${maxPerPrincipal}); ${count} are open. Close one and retry.`,
        ),
      );
    }
    open.set(key, count + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      const left = (open.get(key) ?? 1) - 1;
      if (left <= 0) open.delete(key);
      else open.set(key, left);
    };
    req.signal.addEventListener("abort", release, { once: true });
    try {
      const res = await next(req);
      if (!res.stream) {
        release();
        return res;
      }
      return { ...res, message: releasing(res.message, release) } as StreamResponse;
    } catch (err) {
      release();
      throw err;
    }
  };
}

async function* releasing<T>(source: AsyncIterable<T>, release: () => void): AsyncIterable<T> {
  try {
    yield* source;
  } finally {
    release();
  }
}

/** One per-principal rate limit: `points` operations per `durationSeconds`. */
export interface RateLimitSpec {
  /** What is limited, in the plural ("goals", "repositories", ...). */
  readonly what: string;
  /** The setting that configures it (named in the refusal). */
  readonly setting: string;
  readonly points: number;
  readonly durationSeconds: number;
}

/** A per-principal rate limit; `consume` throws RESOURCE_EXHAUSTED `rate_limited` naming the limit. */
export interface PrincipalRateLimit {
  readonly spec: RateLimitSpec;
  /** Takes one point for `principalId`, or throws ResourceExhaustedError when none is left. */
  consume(principalId: string): Promise<void>;
}

/**
 * A fixed-window per-principal limit kept in this process's memory (rate-limiter-flexible's
 * RateLimiterMemory): each API process counts on its own, so N replicas allow N × the limit.
 */
export function createPrincipalRateLimit(spec: RateLimitSpec): PrincipalRateLimit {
  const limiter = new RateLimiterMemory({ keyPrefix: spec.what, points: spec.points, duration: spec.durationSeconds });
  return {
    spec,
    async consume(principalId) {
      try {
        await limiter.consume(principalId, 1);
      } catch (err) {
        if (!(err instanceof RateLimiterRes)) throw err;
        const retry = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
        throw new ResourceExhaustedError(
          "rate_limited",
          `At most ${spec.points} ${spec.what} per ${spec.durationSeconds} s per principal (${spec.setting}=${spec.points}); retry in ${retry} s.`,
        );
      }
    },
  };
}
