import { spawn } from "node:child_process";
import { readFileSync, readlinkSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import { OwnerMarkerSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { describe, expect, it } from "vitest";
import { findInPidNamespace, scanPidNamespace } from "../native/pid-namespace.js";
import { provePidNamespaceGone } from "./namespace-proof.js";

const bootId = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
const own = readlinkSync("/proc/self/ns/pid");
const node = { nodeId: "node-a", bootId, incarnationId: "i-1" };
const marker = (pidNamespace: string, observerPidNamespace = own, boot = bootId) =>
  create(OwnerMarkerSchema, { supervisor: { pid: 2, startTimeTicks: 1n, bootId: boot }, pidNamespace, observerPidNamespace, writtenUnixMs: 1n });

/** A `sleep` as pid 1 of a new PID namespace; resolves once it is there. */
async function namespacedSleep(): Promise<{ pid: number; ns: string; stop: () => Promise<void> }> {
  const child = spawn("unshare", ["--pid", "--fork", "--mount-proc", "--kill-child", "/bin/sleep", "30"], { stdio: "ignore" });
  for (let i = 0; i < 200; i++) {
    const kids = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, "utf8").trim();
    if (kids !== "") {
      const pid = Number(kids.split(" ")[0]);
      const ns = readlinkSync(`/proc/${pid}/ns/pid`);
      if (ns !== own) {
        return {
          pid,
          ns,
          stop: () =>
            new Promise((r) => {
              child.once("exit", () => r());
              process.kill(pid, "SIGKILL");
            }),
        };
      }
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error("unshare did not start a namespaced process");
}

describe("PID namespace proof", () => {
  it("finds a process by namespace + inner pid, counts it as a member, and proves nothing while it lives", async () => {
    const s = await namespacedSleep();
    try {
      expect(findInPidNamespace("/proc", s.ns, 1)).toBe(s.pid);
      expect(findInPidNamespace("/proc", s.ns, 2)).toBeUndefined();
      expect(scanPidNamespace("/proc", s.ns).members).toEqual([s.pid]);
      expect(provePidNamespaceGone(marker(s.ns), node)).toMatchObject({ code: "namespace_alive" });
    } finally {
      await s.stop();
    }
    // Its init died: nothing is left in it, and the observation is made.
    const proof = provePidNamespaceGone(marker(s.ns), node, "/proc", () => 42);
    expect(proof).toMatchObject({ pidNamespace: s.ns, observerPidNamespace: own, bootId, nodeId: "node-a", incarnationId: "i-1", observedUnixMs: 42 });
    expect((proof as { scanned: number }).scanned).toBeGreaterThan(0);
  });

  it("refuses without a recorded namespace, on another boot, for its own namespace and from another observer", () => {
    expect(provePidNamespaceGone(marker(""), node)).toMatchObject({ code: "not_recorded" });
    expect(provePidNamespaceGone(marker("pid:[1]", own, "00000000-0000-0000-0000-000000000000"), node)).toMatchObject({ code: "other_boot" });
    expect(provePidNamespaceGone(marker(own), node)).toMatchObject({ code: "own_namespace" });
    expect(provePidNamespaceGone(marker("pid:[1]", "pid:[2]"), node)).toMatchObject({ code: "other_observer" });
  });
});
