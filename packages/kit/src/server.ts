import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import type { Logger } from "pino";

/** Where and what a service serves. Port 0 picks a free port (tests). */
export interface ServerOptions {
  readonly name: string;
  readonly host: string;
  /** gRPC over h2c (prior knowledge), for services and stock gRPC clients. */
  readonly grpcPort: number;
  /** HTTP/1.1 for Connect and gRPC-Web (browsers, curl); undefined to not listen. */
  readonly httpPort?: number | undefined;
  readonly routes: (router: ConnectRouter) => void;
  readonly interceptors: readonly Interceptor[];
  readonly log: Logger;
  /** Optional non-RPC HTTP/1.1 handler tried first (static UI files); returns true when it answered. */
  readonly httpFallback?: (req: http.IncomingMessage, res: http.ServerResponse) => boolean;
}

/** A running server: its bound ports and a graceful close. */
export interface RunningServer {
  readonly grpcPort: number;
  readonly httpPort: number | undefined;
  readonly grpcUrl: string;
  readonly httpUrl: string | undefined;
  /** Stops accepting, lets in-flight RPCs finish until `deadlineMs`, then cuts what is left. */
  close(deadlineMs?: number): Promise<void>;
}

/** Serves one Connect handler on an h2c listener (gRPC) and an HTTP/1.1 listener (Connect, gRPC-Web). */
export async function startServer(opts: ServerOptions): Promise<RunningServer> {
  const adapter = connectNodeAdapter({
    routes: opts.routes,
    interceptors: [...opts.interceptors],
    grpc: true,
    grpcWeb: true,
    connect: true,
  });
  const h2 = http2.createServer({}, adapter);
  const sessions = new Set<http2.ServerHttp2Session>();
  h2.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  const grpcPort = await listen(h2, opts.host, opts.grpcPort);

  let h1: http.Server | undefined;
  let httpPort: number | undefined;
  const sockets = new Set<Socket>();
  if (opts.httpPort !== undefined) {
    const fallback = opts.httpFallback;
    h1 = http.createServer((req, res) => {
      if (fallback && fallback(req, res)) return;
      adapter(req, res);
    });
    h1.on("connection", (s: Socket) => {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
    });
    httpPort = await listen(h1, opts.host, opts.httpPort);
  }
  const hostForUrl = opts.host.includes(":") ? `[${opts.host}]` : opts.host;
  opts.log.info({ grpcPort, httpPort }, `${opts.name} listening`);

  return {
    grpcPort,
    httpPort,
    grpcUrl: `http://${hostForUrl}:${grpcPort}`,
    httpUrl: httpPort === undefined ? undefined : `http://${hostForUrl}:${httpPort}`,
    async close(deadlineMs = 10_000) {
      const closing: Promise<void>[] = [new Promise((r) => h2.close(() => r()))];
      for (const s of sessions) s.close();
      if (h1) {
        const server = h1;
        closing.push(new Promise((r) => server.close(() => r())));
        server.closeIdleConnections();
      }
      let timer: NodeJS.Timeout | undefined;
      const expired = new Promise<"expired">((r) => {
        timer = setTimeout(() => r("expired"), deadlineMs);
        timer.unref();
      });
      const result = await Promise.race([Promise.all(closing).then(() => "done" as const), expired]);
      clearTimeout(timer);
      if (result === "expired") {
        opts.log.warn({ sessions: sessions.size, sockets: sockets.size }, "shutdown deadline reached; cutting connections");
        for (const s of sessions) s.destroy();
        for (const s of sockets) s.destroy();
        await Promise.all(closing);
      }
    },
  };
}

function listen(server: http.Server | http2.Http2Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.once("error", onError);
    server.listen(port, host, () => {
      server.off("error", onError);
      resolve((server.address() as AddressInfo).port);
    });
  });
}
