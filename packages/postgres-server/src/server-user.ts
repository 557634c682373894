import { execFileSync } from "node:child_process";

/** The uid and gid a PostgreSQL server runs as. */
export interface ServerUser {
  readonly uid: number;
  readonly gid: number;
  readonly name: string;
}

/** The system user a server started by root runs as (PostgreSQL refuses to run as root). */
export const SERVER_USER_NAME = "seraph-postgres";

function lookup(name: string): ServerUser | undefined {
  try {
    const uid = Number(execFileSync("id", ["-u", name], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim());
    const gid = Number(execFileSync("id", ["-g", name], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim());
    return Number.isInteger(uid) && Number.isInteger(gid) ? { uid, gid, name } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The user to run the server as: the caller itself when it is not root; as root, the system
 * user `seraph-postgres` (no home, no login shell), created with `useradd` when missing.
 */
export function serverUser(): ServerUser | undefined {
  if (typeof process.getuid !== "function" || process.getuid() !== 0) return undefined;
  const existing = lookup(SERVER_USER_NAME);
  if (existing) return existing;
  try {
    execFileSync(
      "useradd",
      ["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", SERVER_USER_NAME],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
  } catch (err) {
    // Exit 9: another process created it between our look-up and useradd.
    if ((err as { status?: number }).status !== 9) {
      throw new Error(`PostgreSQL cannot run as root and the user ${SERVER_USER_NAME} could not be created (useradd failed)`, { cause: err });
    }
  }
  const created = lookup(SERVER_USER_NAME);
  if (!created) throw new Error(`user ${SERVER_USER_NAME} is missing after useradd`);
  return created;
}
