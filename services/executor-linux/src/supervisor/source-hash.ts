import { createHash } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { basename, dirname, relative } from "node:path";
import { statStamp } from "../profile/file-digests.js";

/**
 * The code a supervisor process runs: its one bundled entry (every module of `supervisor/` and
 * `native/` and the third-party JavaScript it uses, protobuf included) and the files it
 * loaded at run time through CommonJS require: koffi's JavaScript and its native `koffi.node`,
 * which stay outside the bundle. The supervisor lists the second part from its own
 * `require.cache` once koffi is loaded, so the list is what the process really loaded.
 */
export interface SupervisorCode {
  /** Absolute path of the bundle the process was started from. */
  readonly entry: string;
  /** Absolute paths of every file loaded through require (require.cache keys). */
  readonly modules: readonly string[];
}

/** How a loaded file is named in the hash: its path under the last node_modules, else relative to the bundle. */
export function moduleName(entry: string, path: string): string {
  const i = path.lastIndexOf("/node_modules/");
  return i >= 0 ? path.slice(i + "/node_modules/".length) : relative(dirname(entry), path);
}

const fileHash = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

/**
 * SHA-256 identifying exactly the code in `code`: "entry/<bundle file name>\0<sha256>\n", then
 * "<module name>\0<sha256>\n" for each loaded module, sorted by name (names, not absolute paths,
 * so the hash does not depend on where the tree is installed). Any change to any byte the
 * supervisor loads changes it.
 */
export function supervisorSourceSha256(code: SupervisorCode): string {
  const outer = createHash("sha256");
  outer.update(`entry/${basename(code.entry)}\0${fileHash(code.entry)}\n`);
  const named = code.modules.map((m) => ({ name: moduleName(code.entry, m), path: m })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const m of named) outer.update(`${m.name}\0${fileHash(m.path)}\n`);
  return outer.digest("hex");
}

/** A cache of supervisorSourceSha256 results owned by the caller, validated by every file's stat stamp. */
export type SourceHashCache = Map<string, { readonly stamps: string; readonly sha256: string }>;

/**
 * supervisorSourceSha256, re-hashing only when a file's stat stamp (statStamp: device, inode,
 * size, mode, mtime, ctime) changed since the cached result: any write to a file changes its ctime.
 */
export function cachedSupervisorSourceSha256(code: SupervisorCode, cache: SourceHashCache): string {
  const stamps = [code.entry, ...code.modules]
    .map((p) => {
      const st = statSync(p);
      return `${p}:${statStamp(st)}`;
    })
    .join("\n");
  const key = code.entry;
  const hit = cache.get(key);
  if (hit !== undefined && hit.stamps === stamps) return hit.sha256;
  const sha256 = supervisorSourceSha256(code);
  cache.set(key, { stamps, sha256 });
  return sha256;
}
