import { createRequire } from "node:module";
import type { LibraryHandle } from "koffi";
import {
  Errno,
  NativeCallError,
  decodeWaitStatus,
  type CallResult,
  type FdResult,
  type NativeSystem,
  type PeerCredentials,
  type ReadableWatch,
  type SpawnRequest,
  type SpawnResult,
  type WaitResult,
} from "./native-system.js";

// koffi is loaded through CommonJS require, never bundled: every file it loads (its JS and the
// native koffi.node) is then in require.cache, which is how the supervisor names exactly the
// code it runs in its source hash (supervisor/source-hash.ts).
// Loaded on the first createNativeSystem (the facility probe), so its cost shows in that phase.
type Koffi = typeof import("koffi");
let loadedKoffi: Koffi | undefined;
function loadKoffi(): Koffi {
  loadedKoffi ??= createRequire(import.meta.url)("koffi") as Koffi;
  return loadedKoffi;
}

// x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl). Called through syscall(2)
// rather than glibc's wrappers so that glibc < 2.36 works too.
type NativeFn = ReturnType<LibraryHandle["func"]>;

const SYS_PIDFD_SEND_SIGNAL = 424;
const SYS_PIDFD_OPEN = 434;

const PR_SET_CHILD_SUBREAPER = 36;
const PR_GET_CHILD_SUBREAPER = 37;
const WNOHANG = 1;
const WALL = 0x40000000;
const O_RDONLY = 0;
const O_CLOEXEC = 0o2000000;
const SOL_SOCKET = 1;
const SO_PEERCRED = 17;
const POSIX_SPAWN_SETPGROUP = 0x02;
const POSIX_SPAWN_SETSIGDEF = 0x04;
const POSIX_SPAWN_SETSIGMASK = 0x08;
// glibc x86_64: sizeof(posix_spawn_file_actions_t) = 80, sizeof(posix_spawnattr_t) = 336,
// sizeof(sigset_t) = 128. Allocated with headroom; glibc only ever touches its own size.
const FILE_ACTIONS_BYTES = 256;
const SPAWNATTR_BYTES = 512;
const SIGSET_BYTES = 128;

/**
 * Loads libc through koffi and returns the real NativeSystem. Throws NativeCallError
 * (call "dlsym") when a required symbol is missing (e.g. glibc older than 2.34, which lacks
 * posix_spawn_file_actions_addclosefrom_np). Linux x86_64 only: the constants above are
 * the x86_64 ABI.
 */
