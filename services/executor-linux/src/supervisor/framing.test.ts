import { describe, expect, test } from "vitest";
import { FrameDecoder, FrameTooLargeError, MAX_FRAME_BYTES, encodeFrame } from "./framing.js";

describe("framing", () => {
  test("round-trips frames split at every byte boundary and coalesced", () => {
    const payloads = [Buffer.from("a"), Buffer.alloc(0), Buffer.from("hello world"), Buffer.alloc(70_000, 7)];
    const wire = Buffer.concat(payloads.map((p) => encodeFrame(p)));
    for (const step of [1, 3, 4, 5, 1000, wire.length]) {
      const d = new FrameDecoder();
      const got: Buffer[] = [];
      for (let i = 0; i < wire.length; i += step) got.push(...d.push(wire.subarray(i, i + step)));
      expect(got.map((b) => b.toString("hex"))).toEqual(payloads.map((b) => b.toString("hex")));
      expect(d.pendingBytes).toBe(0);
    }
  });

  test("uses a 4-byte big-endian length", () => {
    expect([...encodeFrame(Buffer.from([9, 8, 7]))]).toEqual([0, 0, 0, 3, 9, 8, 7]);
  });

  test("refuses a length prefix over 4 MiB before buffering the body", () => {
    const d = new FrameDecoder();
    const head = Buffer.alloc(4);
    head.writeUInt32BE(MAX_FRAME_BYTES + 1, 0);
    expect(() => d.push(head)).toThrow(FrameTooLargeError);
    expect(() => encodeFrame(Buffer.alloc(MAX_FRAME_BYTES + 1))).toThrow(FrameTooLargeError);
    const ok = new FrameDecoder();
    expect(ok.push(encodeFrame(Buffer.alloc(MAX_FRAME_BYTES))).length).toBe(1);
  });
});
