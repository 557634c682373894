import { chmodSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import type { NativeSystem } from "../native/native-system.js";
import { FrameDecoder } from "./framing.js";

/** Options of listenOneRequest. */
export interface OneRequestServerOptions {
  readonly socketPath: string;
  readonly native: Pick<NativeSystem, "peerCredentials">;
  /** Largest request payload accepted. */
  readonly maxRequestBytes: number;
  /** A connection that sent no complete request by then is closed (default 10000 ms). */
  readonly timeoutMs?: number;
  /** The one request of a connection from this process's uid (answer and close the socket). */
  readonly onRequest: (socket: Socket, payload: Buffer) => void | Promise<void>;
  /** Answers a refusal (`peer_credentials`, `peer_uid`, `frame_too_large`) and closes the socket. */
  readonly refuse: (socket: Socket, code: string, message: string) => void;
}

/** A listening one-request server. */
export interface OneRequestServer {
  /** Stops accepting and closes every open connection. */
  close(): Promise<void>;
}

/**
 * A Unix socket server (0600) whose connections each carry one framed request: SO_PEERCRED must
 * show this process's own uid (anything else is refused before a byte is read), the request
 * must fit `maxRequestBytes`, and bytes after the first frame are ignored. Used by the supervisor
 * host's launch socket and by a warm supervisor's warm.sock.
 */
export async function listenOneRequest(o: OneRequestServerOptions): Promise<OneRequestServer> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    // Before anything is written: a peer that is gone by the time its answer (or refusal) is
    // written makes the socket emit EPIPE / ECONNRESET, and an 'error' without a listener would
    // end this process (the supervisor host, with every supervisor in its namespace; or a warm
    // supervisor). The kubelet's exec probe of the host, as root, is refused and gone at once.
    socket.on("error", () => socket.destroy());
    const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
    let uid = -1;
    try {
      if (fd === undefined || fd < 0) throw new Error("accepted socket has no fd");
      uid = o.native.peerCredentials(fd).uid;
    } catch {
      o.refuse(socket, "peer_credentials", "peer credentials unavailable");
      return;
    }
    if (uid !== process.getuid?.()) {
      o.refuse(socket, "peer_uid", `peer uid ${uid} is not this process's uid ${process.getuid?.()}`);
      return;
    }
    const decoder = new FrameDecoder();
    let taken = false;
    let received = 0;
    const timer = setTimeout(() => socket.destroy(), o.timeoutMs ?? 10_000);
    socket.on("close", () => clearTimeout(timer));
    socket.on("data", (chunk: Buffer) => {
      if (taken) return;
      received += chunk.length;
      let frames: Buffer[];
      try {
        if (received > o.maxRequestBytes + 4) throw new Error(`a request is at most ${o.maxRequestBytes} bytes`);
        frames = decoder.push(chunk);
      } catch (err) {
        taken = true;
        o.refuse(socket, "frame_too_large", (err as Error).message);
        return;
      }
      const first = frames[0];
      if (first === undefined) return;
      taken = true;
      clearTimeout(timer);
      void o.onRequest(socket, first);
    });
  });
  await new Promise<void>((resolveListen, reject) => {
    server.once("error", reject);
    server.listen(o.socketPath, () => resolveListen());
  });
  chmodSync(o.socketPath, 0o600);
  return {
    close: async () => {
      const closed = new Promise<void>((r) => server.close(() => r()));
      for (const s of sockets) s.destroy();
      await closed;
    },
  };
}
