/** Largest frame payload accepted on the control socket (the schema's documented cap). */
export const MAX_FRAME_BYTES = 4 * 1024 * 1024;

/** A length prefix announced more than MAX_FRAME_BYTES. */
export class FrameTooLargeError extends Error {
  override readonly name = "FrameTooLargeError";
  /** @param length the announced payload length */
  constructor(readonly length: number) {
    super(`frame of ${length} bytes exceeds the ${MAX_FRAME_BYTES}-byte cap`);
  }
}

/** Prefixes `payload` with its 4-byte big-endian length. */
export function encodeFrame(payload: Uint8Array): Buffer {
  if (payload.length > MAX_FRAME_BYTES) throw new FrameTooLargeError(payload.length);
  const out = Buffer.allocUnsafe(4 + payload.length);
  out.writeUInt32BE(payload.length, 0);
  out.set(payload, 4);
  return out;
}

/**
 * Splits a byte stream into frame payloads. Memory is bounded: a frame is only buffered after
 * its length prefix was checked against the cap.
 */
export class FrameDecoder {
  #chunks: Buffer[] = [];
  #buffered = 0;

  /** Adds bytes; returns every complete payload. Throws FrameTooLargeError on an oversized prefix. */
  push(chunk: Buffer): Buffer[] {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    const frames: Buffer[] = [];
    for (;;) {
      if (this.#buffered < 4) break;
      const head = this.#peek(4);
      const length = head.readUInt32BE(0);
      if (length > MAX_FRAME_BYTES) throw new FrameTooLargeError(length);
      if (this.#buffered < 4 + length) break;
      const all = this.#take(4 + length);
      frames.push(all.subarray(4));
    }
    return frames;
  }

  /** Bytes received but not yet part of a complete frame. */
  get pendingBytes(): number {
    return this.#buffered;
  }

  #peek(n: number): Buffer {
    const first = this.#chunks[0];
    if (first !== undefined && first.length >= n) return first.subarray(0, n);
    const joined = Buffer.concat(this.#chunks);
    this.#chunks = [joined];
    return joined.subarray(0, n);
  }

  #take(n: number): Buffer {
    const joined = this.#chunks.length === 1 ? (this.#chunks[0] as Buffer) : Buffer.concat(this.#chunks);
    const taken = Buffer.from(joined.subarray(0, n));
    const rest = joined.subarray(n);
    this.#chunks = rest.length > 0 ? [rest] : [];
    this.#buffered = rest.length;
    return taken;
  }
}
