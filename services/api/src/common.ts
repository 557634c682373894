import type { Kysely, Transaction } from "kysely";
import type { ApiDatabase } from "./db/schema.js";

/** A database handle or an open transaction: what every repository function takes first. */
export type Db = Kysely<ApiDatabase> | Transaction<ApiDatabase>;

/** Milliseconds since the epoch as the int64 the protos carry. */
export function unixMs(d: Date | string | number): bigint {
  return BigInt(new Date(d).getTime());
}

/** True when `path` is absolute, normalized (no `.`/`..` segments, no `//`), without a trailing slash or NUL. */
export function isNormalizedAbsolute(path: string): boolean {
  if (!path.startsWith("/") || path.includes("\0")) return false;
  if (path !== "/" && path.endsWith("/")) return false;
  const segments = path.split("/").slice(1);
  if (path !== "/" && segments.some((s) => s === "" || s === "." || s === "..")) return false;
  return true;
}

/** True when absolute `path` equals `root` or lies below it. */
export function isUnder(path: string, root: string): boolean {
  if (root === "/") return true;
  return path === root || path.startsWith(`${root}/`);
}
