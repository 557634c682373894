/**
 * The system calls the supervisor needs, behind an interface so that everything above the
 * native layer can be unit-tested with a fake. The real implementation (koffi over libc and
 * raw syscalls) is in `libc.ts`; it is the only module of the service that imports koffi.
 */

/** Linux x86_64 errno values the supervisor branches on. */
export const Errno = Object.freeze({
  EPERM: 1,
  ENOENT: 2,
  ESRCH: 3,
  EINTR: 4,
  EBADF: 9,
  ECHILD: 10,
  EAGAIN: 11,
  EACCES: 13,
  EINVAL: 22,
  EMFILE: 24,
  ENOSYS: 38,
});

/** Linux x86_64 signal numbers the supervisor sends. */
export const Signal = Object.freeze({
  SIGKILL: 9,
  SIGTERM: 15,
  SIGCONT: 18,
  SIGSTOP: 19,
});

/** How a reaped child ended, decoded from its wait status. */
export type ExitStatus =
  | { readonly kind: "exited"; readonly code: number }
  | { readonly kind: "signaled"; readonly signal: number; readonly coreDumped: boolean };

/** One result of `waitpid(-1, &status, WNOHANG | __WALL)`. */
export type WaitResult =
  | { readonly kind: "reaped"; readonly pid: number; readonly status: ExitStatus }
  /** Children exist but none has changed state. */
  | { readonly kind: "none" }
  /** errno ECHILD: the caller has no children at all. The only proof of cleanup. */
  | { readonly kind: "echild" };

/** A file descriptor or the errno that refused it. */
export type FdResult = { readonly ok: true; readonly fd: number } | { readonly ok: false; readonly errno: number };

/** Success, or the errno of the failure. */
export type CallResult = { readonly ok: true } | { readonly ok: false; readonly errno: number };

/** Peer credentials of a connected Unix socket (SO_PEERCRED). */
export interface PeerCredentials {
  readonly pid: number;
  readonly uid: number;
  readonly gid: number;
}

/** Exactly what to execute: no PATH search, no shell, no inherited environment. */
export interface SpawnRequest {
  /** Absolute path of the executable (becomes the `path` argument of posix_spawn). */
  readonly path: string;
  /** Exact argv, argv[0] included. */
  readonly argv: readonly string[];
  /** Complete environment as `KEY=VALUE` strings. */
  readonly envp: readonly string[];
  /** Absolute working directory (posix_spawn_file_actions_addchdir_np). */
  readonly cwd: string;
  /** Write end that becomes the child's fd 1. */
  readonly stdoutFd: number;
  /** Write end that becomes the child's fd 2. */
  readonly stderrFd: number;
}

/** A spawned child pid or the errno posix_spawn returned (exec failures included). */
export type SpawnResult = { readonly ok: true; readonly pid: number } | { readonly ok: false; readonly errno: number };

/** A registration of interest in an fd becoming readable (a pidfd is readable once its process exits). */
export interface ReadableWatch {
  /** Stops watching; idempotent. Does not close the fd. */
  close(): void;
}

/** Raised by setup calls that have no meaningful partial result. */
export class NativeCallError extends Error {
  override readonly name = "NativeCallError";
  /** @param call the libc function or syscall; @param errno the errno it set */
  constructor(
    readonly call: string,
    readonly errno: number,
    options?: { cause?: unknown },
  ) {
    super(`${call} failed with errno ${errno}`, options);
  }
}

/**
 * The native operations the supervisor uses. Every method is synchronous and never blocks
 * (waits use WNOHANG), so it is safe to call on the event loop.
 */
export interface NativeSystem {
  /** getpid(2). */
  getpid(): number;
  /** getuid(2). */
  getuid(): number;
  /** getsid(2) of `pid` (0 = self), or -1 when it fails. */
  getsid(pid: number): number;
  /** setsid(2); throws NativeCallError on failure. */
  setsid(): number;
  /** prctl(PR_SET_CHILD_SUBREAPER, on); throws NativeCallError on failure. */
  setChildSubreaper(on: boolean): void;
  /** prctl(PR_GET_CHILD_SUBREAPER) read back; throws NativeCallError on failure. */
  isChildSubreaper(): boolean;
  /** pidfd_open(pid, 0) through syscall 434. */
  pidfdOpen(pid: number): FdResult;
  /** pidfd_send_signal(pidfd, signal, NULL, 0) through syscall 424. */
  pidfdSendSignal(pidfd: number, signal: number): CallResult;
  /** close(2); errors are ignored (there is nothing useful to do with them here). */
  close(fd: number): void;
  /** waitpid(-1, &status, WNOHANG | __WALL), retried on EINTR. */
  waitAny(): WaitResult;
  /** pipe2(O_CLOEXEC) → [readFd, writeFd]; throws NativeCallError on failure. */
  pipe(): readonly [number, number];
  /**
   * posix_spawn with: fd 0 from /dev/null, fds 1/2 dup'ed from the given write ends, every
   * other fd closed, the working directory set, every signal at its default disposition,
   * an empty signal mask, and a new process group (so a `kill(0, …)` from the command
   * cannot reach the supervisor).
   */
  spawn(request: SpawnRequest): SpawnResult;
  /** getsockopt(fd, SOL_SOCKET, SO_PEERCRED); throws NativeCallError on failure. */
  peerCredentials(fd: number): PeerCredentials;
  /** Calls `onReadable` (on the event loop) once `fd` polls readable; used on pidfds. */
  watchReadable(fd: number, onReadable: () => void): ReadableWatch;
}

/**
 * The calls that give a job a network namespace of its own. Each acts on the CALLING THREAD only
 * (network namespaces are per thread), so a caller on the main thread changes what a
 * posix_spawn from the main thread inherits and nothing else. Root (CAP_SYS_ADMIN,
 * CAP_NET_ADMIN) is needed for all of them.
 */
export interface NetworkNamespaceCalls {
  /** unshare(CLONE_NEWNET): the calling thread moves to a new network namespace (only `lo`, down). */
  unshareNetwork(): CallResult;
  /** setns(fd, CLONE_NEWNET): the calling thread moves to the namespace `fd` (an ns/net file) names. */
  enterNetwork(fd: number): CallResult;
  /** Sets IFF_UP on interface `name` of the calling thread's namespace (SIOCGIFFLAGS, SIOCSIFFLAGS on an AF_INET datagram socket). */
  interfaceUp(name: string): CallResult;
}

/** Decodes a raw wait status (the `int` waitpid stores) the way the W* macros do. */
export function decodeWaitStatus(status: number): ExitStatus {
  const low = status & 0x7f;
  if (low === 0) return { kind: "exited", code: (status >> 8) & 0xff };
  return { kind: "signaled", signal: low, coreDumped: (status & 0x80) !== 0 };
}
