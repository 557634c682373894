/**
 * A small tmpfs for full-disk tests (not part of the public API): mounted on a fresh mkdtemp
 * directory, filled to an exact number of free bytes, unmounted by its path. Needs root (mount);
 * smallFsGate says why it cannot, and with CI=true it throws instead (a CI test fails, never
 * skips).
 */
import { execFileSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmdirSync, statfsSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A mounted tmpfs of a fixed size. */
export interface SmallFs {
  readonly dir: string;
  /** Free bytes as statfs reports them to an unprivileged writer (bavail × bsize). */
  free(): number;
  /** Writes filler files under the mount until at most `leaveBytes` are free (page-rounded); returns the filler's path. */
  fill(leaveBytes: number, name?: string): string;
  unmount(): void;
}

/** Why a small tmpfs cannot be mounted here (undefined when it can); throws with CI=true. */
export function smallFsGate(): string | undefined {
  let reason: string | undefined;
  if (process.getuid?.() !== 0) reason = "mounting a tmpfs needs root";
  else {
    try {
      mountSmallFs(64 * 1024).unmount();
    } catch (err) {
      reason = `mount -t tmpfs failed: ${(err as Error).message}`;
    }
  }
  if (reason !== undefined && process.env["CI"] === "true") throw new Error(`full-disk tests cannot run in CI: ${reason}`);
  return reason;
}

/** Mounts a tmpfs of `sizeBytes` (mode 0700; at most `inodes` inodes, the root's included) on a fresh short directory under the system tmpdir. */
export function mountSmallFs(sizeBytes: number, inodes?: number): SmallFs {
  const dir = mkdtempSync(join(tmpdir(), "sfs-"));
  try {
    const options = `size=${sizeBytes},mode=0700${inodes !== undefined ? `,nr_inodes=${inodes}` : ""}`;
    execFileSync("mount", ["-t", "tmpfs", "-o", options, "tmpfs", dir], { stdio: "pipe" });
  } catch (err) {
    rmdirSync(dir);
    throw err;
  }
  let fillers = 0;
  const free = (): number => {
    const s = statfsSync(dir);
    return s.bavail * s.bsize;
  };
  return {
    dir,
    free,
    fill(leaveBytes, name) {
      const path = join(dir, name ?? `filler-${fillers++}`);
      const fd = openSync(path, "a", 0o600);
      try {
        const big = Buffer.alloc(1024 * 1024, 0x66);
        while (free() > leaveBytes + big.length) writeSync(fd, big);
        const page = big.subarray(0, 4096);
        while (free() > leaveBytes) writeSync(fd, page);
      } finally {
        closeSync(fd);
      }
      return path;
    },
    unmount() {
      execFileSync("umount", [dir], { stdio: "pipe" });
      rmdirSync(dir);
    },
  };
}

/** The mounts of one test file: `mount` as mountSmallFs, `unmountAll` (from afterAll) unmounts each by its path. */
export function smallFsPool(): { mount(sizeBytes: number, inodes?: number): SmallFs; unmountAll(): void } {
  const mounts: SmallFs[] = [];
  return {
    mount(sizeBytes, inodes) {
      const fs = mountSmallFs(sizeBytes, inodes);
      mounts.push(fs);
      return fs;
    },
    unmountAll() {
      for (const m of mounts.splice(0)) m.unmount();
    },
  };
}
