import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { constants } from "node:fs";
import { access, open, realpath, stat } from "node:fs/promises";
import { isAbsolute } from "node:path";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason } from "@seraph/profiles";
import { statStamp } from "./file-digests.js";
import { PINNED_NODE_VERSION } from "./pinned-runtime.js";

export { PINNED_NODE_PACKAGE, PINNED_NODE_VERSION, resolvePinnedNode, resolvePinnedNodeSync } from "./pinned-runtime.js";

/** How the runtime is checked; everything has a profile default. */
export interface RuntimeExpectation {
  /** Exact `node --version` output expected (default "v24.15.0"). */
  readonly expectedVersion?: string;
  /** Optional exact SHA-256 of the executable file. */
  readonly expectedSha256?: string;
  /** Bound on `node --version` (default 5 s). */
  readonly timeoutMs?: number;
  /**
   * Optional caller-owned cache of executable digests, keyed by real path and validated by
   * (device, inode, size, mtime, ctime): any write to the file changes ctime, so a hit is the
   * same bytes. Without it every check re-hashes the ~120 MB executable.
   */
  readonly digestCache?: RuntimeDigestCache;
}

/** A cache of executable digests owned by the caller (never module state). */
export type RuntimeDigestCache = Map<string, { readonly stamp: string; readonly sha256: string; readonly size: number; readonly version?: string }>;

/** The result of checking one runtime path; `ok` only when every check passed. */
export interface RuntimeCheck {
  readonly ok: boolean;
  /** The path as configured. */
  readonly nodePath: string;
  /** The resolved real path; this is what runs, so a re-pointed symlink cannot swap binaries. */
  readonly realPath: string;
  readonly version: string;
  readonly sha256: string;
  readonly size: number;
  readonly reasons: readonly BlockReason[];
}

/** Streams a file through SHA-256 (the runtime is ~120 MB, so it is never read into memory whole). */
export async function sha256File(path: string): Promise<{ sha256: string; size: number }> {
  let handle;
  try {
    handle = await open(path, constants.O_RDONLY | (constants.O_NOATIME ?? 0));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EPERM") throw err;
    handle = await open(path, constants.O_RDONLY);
  }
  const hash = createHash("sha256");
  let size = 0;
  try {
    const { size: statSize } = await handle.stat();
    const buffer = Buffer.allocUnsafe(Math.max(1, Math.min(1 << 20, statSize + 1)));
    for (;;) {
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, null);
      if (bytesRead === 0) break;
      hash.update(buffer.subarray(0, bytesRead));
      size += bytesRead;
    }
  } finally {
    await handle.close();
  }
  return { sha256: hash.digest("hex"), size };
}

function runVersion(path: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    // An empty environment: no NODE_OPTIONS, no PATH, nothing inherited can change what runs.
    execFile(path, ["--version"], { env: {}, timeout: timeoutMs, maxBuffer: 4096, windowsHide: true }, (err, stdout) => {
      if (err) reject(err);
      else resolve(stdout.trim());
    });
  });
}

/**
 * Checks an installed Node runtime: absolute path, regular executable file, `--version` (run with
 * an empty environment, bounded in time) equal to the expected version, and SHA-256 equal to the
 * expected hash when one is configured. Never downloads or installs anything.
 */
export async function checkRuntime(nodePath: string, expect: RuntimeExpectation = {}): Promise<RuntimeCheck> {
  const expectedVersion = expect.expectedVersion ?? PINNED_NODE_VERSION;
  const base = { nodePath, realPath: "", version: "", sha256: "", size: 0 };
  const blocked = (reason: BlockReason, extra: Partial<RuntimeCheck> = {}): RuntimeCheck => ({ ...base, ...extra, ok: false, reasons: [reason] });
  if (!isAbsolute(nodePath)) {
    return blocked(blockReason("runtime_path_not_absolute", `The Node runtime must be configured as an absolute path; "${nodePath}" is not.`, nodePath));
  }
  let real: string;
  try {
    real = await realpath(nodePath);
  } catch {
    return blocked(blockReason("runtime_missing", `No Node runtime is installed at ${nodePath}; install Node ${expectedVersion} there (nothing is downloaded at job time).`, nodePath));
  }
  const st = await stat(real);
  if (!st.isFile()) return blocked(blockReason("runtime_not_regular_file", `The Node runtime ${nodePath} is not a regular file.`, nodePath), { realPath: real });
  try {
    await access(real, constants.X_OK);
  } catch {
    return blocked(blockReason("runtime_not_executable", `The Node runtime ${nodePath} is not executable.`, nodePath), { realPath: real });
  }
  const stamp = statStamp(st);
  const cached = expect.digestCache?.get(real);
  const same = cached !== undefined && cached.stamp === stamp;
  const { sha256, size } = same ? cached : await sha256File(real);
  expect.digestCache?.set(real, { stamp, sha256, size });
  const found = { realPath: real, sha256, size };
  if (expect.expectedSha256 !== undefined && expect.expectedSha256.toLowerCase() !== sha256) {
    return blocked(
      blockReason("runtime_hash_mismatch", `The Node runtime ${nodePath} has SHA-256 ${sha256}, but ${expect.expectedSha256.toLowerCase()} is configured.`, nodePath),
      found,
    );
  }
  // The version the same bytes printed before (same stat stamp, so the same binary: any write
  // changes the stamp) is not asked again; a changed binary is re-hashed and asked.
  let version: string;
  try {
    version = same && cached.version !== undefined ? cached.version : await runVersion(real, expect.timeoutMs ?? 5000);
  } catch (err) {
    return blocked(
      blockReason("runtime_version_unreadable", `"${nodePath} --version" did not answer within the bound (${(err as Error).message.split("\n")[0]}).`, nodePath),
      found,
    );
  }
  if (!/^v\d+\.\d+\.\d+$/.test(version)) {
    return blocked(blockReason("runtime_version_unreadable", `"${nodePath} --version" printed "${version.slice(0, 40)}", which is not a Node version.`, nodePath), found);
  }
  expect.digestCache?.set(real, { stamp, sha256, size, version });
  if (version !== expectedVersion) {
    return blocked(
      blockReason("runtime_version_mismatch", `The Node runtime ${nodePath} is ${version}; the profile requires exactly ${expectedVersion}.`, nodePath),
      { ...found, version },
    );
  }
  return { ...base, ...found, version, ok: true, reasons: [] };
}
