import { setTimeout as sleep } from "node:timers/promises";
import { connect, headers as createHeaders, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { Metrics } from "./metrics.js";
import { natsAuthOptions, type NatsAuth } from "./nats-auth.js";

/** A received signal. */
export interface SignalMessage {
  readonly subject: string;
  readonly data: Uint8Array;
  /** NATS message headers (W3C `traceparent` when the signal belongs to a traced job). */
  readonly headers?: Readonly<Record<string, string>> | undefined;
}

/**
 * Fire-and-forget signals between services (NATS in cluster mode, in-process when embedded).
 * A lost signal may delay work but never decides anything: every waiter also polls.
 */
export interface Signals {
  /** Publishes; never throws (a failed publish is logged and left to polling). */
  publish(subject: string, data: Uint8Array, headers?: Readonly<Record<string, string>>): void;
  /**
   * Subscribes to a subject pattern (`*` one token, `>` the rest); returns an unsubscribe. With
   * `queue`, subscribers of the same queue group across processes share the messages (each
   * message reaches one of them); in-process signals have one process and deliver to each.
   */
  subscribe(subject: string, handler: (msg: SignalMessage) => void, options?: SubscribeOptions): () => void;
  /** The NATS connection, when there is one (operator services use it). */
  readonly nats: NatsConnection | undefined;
  /**
   * NATS signals only: runs `cb` with the connection once it exists — at once when connected,
   * or when a service that started while NATS was unreachable connects.
   */
  whenConnected?(cb: (nc: NatsConnection) => void): void;
  /** Drains (NATS) and stops delivering. */
  close(): Promise<void>;
}

/** Options of {@link Signals.subscribe}. */
export interface SubscribeOptions {
  /** A NATS queue group name. */
  readonly queue?: string;
}

/** Matches a NATS subject pattern against a subject. */
export function subjectMatches(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length) return false;
    if (p[i] !== "*" && p[i] !== s[i]) return false;
  }
  return p.length === s.length;
}

/** In-process signals for embedded mode: synchronous fan-out on the next microtask. */
export function createLocalSignals(): Signals {
  const subs = new Set<{ pattern: string; handler: (m: SignalMessage) => void }>();
  let closed = false;
  return {
    nats: undefined,
    publish(subject, data, headers) {
      if (closed) return;
      for (const sub of subs) {
        if (subjectMatches(sub.pattern, subject)) queueMicrotask(() => sub.handler({ subject, data, headers }));
      }
    },
    subscribe(pattern, handler) {
      const sub = { pattern, handler };
      subs.add(sub);
      return () => subs.delete(sub);
    },
    async close() {
      closed = true;
      subs.clear();
    },
  };
}

/** Options of {@link createNatsSignals}. */
export interface NatsSignalsOptions {
  /** How long to wait between background connection attempts while NATS is unreachable (ms). */
  readonly retryMs?: number;
  /** The process's metrics: `seraph_nats_connected`, `seraph_nats_reconnects_total`. */
  readonly metrics?: Metrics | undefined;
}

/** Whether a failed first connect means "the server is not there (yet)" rather than a refusal. */
/** How long close() lets a NATS drain run before it closes the connection outright. */
export const DRAIN_MS = 2000;

function isUnreachable(err: unknown): boolean {
  return err instanceof Error && err.name === "ConnectionError";
}

/**
 * NATS signals (nats.js v3), authenticated with `auth` (the server refuses anonymous
 * connections). Connects with unlimited reconnects; publish never throws. A subject the
 * server's permissions deny is logged (as `nats status error`) and left to polling.
 *
 * A service must be able to start (or restart, in a rolling restart) while NATS is down:
 * signals only wake waiters that also poll. So when the first connection attempt finds no
 * server, the signals start detached (publishes are dropped, subscriptions wait), are attached
 * when a background attempt connects, and `whenConnected` callbacks run then. A refusal by a server that
 * is there (wrong credentials, authorization) still fails the start.
 */
