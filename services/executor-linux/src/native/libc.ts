import { createRequire } from "node:module";
import type { LibraryHandle } from "koffi";
import {
  Errno,
  NativeCallError,
  decodeWaitStatus,
  type CallResult,
  type FdResult,
  type NativeSystem,
  type NetworkNamespaceCalls,
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

/** koffi and libc.so.6, on Linux x86_64 only (NativeCallError "platform" elsewhere, "dlopen(libc.so.6)" when it does not load). */
function openLibc(): { koffi: Koffi; lib: LibraryHandle } {
  if (process.platform !== "linux" || process.arch !== "x64") {
    throw new NativeCallError("platform", Errno.ENOSYS);
  }
  const koffi = loadKoffi();
  try {
    return { koffi, lib: koffi.load("libc.so.6") };
  } catch (err) {
    throw new NativeCallError("dlopen(libc.so.6)", Errno.ENOENT, { cause: err });
  }
}

/**
 * Loads libc through koffi and returns the real NativeSystem. Throws NativeCallError
 * (call "dlsym") when a required symbol is missing (e.g. glibc older than 2.34, which lacks
 * posix_spawn_file_actions_addclosefrom_np). Linux x86_64 only: the constants above are
 * the x86_64 ABI.
 */
export function createNativeSystem(): NativeSystem {
  const { koffi, lib } = openLibc();
  const libc = bindLibc(koffi, lib);
  const errno = (): number => koffi.errno();
  return {
    ...processCalls(libc, errno),
    spawn: spawnCall(koffi, libc),
    peerCredentials(fd): PeerCredentials {
      const cred: { pid?: number; uid?: number; gid?: number } = {};
      const len = [koffi.sizeof(libc.ucred)];
      const rc = libc.getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, len) as number;
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

const CLONE_NEWNET = 0x40000000;
const AF_INET = 2;
const SOCK_DGRAM = 2;
const SIOCGIFFLAGS = 0x8913;
const SIOCSIFFLAGS = 0x8914;
const IFF_UP = 0x1;
const IFNAMSIZ = 16;
// struct ifreq: char ifr_name[IFNAMSIZ], then a 24-byte union whose first member here is short ifr_flags.
const IFREQ_BYTES = 40;

/**
 * Loads libc and returns the network-namespace calls (unshare, setns, SIOCSIFFLAGS). Throws
 * NativeCallError as createNativeSystem does. Linux x86_64 only.
 */
export function createNetworkNamespaceCalls(): NetworkNamespaceCalls {
  const { koffi, lib } = openLibc();
  let fns: Record<"unshare" | "setns" | "socket" | "ioctl" | "close", NativeFn>;
  try {
    fns = {
      unshare: lib.func("int unshare(int flags)"),
      setns: lib.func("int setns(int fd, int nstype)"),
      socket: lib.func("int socket(int domain, int type, int protocol)"),
      // ioctl is variadic in glibc: the request argument is passed with its exact C type.
      ioctl: lib.func("int ioctl(int fd, unsigned long request, ...)"),
      close: lib.func("int close(int fd)"),
    };
  } catch (err) {
    throw new NativeCallError("dlsym(unshare, setns, socket, ioctl)", Errno.ENOSYS, { cause: err });
  }
  const result = (rc: unknown): CallResult => (rc === 0 ? { ok: true } : { ok: false, errno: koffi.errno() });
  return {
    unshareNetwork: () => result(fns.unshare(CLONE_NEWNET)),
    enterNetwork: (fd) => result(fns.setns(fd, CLONE_NEWNET)),
    interfaceUp(name) {
      const nameBytes = Buffer.from(name, "utf8");
      if (nameBytes.length === 0 || nameBytes.length >= IFNAMSIZ) return { ok: false, errno: Errno.EINVAL };
      const sock = fns.socket(AF_INET, SOCK_DGRAM | O_CLOEXEC, 0) as number;
      if (sock < 0) return { ok: false, errno: koffi.errno() };
      try {
        const ifreq = Buffer.alloc(IFREQ_BYTES);
        nameBytes.copy(ifreq);
        if ((fns.ioctl(sock, SIOCGIFFLAGS, "void *", ifreq) as number) !== 0) return { ok: false, errno: koffi.errno() };
        ifreq.writeUInt16LE(ifreq.readUInt16LE(IFNAMSIZ) | IFF_UP, IFNAMSIZ);
        return result(fns.ioctl(sock, SIOCSIFFLAGS, "void *", ifreq));
      } finally {
        fns.close(sock);
      }
    },
  };
}

/** The libc functions and types the native layer calls, bound once per NativeSystem. */
type Libc = ReturnType<typeof bindLibc>;

function bindLibc(koffi: Koffi, lib: LibraryHandle) {
  const fn = (proto: string): NativeFn => {
    try {
      return lib.func(proto);
    } catch (err) {
      throw new NativeCallError(`dlsym(${proto})`, Errno.ENOSYS, { cause: err });
    }
  };
  const ucred = koffi.struct({ pid: "int32_t", uid: "uint32_t", gid: "uint32_t" });
  // Classic declaration syntax: the struct type is anonymous, so creating a second
  // NativeSystem in one process does not collide on a registered type name.
  let getsockopt: NativeFn;
  try {
    getsockopt = lib.func("getsockopt", "int", ["int", "int", "int", koffi.out(koffi.pointer(ucred)), koffi.inout(koffi.pointer("uint32_t"))]);
  } catch (err) {
    throw new NativeCallError("dlsym(getsockopt)", Errno.ENOSYS, { cause: err });
  }
  return {
    ucred,
    intOut: koffi.out(koffi.pointer("int")),
    getpid: fn("int getpid(void)"),
    getuid: fn("unsigned int getuid(void)"),
    getsid: fn("int getsid(int pid)"),
    setsid: fn("int setsid(void)"),
    // prctl is variadic in glibc: every extra argument is passed with its exact C type.
    prctl: fn("int prctl(int option, ...)"),
    // syscall(2) is variadic too, but glibc's x86_64 syscall() is an assembly stub that moves
    // the integer argument registers into the kernel's and never reads %al, so exact fixed
    // prototypes per syscall are ABI-identical and skip koffi's per-call variadic type parsing
    // (this is the hot path of cleanup: three calls per signalled process).
    sysPidfdOpen: fn("long syscall(long number, int pid, unsigned int flags)"),
    sysPidfdSendSignal: fn("long syscall(long number, int pidfd, int sig, void *info, unsigned int flags)"),
    close: fn("int close(int fd)"),
    waitpid: fn("int waitpid(int pid, _Out_ int *status, int options)"),
    pipe2: fn("int pipe2(_Out_ int *fds, int flags)"),
    getsockopt,
    faInit: fn("int posix_spawn_file_actions_init(void *fa)"),
    faDestroy: fn("int posix_spawn_file_actions_destroy(void *fa)"),
    faAddOpen: fn("int posix_spawn_file_actions_addopen(void *fa, int fd, const char *path, int oflag, unsigned int mode)"),
    faAddDup2: fn("int posix_spawn_file_actions_adddup2(void *fa, int fd, int newfd)"),
    faAddChdir: fn("int posix_spawn_file_actions_addchdir_np(void *fa, const char *path)"),
    faAddClosefrom: fn("int posix_spawn_file_actions_addclosefrom_np(void *fa, int from)"),
    attrInit: fn("int posix_spawnattr_init(void *attr)"),
    attrDestroy: fn("int posix_spawnattr_destroy(void *attr)"),
    attrSetFlags: fn("int posix_spawnattr_setflags(void *attr, short flags)"),
    attrSetPgroup: fn("int posix_spawnattr_setpgroup(void *attr, int pgroup)"),
    attrSetSigDefault: fn("int posix_spawnattr_setsigdefault(void *attr, const void *set)"),
    attrSetSigMask: fn("int posix_spawnattr_setsigmask(void *attr, const void *set)"),
    posixSpawn: fn("int posix_spawn(_Out_ int *pid, const char *path, void *fa, void *attr, const char **argv, const char **envp)"),
  };
}

/** Process identity, session, subreaper, pidfd, reaping and pipe calls. */
function processCalls(libc: Libc, errno: () => number): Omit<NativeSystem, "spawn" | "peerCredentials" | "watchReadable"> {
  const { prctl, intOut } = libc;
  return {
    getpid: () => libc.getpid() as number,
    getuid: () => libc.getuid() as number,
    getsid: (pid) => libc.getsid(pid) as number,
    setsid() {
      const sid = libc.setsid() as number;
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
      const fd = Number(libc.sysPidfdOpen(SYS_PIDFD_OPEN, pid, 0));
      return fd >= 0 ? { ok: true, fd } : { ok: false, errno: errno() };
    },
    pidfdSendSignal(pidfd, signal): CallResult {
      const rc = Number(libc.sysPidfdSendSignal(SYS_PIDFD_SEND_SIGNAL, pidfd, signal, null, 0));
      return rc === 0 ? { ok: true } : { ok: false, errno: errno() };
    },
    close(fd) {
      libc.close(fd);
    },
    waitAny(): WaitResult {
      const status = [0];
      for (;;) {
        const pid = libc.waitpid(-1, status, WNOHANG | WALL) as number;
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
      if ((libc.pipe2(fds, O_CLOEXEC) as number) !== 0) throw new NativeCallError("pipe2", errno());
      return [fds[0] ?? -1, fds[1] ?? -1] as const;
    },
  };
}

/** posix_spawn with stdin /dev/null, the given stdout/stderr, the cwd, fds from 3 closed, its own process group, every signal default and unblocked. */
function spawnCall(koffi: Koffi, libc: Libc): NativeSystem["spawn"] {
  // Every bit set, not sigfillset(): glibc's sigfillset leaves out its internal signals 32 and
  // 33, which posix_spawn then leaves SIG_IGN in the child; with all bits set they go back to
  // SIG_DFL as well, so the command starts like one started from a login shell.
  // posix_spawnattr_set* copy the set, so plain buffers are enough.
  const allSignals = Buffer.alloc(SIGSET_BYTES, 0xff);
  const noSignals = Buffer.alloc(SIGSET_BYTES, 0);
  return (request: SpawnRequest): SpawnResult => {
    const fa = koffi.alloc("uint8_t", FILE_ACTIONS_BYTES);
    const attr = koffi.alloc("uint8_t", SPAWNATTR_BYTES);
    let faReady = false;
    let attrReady = false;
    try {
      const check = (rc: unknown): void => {
        if (rc !== 0) throw new NativeCallError("posix_spawn setup", rc as number);
      };
      check(libc.faInit(fa));
      faReady = true;
      check(libc.attrInit(attr));
      attrReady = true;
      check(libc.faAddOpen(fa, 0, "/dev/null", O_RDONLY, 0));
      check(libc.faAddDup2(fa, request.stdoutFd, 1));
      check(libc.faAddDup2(fa, request.stderrFd, 2));
      check(libc.faAddChdir(fa, request.cwd));
      check(libc.faAddClosefrom(fa, 3));
      check(libc.attrSetFlags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK));
      check(libc.attrSetPgroup(attr, 0));
      check(libc.attrSetSigDefault(attr, allSignals));
      check(libc.attrSetSigMask(attr, noSignals));
      const pidOut = [0];
      const rc = libc.posixSpawn(pidOut, request.path, fa, attr, [...request.argv, null], [...request.envp, null]) as number;
      if (rc !== 0) return { ok: false, errno: rc };
      return { ok: true, pid: pidOut[0] ?? 0 };
    } finally {
      if (faReady) libc.faDestroy(fa);
      if (attrReady) libc.attrDestroy(attr);
      koffi.free(fa);
      koffi.free(attr);
    }
  };
}
