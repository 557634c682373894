// The job network namespace's bookkeeping against fake calls (the real namespace, its loopback
// and what a job reaches from it are exercised by supervisor-client/network-scenarios.test.ts).
import { describe, expect, test } from "vitest";
import { probeContainment } from "./containment-probe.js";
import type { CallResult, NetworkNamespaceCalls } from "./native-system.js";
import { JobNetworkNamespace, NetworkNamespaceError, interfacesOf } from "./network-namespace.js";

const ok: CallResult = { ok: true };

/** Calls that record what was asked; unshare "succeeds" without moving the thread. */
function recording(over: Partial<NetworkNamespaceCalls> = {}): { calls: NetworkNamespaceCalls; log: string[] } {
  const log: string[] = [];
  return {
    log,
    calls: {
      unshareNetwork: () => (log.push("unshare"), over.unshareNetwork?.() ?? ok),
      enterNetwork: (fd) => (log.push(`setns ${fd >= 0 ? "fd" : fd}`), over.enterNetwork?.(fd) ?? ok),
      interfaceUp: (name) => (log.push(`up ${name}`), over.interfaceUp?.(name) ?? ok),
    },
  };
}

describe("JobNetworkNamespace.create", () => {
  test("an unshare the kernel refuses leaves nothing held and says its errno", () => {
    const { calls, log } = recording({ unshareNetwork: () => ({ ok: false, errno: 1 }) });
    expect(() => JobNetworkNamespace.create(calls)).toThrow(new NetworkNamespaceError("unshare(CLONE_NEWNET)", 1, "unshare(CLONE_NEWNET) failed with errno 1"));
    expect(log).toEqual(["unshare"]);
  });

  test("an unshare that left the thread where it was is refused, and the thread is moved back all the same", () => {
    const { calls, log } = recording();
    expect(() => JobNetworkNamespace.create(calls)).toThrow(/unshare returned but the thread is still in net:\[\d+\]/);
    expect(log).toEqual(["unshare", "setns fd"]);
  });

  test("a failure to move back is thrown with the first failure as its cause (the caller must not spawn)", () => {
    const { calls } = recording({ enterNetwork: () => ({ ok: false, errno: 22 }) });
    let caught: unknown;
    try {
      JobNetworkNamespace.create(calls);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(NetworkNamespaceError);
    expect((caught as NetworkNamespaceError).call).toBe("setns(host)");
    expect((caught as Error).cause).toBeInstanceOf(NetworkNamespaceError);
  });
});

describe("interfacesOf", () => {
  test("reads the interface names of /proc/<...>/net/dev", () => {
    const text = [
      "Inter-|   Receive                                                |  Transmit",
      " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed",
      "    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0",
      "  eth0: 1234 5 0 0 0 0 0 0 99 1 0 0 0 0 0 0",
      "",
    ].join("\n");
    expect(interfacesOf(text)).toEqual(["lo", "eth0"]);
  });
});

describe("probeContainment: the network namespace facility", () => {
  const noCgroup = { cgroupFsRoot: "/nonexistent-cgroup-root", selfCgroup: "0::/\n" };

  test("not root: unavailable, and the note says jobs have the host's network", () => {
    const p = probeContainment({ ...noCgroup, euid: 1000, networkProbe: () => undefined });
    expect(p.networkNamespace).toBe(false);
    expect(p.notes).toContain("A network namespace of the job's own needs root: jobs have the host's network.");
  });

  test("root: available when the probe made one, else unavailable with its reason", () => {
    expect(probeContainment({ ...noCgroup, euid: 0, networkProbe: () => undefined }).networkNamespace).toBe(true);
    const refused = probeContainment({ ...noCgroup, euid: 0, networkProbe: () => "A job network namespace could not be made: unshare(CLONE_NEWNET) failed with errno 1." });
    expect(refused.networkNamespace).toBe(false);
    expect(refused.notes).toContain("A job network namespace could not be made: unshare(CLONE_NEWNET) failed with errno 1.");
  });
});
