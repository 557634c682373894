import { mkdtempSync, rmSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, test } from "vitest";
import { encodeFrame } from "./framing.js";
import { listenOneRequest } from "./one-request-server.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function dial(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(path);
    s.once("connect", () => resolve(s));
    s.once("error", reject);
  });
}

describe("listenOneRequest", () => {
  test("a peer of another uid that is gone before its refusal is written does not crash the server, which goes on serving", async () => {
    const dir = mkdtempSync(join(tmpdir(), "one-request-"));
    dirs.push(dir);
    const socketPath = join(dir, "s.sock");
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on("uncaughtException", onUncaught);
    let peerUid = 4242;
    let closePeer: (() => void) | undefined;
    const refused: string[] = [];
    const closed: Promise<void>[] = [];
    const server = await listenOneRequest({
      socketPath,
      // A probe or other client of another uid (the kubelet's exec probe runs as root) that
      // connects and closes at once: its socket is closed before the refusal is written.
      native: {
        peerCredentials: () => {
          closePeer?.();
          return { pid: 1, uid: peerUid, gid: peerUid };
        },
      },
      maxRequestBytes: 1024,
      onRequest: (socket, payload) => void socket.end(encodeFrame(Buffer.concat([Buffer.from("echo:"), payload]))),
      refuse: (socket, code) => {
        refused.push(code);
        closed.push(new Promise((r) => socket.once("close", () => r())));
        socket.end(encodeFrame(Buffer.alloc(64 * 1024, 1)));
      },
    });
    try {
      // Closed from within the server's accept (its peer-credential read), so the refusal is
      // always written to a peer that is gone.
      const gone = connect(socketPath);
      gone.on("error", () => {});
      closePeer = () => gone.destroy();
      await expect.poll(() => refused, { timeout: 5000 }).toEqual(["peer_uid"]);
      // The server's side of it closes; an 'error' (EPIPE, ECONNRESET) comes before 'close'.
      await closed[0];
      expect(uncaught).toEqual([]);

      closePeer = undefined;
      peerUid = process.getuid!();
      const ok = await dial(socketPath);
      const answer = new Promise<Buffer>((resolve) => {
        const chunks: Buffer[] = [];
        ok.on("data", (c: Buffer) => chunks.push(c));
        ok.on("end", () => resolve(Buffer.concat(chunks)));
      });
      ok.write(encodeFrame(Buffer.from("hi")));
      expect((await answer).subarray(4).toString()).toBe("echo:hi");
    } finally {
      process.off("uncaughtException", onUncaught);
      await server.close();
    }
  });
});
