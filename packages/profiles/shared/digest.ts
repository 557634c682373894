import { createHash } from "node:crypto";

/** Lower-case hex SHA-256 of `data` (strings are hashed as UTF-8). */
export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

/** True when `s` is a lower-case hex SHA-256. */
export function isSha256Hex(s: string): boolean {
  return /^[0-9a-f]{64}$/.test(s);
}
