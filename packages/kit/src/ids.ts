import { createHash, randomUUID } from "node:crypto";

/** A new random id (UUID v4). */
export function newId(): string {
  return randomUUID();
}

/** SHA-256 of bytes or UTF-8 text, lowercase hex. */
export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}
