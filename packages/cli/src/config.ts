import { chmod, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { CliIo } from "./io.js";

/** The API the CLI talks to when nothing else is configured (embedded mode's gRPC port). */
export const DEFAULT_API_URL = "http://127.0.0.1:7400";

/** What `seraph login` stores. */
export interface StoredLogin {
  readonly api?: string;
  readonly token?: string;
}

/** The configuration directory: $SERAPH_CONFIG_DIR, else $XDG_CONFIG_HOME/seraph, else ~/.config/seraph. */
export function configDir(io: CliIo): string {
  const explicit = io.env["SERAPH_CONFIG_DIR"];
  if (explicit) return explicit;
  const xdg = io.env["XDG_CONFIG_HOME"];
  return join(xdg || join(io.home, ".config"), "seraph");
}

function loginFile(io: CliIo): string {
  return join(configDir(io), "login.json");
}

/** The stored login, or an empty one. */
export async function readLogin(io: CliIo): Promise<StoredLogin> {
  try {
    return JSON.parse(await readFile(loginFile(io), "utf8")) as StoredLogin;
  } catch {
    return {};
  }
}

/** Stores the login: directory 0700, file 0600 (the token is a secret). */
export async function writeLogin(io: CliIo, login: StoredLogin): Promise<string> {
  const dir = configDir(io);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
  const file = loginFile(io);
  await writeFile(file, `${JSON.stringify(login, null, 2)}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
  return file;
}

/** Removes the stored login. */
export async function removeLogin(io: CliIo): Promise<void> {
  await rm(loginFile(io), { force: true });
}

/** The API URL: --api, else $SERAPH_API_URL, else the stored one, else the default. */
export function resolveApiUrl(io: CliIo, flag: string | undefined, stored: StoredLogin): string {
  return flag || io.env["SERAPH_API_URL"] || stored.api || DEFAULT_API_URL;
}

/** The token: $SERAPH_TOKEN, else the stored one. */
export function resolveToken(io: CliIo, stored: StoredLogin): string | undefined {
  return io.env["SERAPH_TOKEN"] || stored.token || undefined;
}
