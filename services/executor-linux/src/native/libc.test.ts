// The real koffi bindings, in this test worker (which has no other children, so waitAny can
// only reap what this file spawned). The subreaper itself is probed in a child process by the
// facility tests: this worker must not become one.
import { Socket } from "node:net";
import { describe, expect, test } from "vitest";
import { createNativeSystem } from "./libc.js";
import { Errno } from "./native-system.js";

const available = process.platform === "linux" && process.arch === "x64";
if (!available && process.env["CI"] === "true") throw new Error("the native layer needs Linux x86_64 in CI");

async function readAll(fd: number): Promise<string> {
  const socket = new Socket({ fd, readable: true, writable: false });
  const chunks: Buffer[] = [];
  for await (const c of socket) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

describe.skipIf(!available)("native layer (koffi over libc)", () => {
  test("posix_spawn: exact argv, envp, cwd, clean signal state, only fds 0-2, pipes, pidfd exit watch, reap to ECHILD", async () => {
    const native = createNativeSystem();
    const [outR, outW] = native.pipe();
    const [errR, errW] = native.pipe();
    const spawned = native.spawn({
      path: "/bin/sh",
      argv: ["/bin/sh", "-c", 'printf "[%s][%s]\\n" "$0" "$1"; echo "X=$X HOME=${HOME-unset}"; pwd; grep -E "^Sig(Ign|Blk)" /proc/self/status; ls -m /proc/$$/fd; echo oops >&2; exit 5', "zero", "one two"],
      envp: ["X=1"],
      cwd: "/tmp",
      stdoutFd: outW,
      stderrFd: errW,
    });
    native.close(outW);
    native.close(errW);
    expect(spawned.ok).toBe(true);
    const pid = spawned.ok ? spawned.pid : -1;
    const pidfd = native.pidfdOpen(pid);
    expect(pidfd.ok).toBe(true);
    const exited = new Promise<void>((resolve) => native.watchReadable(pidfd.ok ? pidfd.fd : -1, resolve));
    const [out, err] = await Promise.all([readAll(outR), readAll(errR)]);
    await exited;
    expect(native.waitAny()).toEqual({ kind: "reaped", pid, status: { kind: "exited", code: 5 } });
    expect(native.waitAny()).toEqual({ kind: "echild" });
    if (pidfd.ok) native.close(pidfd.fd);
    const lines = out.split("\n");
    expect(lines[0]).toBe("[zero][one two]");
    expect(lines[1]).toBe("X=1 HOME=unset");
    expect(lines[2]).toBe("/tmp");
    expect(lines[3]).toMatch(/^SigBlk:\s+0+$/);
    expect(lines[4]).toMatch(/^SigIgn:\s+0+$/); // SIGPIPE etc. back to default (node ignores SIGPIPE)
    // Every other fd closed (the sh's own fds). No pipeline here: while sh sets one up it holds
    // the pipe's fds itself, and a fast `ls` would list them (a flake under load).
    expect(lines[5]?.trim()).toBe("0, 1, 2");
    expect(err).toBe("oops\n");
  });

  test("spawn failures come back as errno, nothing is left to reap", () => {
    const native = createNativeSystem();
    const [r, w] = native.pipe();
    const missing = native.spawn({ path: "/nonexistent/x", argv: ["/nonexistent/x"], envp: [], cwd: "/", stdoutFd: w, stderrFd: w });
    expect(missing).toEqual({ ok: false, errno: Errno.ENOENT });
    const badCwd = native.spawn({ path: "/bin/true", argv: ["/bin/true"], envp: [], cwd: "/nonexistent-dir", stdoutFd: w, stderrFd: w });
    expect(badCwd).toEqual({ ok: false, errno: Errno.ENOENT });
    native.close(r);
    native.close(w);
    expect(native.waitAny()).toEqual({ kind: "echild" });
  });

  test("pidfd_open on a pid that does not exist is ESRCH; signal 0 through a pidfd works", () => {
    const native = createNativeSystem();
    expect(native.pidfdOpen(2 ** 22 + 12345)).toEqual({ ok: false, errno: Errno.ESRCH });
    const self = native.pidfdOpen(native.getpid());
    expect(self.ok).toBe(true);
    if (self.ok) {
      expect(native.pidfdSendSignal(self.fd, 0)).toEqual({ ok: true });
      native.close(self.fd);
      expect(native.pidfdSendSignal(self.fd, 0)).toEqual({ ok: false, errno: Errno.EBADF });
    }
    expect(native.getpid()).toBe(process.pid);
    expect(native.getuid()).toBe(process.getuid?.());
  });
});
