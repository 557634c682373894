import { closeSync, constants, openSync, readFileSync, readlinkSync } from "node:fs";
import type { NetworkNamespaceCalls } from "./native-system.js";

/** This thread's network namespace file (network namespaces are per thread, /proc/self is the main thread's). */
const THREAD_NET_NS = "/proc/thread-self/ns/net";
const THREAD_NET_DEV = "/proc/thread-self/net/dev";

/** A job network namespace could not be made, entered or left; `errno` is the refusing call's. */
export class NetworkNamespaceError extends Error {
  override readonly name = "NetworkNamespaceError";
  /** @param call what failed (unshare, setns, SIOCSIFFLAGS lo, ...); @param errno its errno (0 when not a system call) */
  constructor(
    readonly call: string,
    readonly errno: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The interface names a /proc/<...>/net/dev text lists ("lo" only in a new namespace). */
export function interfacesOf(netDev: string): string[] {
  const out: string[] = [];
  for (const line of netDev.split("\n").slice(2)) {
    const name = line.split(":")[0]?.trim() ?? "";
    if (name !== "") out.push(name);
  }
  return out;
}

/**
 * A network namespace of one job's own: made by unshare(CLONE_NEWNET) on the calling thread, its
 * loopback brought up, then the thread moves back to the namespace it came from at once; the job's
 * namespace is held by a file descriptor. `enter()` and `leave()` switch the calling thread around
 * one posix_spawn (the child inherits the thread's namespace), so the caller itself stays on the
 * host's network. Every call must come from the same thread (the supervisor's main thread).
 */
export class JobNetworkNamespace {
  readonly #calls: NetworkNamespaceCalls;
  readonly #hostFd: number;
  readonly #jobFd: number;
  #closed = false;
  #inside = false;

  /** The job's namespace ("net:[inode]") and the host's it was made from. */
  readonly namespace: string;
  readonly hostNamespace: string;
  /** Interfaces of the job's namespace once made (only "lo", up). */
  readonly interfaces: readonly string[];

  private constructor(calls: NetworkNamespaceCalls, hostFd: number, jobFd: number, hostNs: string, jobNs: string, interfaces: string[]) {
    this.#calls = calls;
    this.#hostFd = hostFd;
    this.#jobFd = jobFd;
    this.hostNamespace = hostNs;
    this.namespace = jobNs;
    this.interfaces = interfaces;
  }

  /**
   * Makes the namespace and brings `lo` up. Throws NetworkNamespaceError when any step fails; the
   * thread is then back in its own namespace and nothing is held (a failure to move back is
   * thrown too: the caller must not spawn after it).
   */
  static create(calls: NetworkNamespaceCalls): JobNetworkNamespace {
    const hostFd = openSync(THREAD_NET_NS, constants.O_RDONLY);
    const hostNs = readlinkSync(THREAD_NET_NS);
    const unshared = calls.unshareNetwork();
    if (!unshared.ok) {
      closeSync(hostFd);
      throw new NetworkNamespaceError("unshare(CLONE_NEWNET)", unshared.errno, `unshare(CLONE_NEWNET) failed with errno ${unshared.errno}`);
    }
    let jobFd = -1;
    let made: { jobNs: string; interfaces: string[] } | undefined;
    let failure: unknown;
    try {
      jobFd = openSync(THREAD_NET_NS, constants.O_RDONLY);
      const jobNs = readlinkSync(THREAD_NET_NS);
      if (jobNs === hostNs) throw new NetworkNamespaceError("unshare(CLONE_NEWNET)", 0, `unshare returned but the thread is still in ${hostNs}`);
      const up = calls.interfaceUp("lo");
      if (!up.ok) throw new NetworkNamespaceError("SIOCSIFFLAGS(lo, IFF_UP)", up.errno, `bringing the job namespace's loopback up failed with errno ${up.errno}`);
      made = { jobNs, interfaces: interfacesOf(readFileSync(THREAD_NET_DEV, "latin1")) };
    } catch (err) {
      failure = err;
    }
    const back = calls.enterNetwork(hostFd);
    if (!back.ok) throw new NetworkNamespaceError("setns(host)", back.errno, `moving back to ${hostNs} failed with errno ${back.errno}`, { cause: failure });
    if (made === undefined) {
      if (jobFd >= 0) closeSync(jobFd);
      closeSync(hostFd);
      throw failure;
    }
    return new JobNetworkNamespace(calls, hostFd, jobFd, hostNs, made.jobNs, made.interfaces);
  }

  /** True between enter() and leave(). */
  get inside(): boolean {
    return this.#inside;
  }

  /** Moves the calling thread into the job's namespace; throws NetworkNamespaceError when it cannot. */
  enter(): void {
    if (this.#closed) throw new NetworkNamespaceError("setns(job)", 0, "the job's network namespace is closed");
    const r = this.#calls.enterNetwork(this.#jobFd);
    if (!r.ok) throw new NetworkNamespaceError("setns(job)", r.errno, `entering the job's network namespace ${this.namespace} failed with errno ${r.errno}`);
    this.#inside = true;
  }

  /** Moves the calling thread back to the host's namespace; throws NetworkNamespaceError when it cannot. */
  leave(): void {
    const r = this.#calls.enterNetwork(this.#hostFd);
    if (!r.ok) throw new NetworkNamespaceError("setns(host)", r.errno, `moving back to ${this.hostNamespace} failed with errno ${r.errno}`);
    this.#inside = false;
  }

  /** Lets go of the namespace (it ends with its last process); idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    closeSync(this.#jobFd);
    closeSync(this.#hostFd);
  }
}

/**
 * Whether this host can give a job its own network namespace: makes one (as create() does) and
 * lets it go. Undefined when it can, else the sentence why not.
 */
export function networkNamespaceProblem(loadCalls: () => NetworkNamespaceCalls): string | undefined {
  try {
    JobNetworkNamespace.create(loadCalls()).close();
    return undefined;
  } catch (err) {
    return `A job network namespace could not be made: ${(err as Error).message}.`;
  }
}
