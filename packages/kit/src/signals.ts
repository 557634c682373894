import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { natsAuthOptions, type NatsAuth } from "./nats-auth.js";

/** A received signal. */
export interface SignalMessage {
  readonly subject: string;
  readonly data: Uint8Array;
}

/**
 * Fire-and-forget signals between services (NATS in cluster mode, in-process when embedded).
 * A lost signal may delay work but never decides anything: every waiter also polls.
 */
export interface Signals {
  /** Publishes; never throws (a failed publish is logged and left to polling). */
  publish(subject: string, data: Uint8Array): void;
  /**
   * Subscribes to a subject pattern (`*` one token, `>` the rest); returns an unsubscribe. With
   * `queue`, subscribers of the same queue group across processes share the messages (each
   * message reaches one of them); in-process signals have one process and deliver to each.
   */
  subscribe(subject: string, handler: (msg: SignalMessage) => void, options?: SubscribeOptions): () => void;
  /** The NATS connection, when there is one (operator services use it). */
  readonly nats: NatsConnection | undefined;
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
    publish(subject, data) {
      if (closed) return;
      for (const sub of subs) {
        if (subjectMatches(sub.pattern, subject)) queueMicrotask(() => sub.handler({ subject, data }));
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

/**
 * NATS signals (nats.js v3), authenticated with `auth` (the server refuses anonymous
 * connections). Connects with unlimited reconnects; publish never throws. A subject the
 * server's permissions deny is logged (as `nats status error`) and left to polling.
 */
export async function createNatsSignals(url: string, name: string, log: Logger, auth: NatsAuth): Promise<Signals> {
  const nc = await connect({ servers: url, name, maxReconnectAttempts: -1, reconnectTimeWait: 500, ...(await natsAuthOptions(auth)) });
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === "error") log.warn({ nats: s.type, err: s.error }, "nats status error");
      else log.info({ nats: s.type }, "nats status");
    }
  })().catch(() => undefined);
  return {
    nats: nc,
    publish(subject, data) {
      try {
        nc.publish(subject, data);
      } catch (err) {
        log.warn({ err, subject }, "nats publish failed; waiters will poll");
      }
    },
    subscribe(subject, handler, options) {
      const sub = nc.subscribe(subject, options?.queue ? { queue: options.queue } : {});
      void (async () => {
        for await (const m of sub) handler({ subject: m.subject, data: m.data });
      })().catch((err) => log.warn({ err, subject }, "nats subscription ended"));
      return () => sub.unsubscribe();
    },
    async close() {
      if (!nc.isClosed()) await nc.drain();
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
    publish(subject, data) {
      target?.publish(subject, data);
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