export function createNativeSystem(): NativeSystem {
  if (process.platform !== "linux" || process.arch !== "x64") {
    throw new NativeCallError("platform", Errno.ENOSYS);
  }
  const koffi = loadKoffi();
  let lib: LibraryHandle;
  try {
    lib = koffi.load("libc.so.6");
  } catch (err) {
    throw new NativeCallError("dlopen(libc.so.6)", Errno.ENOENT, { cause: err });
  }
  const fn = (proto: string): NativeFn => {
    try {
      return lib.func(proto);
    } catch (err) {
      throw new NativeCallError(`dlsym(${proto})`, Errno.ENOSYS, { cause: err });
    }
  };

  const ucred = koffi.struct({ pid: "int32_t", uid: "uint32_t", gid: "uint32_t" });
  const intOut = koffi.out(koffi.pointer("int"));

  const getpid = fn("int getpid(void)");
  const getuid = fn("unsigned int getuid(void)");
  const getsid = fn("int getsid(int pid)");
  const setsid = fn("int setsid(void)");
  // prctl is variadic in glibc: every extra argument is passed with its exact C type.
  const prctl = fn("int prctl(int option, ...)");
  // syscall(2) is variadic too, but glibc's x86_64 syscall() is an assembly stub that moves
  // the integer argument registers into the kernel's and never reads %al, so exact fixed
  // prototypes per syscall are ABI-identical and skip koffi's per-call variadic type parsing
  // (this is the hot path of cleanup: three calls per signalled process).
  const sysPidfdOpen = fn("long syscall(long number, int pid, unsigned int flags)");
  const sysPidfdSendSignal = fn("long syscall(long number, int pidfd, int sig, void *info, unsigned int flags)");
  const close = fn("int close(int fd)");
  const waitpid = fn("int waitpid(int pid, _Out_ int *status, int options)");
  const pipe2 = fn("int pipe2(_Out_ int *fds, int flags)");
  // Classic declaration syntax: the struct type is anonymous, so creating a second
  // NativeSystem in one process does not collide on a registered type name.
  let getsockopt: NativeFn;
  try {
    getsockopt = lib.func("getsockopt", "int", ["int", "int", "int", koffi.out(koffi.pointer(ucred)), koffi.inout(koffi.pointer("uint32_t"))]);
  } catch (err) {
    throw new NativeCallError("dlsym(getsockopt)", Errno.ENOSYS, { cause: err });
  }
  const faInit = fn("int posix_spawn_file_actions_init(void *fa)");
  const faDestroy = fn("int posix_spawn_file_actions_destroy(void *fa)");
  const faAddOpen = fn("int posix_spawn_file_actions_addopen(void *fa, int fd, const char *path, int oflag, unsigned int mode)");
  const faAddDup2 = fn("int posix_spawn_file_actions_adddup2(void *fa, int fd, int newfd)");
  const faAddChdir = fn("int posix_spawn_file_actions_addchdir_np(void *fa, const char *path)");
  const faAddClosefrom = fn("int posix_spawn_file_actions_addclosefrom_np(void *fa, int from)");
  const attrInit = fn("int posix_spawnattr_init(void *attr)");
  const attrDestroy = fn("int posix_spawnattr_destroy(void *attr)");
  const attrSetFlags = fn("int posix_spawnattr_setflags(void *attr, short flags)");
  const attrSetPgroup = fn("int posix_spawnattr_setpgroup(void *attr, int pgroup)");
  const attrSetSigDefault = fn("int posix_spawnattr_setsigdefault(void *attr, const void *set)");
  const attrSetSigMask = fn("int posix_spawnattr_setsigmask(void *attr, const void *set)");
  const posixSpawn = fn(
    "int posix_spawn(_Out_ int *pid, const char *path, void *fa, void *attr, const char **argv, const char **envp)",
  );

  // Every bit set, not sigfillset(): glibc's sigfillset leaves out its internal signals 32 and
  // 33, which posix_spawn then leaves SIG_IGN in the child; with all bits set they go back to
  // SIG_DFL as well, so the command starts like one started from a login shell.
  // posix_spawnattr_set* copy the set, so plain buffers are enough.
  const allSignals = Buffer.alloc(SIGSET_BYTES, 0xff);
  const noSignals = Buffer.alloc(SIGSET_BYTES, 0);

  const errno = (): number => koffi.errno();

  return {
    getpid: () => getpid() as number,
    getuid: () => getuid() as number,
    getsid: (pid) => getsid(pid) as number,
    setsid() {
      const sid = setsid() as number;
      if (sid < 0) throw new NativeCallError("setsid", errno());
      return sid;
    },
    setChildSubreaper(on) {
      const rc = prctl(PR_SET_CHILD_SUBREAPER, "unsigned long", on ? 1 : 0, "unsigned long", 0, "unsigned long", 0, "unsigned long", 0) as number;
      if (rc !== 0) throw new NativeCallError("prctl(PR_SET_CHILD_SUBREAPER)", errno());
    },
    isChildSubreaper() {
      const out = [0];
      const rc = prctl(PR_GET_CHILD_SUBREAPER, intOut, out, "unsigned long", 0, "unsigned long", 0, "unsigned long", 0) as number;
      if (rc !== 0) throw new NativeCallError("prctl(PR_GET_CHILD_SUBREAPER)", errno());
      return out[0] !== 0;
    },
    pidfdOpen(pid): FdResult {
      const fd = Number(sysPidfdOpen(SYS_PIDFD_OPEN, pid, 0));
      return fd >= 0 ? { ok: true, fd } : { ok: false, errno: errno() };
    },
    pidfdSendSignal(pidfd, signal): CallResult {
      const rc = Number(sysPidfdSendSignal(SYS_PIDFD_SEND_SIGNAL, pidfd, signal, null, 0));
      return rc === 0 ? { ok: true } : { ok: false, errno: errno() };
    },
    close(fd) {
      close(fd);
    },
    waitAny(): WaitResult {
      const status = [0];
      for (;;) {
        const pid = waitpid(-1, status, WNOHANG | WALL) as number;
        if (pid > 0) return { kind: "reaped", pid, status: decodeWaitStatus(status[0] ?? 0) };
        if (pid === 0) return { kind: "none" };
        const e = errno();
        if (e === Errno.EINTR) continue;
        if (e === Errno.ECHILD) return { kind: "echild" };
        throw new NativeCallError("waitpid", e);
      }
    },
    pipe() {
      const fds = [-1, -1];
      if ((pipe2(fds, O_CLOEXEC) as number) !== 0) throw new NativeCallError("pipe2", errno());
      return [fds[0] ?? -1, fds[1] ?? -1] as const;
    },
    spawn(request: SpawnRequest): SpawnResult {
      const fa = koffi.alloc("uint8_t", FILE_ACTIONS_BYTES);
      const attr = koffi.alloc("uint8_t", SPAWNATTR_BYTES);
      let faReady = false;
      let attrReady = false;
      try {
        const check = (rc: unknown): void => {
          if (rc !== 0) throw new NativeCallError("posix_spawn setup", rc as number);
        };
        check(faInit(fa));
        faReady = true;
        check(attrInit(attr));
        attrReady = true;
        check(faAddOpen(fa, 0, "/dev/null", O_RDONLY, 0));
        check(faAddDup2(fa, request.stdoutFd, 1));
        check(faAddDup2(fa, request.stderrFd, 2));
        check(faAddChdir(fa, request.cwd));
        check(faAddClosefrom(fa, 3));
        check(attrSetFlags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK));
        check(attrSetPgroup(attr, 0));
        check(attrSetSigDefault(attr, allSignals));
        check(attrSetSigMask(attr, noSignals));
        const pidOut = [0];
        const rc = posixSpawn(pidOut, request.path, fa, attr, [...request.argv, null], [...request.envp, null]) as number;
        if (rc !== 0) return { ok: false, errno: rc };
        return { ok: true, pid: pidOut[0] ?? 0 };
      } finally {
        if (faReady) faDestroy(fa);
        if (attrReady) attrDestroy(attr);
        koffi.free(fa);
        koffi.free(attr);
      }
    },
    peerCredentials(fd): PeerCredentials {
      const cred: { pid?: number; uid?: number; gid?: number } = {};
      const len = [koffi.sizeof(ucred)];
      const rc = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, len) as number;
      if (rc !== 0) throw new NativeCallError("getsockopt(SO_PEERCRED)", errno());
      return { pid: cred.pid ?? -1, uid: cred.uid ?? -1, gid: cred.gid ?? -1 };
    },
    watchReadable(fd, onReadable): ReadableWatch {
      let open = true;
      const handle = koffi.node.poll(fd, { readable: true }, () => {
        if (!open) return;
        // A pidfd stays readable forever once its process exits: report once, then stop.
        open = false;
        handle.close();
        onReadable();
      });
      return {
        close() {
          if (!open) return;
          open = false;
          handle.close();
        },
      };
    },
  };
}