export async function createNatsSignals(url: string, name: string, log: Logger, auth: NatsAuth, options: NatsSignalsOptions = {}): Promise<Signals> {
  const connectOptions = { servers: url, name, maxReconnectAttempts: -1, reconnectTimeWait: 500, ...(await natsAuthOptions(auth)) };
  try {
    return natsSignalsOver(await connect(connectOptions), log, options.metrics);
  } catch (err) {
    if (!isUnreachable(err)) throw err;
    log.warn({ err, url }, "NATS is unreachable: starting on polling alone, connecting in the background");
  }
  const deferred = createDeferredSignals();
  const waiting: ((nc: NatsConnection) => void)[] = [];
  const stopped = new AbortController();
  const retryMs = options.retryMs ?? 1000;
  const connecting = (async () => {
    while (!stopped.signal.aborted) {
      // Aborted by close(): the loop ends without another attempt.
      await sleep(retryMs, undefined, { signal: stopped.signal }).catch(() => undefined);
      if (stopped.signal.aborted) return;
      try {
        const nc = await connect(connectOptions);
        if (stopped.signal.aborted) {
          await nc.close();
          return;
        }
        log.info({ url }, "NATS connected; signals attached");
        deferred.attach(natsSignalsOver(nc, log, options.metrics));
        for (const cb of waiting.splice(0)) cb(nc);
        return;
      } catch (err) {
        // Unreachable again, or refused by a server that is now there: say which, keep trying.
        if (isUnreachable(err)) log.debug({ err }, "NATS still unreachable");
        else log.error({ err, url }, "NATS refused the connection; still polling, retrying");
      }
    }
  })();
  return {
    get nats() {
      return deferred.nats;
    },
    publish: (subject, data, headers) => deferred.publish(subject, data, headers),
    subscribe: (subject, handler, o) => deferred.subscribe(subject, handler, o),
    whenConnected(cb) {
      const nc = deferred.nats;
      if (nc) cb(nc);
      else waiting.push(cb);
    },
    async close() {
      stopped.abort();
      waiting.length = 0;
      // An attempt under way ends by itself (it closes what it opens once aborted); it is not
      // awaited beyond the drain bound, since connect() may take its own timeout to give up.
      await Promise.race([connecting, sleep(DRAIN_MS, undefined, { ref: false })]);
      await deferred.close();
    },
  };
}

/** Signals over an open NATS connection. */
function natsSignalsOver(nc: NatsConnection, log: Logger, metrics?: Metrics): Signals {
  metrics?.natsStatus("connect");
  void nc.closed().then(() => metrics?.natsStatus("close"), () => metrics?.natsStatus("close"));
  void (async () => {
    for await (const s of nc.status()) {
      metrics?.natsStatus(s.type);
      if (s.type === "error") log.warn({ nats: s.type, err: s.error }, "nats status error");
      else log.info({ nats: s.type }, "nats status");
    }
  })().catch(() => undefined);
  return {
    nats: nc,
    whenConnected(cb) {
      cb(nc);
    },
    publish(subject, data, headers) {
      try {
        nc.publish(subject, data, headers && Object.keys(headers).length > 0 ? { headers: natsHeaders(headers) } : undefined);
      } catch (err) {
        log.warn({ err, subject }, "nats publish failed; waiters will poll");
      }
    },
    subscribe(subject, handler, options) {
      const sub = nc.subscribe(subject, options?.queue ? { queue: options.queue } : {});
      void (async () => {
        for await (const m of sub) handler({ subject: m.subject, data: m.data, headers: m.headers ? Object.fromEntries([...m.headers.keys()].map((k) => [k, m.headers!.get(k)])) : undefined });
      })().catch((err) => log.warn({ err, subject }, "nats subscription ended"));
      return () => sub.unsubscribe();
    },
    async close() {
      if (nc.isClosed()) return;
      // A drain needs the server: while NATS is down or reconnecting it never finishes, and the
      // connection (unlimited reconnects) would keep the process alive past its grace period.
      // Drain within a bound, then close hard; what was not flushed is left to polling.
      const drained = await Promise.race([nc.drain().then(() => true, () => false), sleep(DRAIN_MS, undefined, { ref: false }).then(() => false)]);
      if (!drained && !nc.isClosed()) {
        log.warn({ drainMs: DRAIN_MS }, "nats drain did not finish (server unreachable?): closing the connection");
        await nc.close().catch(() => undefined);
      }
    },
  };
}

/**
 * Signals that can be used before the transport is connected: subscriptions are attached when
 * `attach()` supplies the real transport; publishes before that are dropped (polling covers them).
 */
export function createDeferredSignals(): Signals & { attach(target: Signals): void } {
  let target: Signals | undefined;
  const pending: { pattern: string; handler: (m: SignalMessage) => void; options: SubscribeOptions | undefined; off?: () => void; cancelled: boolean }[] = [];
  return {
    get nats() {
      return target?.nats;
    },
    attach(t) {
      target = t;
      for (const p of pending) if (!p.cancelled) p.off = t.subscribe(p.pattern, p.handler, p.options);
    },
    publish(subject, data, headers) {
      target?.publish(subject, data, headers);
    },
    subscribe(pattern, handler, options) {
      if (target) return target.subscribe(pattern, handler, options);
      const entry: (typeof pending)[number] = { pattern, handler, options, cancelled: false };
      pending.push(entry);
      return () => {
        entry.cancelled = true;
        entry.off?.();
      };
    },
    async close() {
      await target?.close();
    },
  };
}

/** NATS headers from a plain record. */
function natsHeaders(h: Readonly<Record<string, string>>): MsgHdrs {
  const out = createHeaders();
  for (const [k, v] of Object.entries(h)) out.set(k, v);
  return out;
}
