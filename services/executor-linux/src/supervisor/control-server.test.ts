// The control server with a fake native layer (peer credentials are injected), over a real
// Unix socket in a private temp dir.
import { connect } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { pino } from "pino";
import { describe, expect, test } from "vitest";
import {
  CancelAckSchema,
  ClientFrameSchema,
  GoAckSchema,
  HelloAckSchema,
  Phase,
  ReadOutputResponseSchema,
  ServerFrameSchema,
  StatusResponseSchema,
  type ClientFrame,
  type ServerFrame,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { NativeSystem } from "../native/native-system.js";
import { ControlServer, type ControlHandlers } from "./control-server.js";
import { FrameDecoder, encodeFrame } from "./framing.js";

const TOKEN = "ab".repeat(32);

function fakeNative(peerUid: number): NativeSystem {
  const unused = (): never => {
    throw new Error("not used");
  };
  return {
    getpid: () => 1,
    getuid: () => 1000,
    getsid: unused,
    setsid: unused,
    setChildSubreaper: unused,
    isChildSubreaper: unused,
    pidfdOpen: unused,
    pidfdSendSignal: unused,
    close: unused,
    waitAny: unused,
    pipe: unused,
    spawn: unused,
    peerCredentials: () => ({ pid: 4242, uid: peerUid, gid: 1000 }),
    watchReadable: unused,
  };
}

function handlers(calls: string[]): ControlHandlers {
  return {
    helloAck: (previous) => create(HelloAckSchema, { phase: Phase.WAITING_FOR_GO, previousIncarnationId: previous }),
    go: () => {
      calls.push("go");
      return create(GoAckSchema, { started: true });
    },
    cancel: (reason) => {
      calls.push(`cancel:${reason}`);
      return create(CancelAckSchema, { phase: Phase.RUNNING });
    },
    status: () => create(StatusResponseSchema, { phase: Phase.RUNNING }),
    commandCount: () => 1,
    readOutput: async (r) => create(ReadOutputResponseSchema, { stream: r.stream, command: r.command }),
    receipt: async () => undefined,
    receiptDelivered: () => undefined,
  };
}

async function exchange(path: string, frames: ClientFrame[]): Promise<ServerFrame[]> {
  const socket = connect(path);
  const decoder = new FrameDecoder();
  const got: ServerFrame[] = [];
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", () => {
      for (const f of frames) socket.write(encodeFrame(toBinary(ClientFrameSchema, f)));
      setTimeout(() => socket.end(), 100);
    });
    socket.on("data", (c: Buffer) => got.push(...decoder.push(c).map((b) => fromBinary(ServerFrameSchema, b))));
    socket.once("close", () => resolve());
    socket.once("error", reject);
  });
  return got;
}

const hello = (token: string, incarnationId = "inc") =>
  create(ClientFrameSchema, { body: { case: "hello", value: { token, incarnationId } } });
const go = create(ClientFrameSchema, { body: { case: "go", value: {} } });

async function withServer(peerUid: number, fn: (path: string, calls: string[]) => Promise<void>): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "sxc-"));
  const path = join(dir, "ctl.sock");
  const lines: string[] = [];
  const log = pino({ level: "info" }, { write: (l: string) => void lines.push(l) });
  const calls: string[] = [];
  const server = new ControlServer({ socketPath: path, token: TOKEN, native: fakeNative(peerUid), log, handlers: handlers(calls) });
  await server.listen();
  try {
    await fn(path, calls);
  } finally {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return lines.join("");
}

describe("ControlServer", () => {
  test("a peer with another uid gets one ErrorFrame, is logged, and changes nothing", async () => {
    let calls: string[] = [];
    const log = await withServer(4321, async (path, c) => {
      calls = c;
      const frames = await exchange(path, [hello(TOKEN), go]);
      expect(frames.map((f) => f.body.case)).toEqual(["error"]);
      expect(frames[0]?.body.case === "error" && frames[0].body.value.code).toBe("peer_uid");
    });
    expect(calls).toEqual([]);
    expect(log).toContain('"code":"peer_uid"');
  });

  test("the right uid and token: HELLO first, then requests are served in order", async () => {
    await withServer(1000, async (path, calls) => {
      const cancel = create(ClientFrameSchema, { body: { case: "cancel", value: { reason: "r" } } });
      const frames = await exchange(path, [hello(TOKEN), go, cancel]);
      expect(frames.map((f) => f.body.case)).toEqual(["helloAck", "goAck", "cancelAck"]);
      expect(calls).toEqual(["go", "cancel:r"]);
    });
  });

  test("invalid read_output requests are refused after HELLO", async () => {
    await withServer(1000, async (path) => {
      const bad = create(ClientFrameSchema, { body: { case: "readOutput", value: { stream: 1, command: 5, offset: 0n, maxBytes: 10 } } });
      const frames = await exchange(path, [hello(TOKEN), bad, go]);
      expect(frames.map((f) => f.body.case)).toEqual(["helloAck", "error"]);
    });
  });

  test("a second HELLO on the same connection is refused", async () => {
    await withServer(1000, async (path, calls) => {
      const frames = await exchange(path, [hello(TOKEN), hello(TOKEN, "again"), go]);
      expect(frames.map((f) => f.body.case)).toEqual(["helloAck", "error"]);
      expect(calls).toEqual([]);
    });
  });
});
