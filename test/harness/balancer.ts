import { createConnection, createServer, type Server, type Socket } from "node:net";

/** A round-robin TCP balancer on 127.0.0.1 in front of several backends (test only). */
export interface TcpBalancer {
  readonly port: number;
  readonly url: string;
  /** Connections accepted per backend port (how the load spread). */
  readonly accepted: Map<number, number>;
  close(): Promise<void>;
}

/**
 * Starts a balancer that hands each new TCP connection to the next backend port in turn, as an
 * operator's L4 load balancer in front of jobs-service replicas would. A backend that refuses
 * the connection (a killed replica) is skipped for the next one; a connection whose backend
 * dies is cut, as the real thing would cut it. HTTP/2 multiplexes every RPC of a client over one
 * connection, so a client reaches another replica only after its connection breaks.
 */
export async function startTcpBalancer(backends: () => readonly number[]): Promise<TcpBalancer> {
  let next = 0;
  const accepted = new Map<number, number>();
  const sockets = new Set<Socket>();
  const track = (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  };
  const connectTo = (client: Socket, tries: number) => {
    const ports = backends();
    if (tries >= ports.length || ports.length === 0) {
      client.destroy();
      return;
    }
    const port = ports[next++ % ports.length]!;
    const upstream = createConnection({ host: "127.0.0.1", port });
    track(upstream);
    let connected = false;
    upstream.once("connect", () => {
      connected = true;
      accepted.set(port, (accepted.get(port) ?? 0) + 1);
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    });
    upstream.on("error", () => {
      if (!connected) connectTo(client, tries + 1);
    });
    upstream.once("close", () => {
      if (connected) client.destroy();
    });
    client.once("close", () => upstream.destroy());
  };
  const server: Server = createServer({ pauseOnConnect: true }, (client) => {
    track(client);
    client.on("error", () => undefined);
    connectTo(client, 0);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("balancer has no port");
  return {
    port: address.port,
    url: `http://127.0.0.1:${address.port}`,
    accepted,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
