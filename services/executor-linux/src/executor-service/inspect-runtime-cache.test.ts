import { chmod, mkdtemp, rm, utimes, writeFile } from "node:fs/promises";
import type * as FsPromises from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { createValidateInterceptor } from "@connectrpc/validate";
import { createErrorInterceptor, createRootLogger } from "@seraph/kit";
import { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { IdentityKind, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { PYTHON_PROFILE } from "@seraph/profiles/python3";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import type { RuntimeDigestCache } from "../profile/index.js";
import { createJsTestProject, createPythonProject, type FixtureRepo } from "../../testing/index.js";
import { createExecutorService } from "./executor-service.js";

// The spy: every open() of a file by the profile code goes through here, so a hash of the runtime
// (sha256File opens it to stream it) is counted per path. Everything else passes through unchanged.
const opened = vi.hoisted(() => new Map<string, number>());
vi.mock("node:fs/promises", async (importOriginal) => {
  const real = await importOriginal<typeof FsPromises>();
  const open: typeof real.open = (path, ...rest) => {
    opened.set(String(path), (opened.get(String(path)) ?? 0) + 1);
    return real.open(path, ...rest);
  };
  return { ...real, open, default: { ...real, open } };
});

const log = createRootLogger({ name: "inspect-cache-test", level: "silent" });
const facilities = create(FacilityReportSchema, { ok: true, items: [{ name: "pidfd", ok: true, code: "ok", message: "fake" }] });

describe("Inspect hashes the runtime through the executor's one runtime-digest cache", () => {
  let root: string;
  let bin: string;
  let nodeRepo: FixtureRepo;
  let pythonRepo: FixtureRepo;
  let fakeNode: string;
  let fakePython: string;
  let digests: RuntimeDigestCache;
  let client: Client<typeof ExecutorService>;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "seraph-inspect-cache-roots-"));
    bin = await mkdtemp(join(tmpdir(), "seraph-inspect-cache-bin-"));
    nodeRepo = await createJsTestProject({ parent: root });
    pythonRepo = await createPythonProject({ parent: root });
    // Runtimes this test owns (so it can change their mtime): they answer --version as the pinned
    // ones do; the cache under test sits before the version check, so they exercise the same path.
    fakeNode = join(bin, "node");
    await writeFile(fakeNode, "#!/bin/sh\necho v24.15.0\n");
    await chmod(fakeNode, 0o755);
    fakePython = join(bin, "python3");
    await writeFile(fakePython, "#!/bin/sh\necho Python 3.11.2\n");
    await chmod(fakePython, 0o755);
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
    await rm(bin, { recursive: true, force: true });
  });
  beforeEach(() => {
    // A fresh executor process: one cache instance, passed in as its dependency.
    digests = new Map();
    const transport = createRouterTransport(
      (router) => router.service(ExecutorService, createExecutorService({ nodeId: "n1", repositoryRoots: [root], log, readFacilities: async () => facilities, runtimeDigests: digests })),
      { router: { interceptors: [createErrorInterceptor(log), createValidateInterceptor()] } },
    );
    client = createClient(ExecutorService, transport);
    opened.clear();
  });

  const runtimeDigest = (kind: IdentityKind, i: Awaited<ReturnType<typeof client.inspect>>) =>
    i.inspection?.identities.find((x) => x.kind === kind)?.sha256;

  it("Node: a second Inspect of an unchanged runtime does not re-read it; a new mtime forces a re-hash", async () => {
    const inspect = () => client.inspect({ repositoryPath: nodeRepo.dir, selection: Selection.TEST, runtimePath: fakeNode, sourcePaths: ["src", "test"] });
    const first = await inspect();
    expect(opened.get(fakeNode)).toBe(1);
    expect(digests.get(fakeNode)?.sha256).toBe(runtimeDigest(IdentityKind.NODE_EXECUTABLE, first));
    const second = await inspect();
    expect(opened.get(fakeNode)).toBe(1);
    expect(runtimeDigest(IdentityKind.NODE_EXECUTABLE, second)).toBe(runtimeDigest(IdentityKind.NODE_EXECUTABLE, first));

    // Same bytes, new mtime (and ctime): the stamp no longer matches, so the file is read again.
    const later = new Date(Date.now() + 60_000);
    await utimes(fakeNode, later, later);
    await inspect();
    expect(opened.get(fakeNode)).toBe(2);

    // New bytes: re-hashed, and the inspection carries the new digest, not the cached one.
    await writeFile(fakeNode, "#!/bin/sh\n# changed\necho v24.15.0\n");
    const changed = await inspect();
    expect(opened.get(fakeNode)).toBe(3);
    expect(runtimeDigest(IdentityKind.NODE_EXECUTABLE, changed)).not.toBe(runtimeDigest(IdentityKind.NODE_EXECUTABLE, first));
    expect(runtimeDigest(IdentityKind.NODE_EXECUTABLE, changed)).toBe(digests.get(fakeNode)?.sha256);
  });

  it("CheckPrerequisites shares the cache with Inspect", async () => {
    await client.inspect({ repositoryPath: nodeRepo.dir, selection: Selection.TEST, runtimePath: fakeNode, sourcePaths: ["src", "test"] });
    expect(opened.get(fakeNode)).toBe(1);
    const { report } = await client.checkPrerequisites({ runtimePath: fakeNode });
    expect(report?.runtimeSha256).toBe(digests.get(fakeNode)?.sha256);
    expect(opened.get(fakeNode)).toBe(1);
  });

  it("Python: the interpreter digest is cached the same way", async () => {
    const inspect = () => client.inspect({ repositoryPath: pythonRepo.dir, selection: Selection.TEST, profile: PYTHON_PROFILE, runtimePath: fakePython, sourcePaths: ["calc", "tests"] });
    const first = await inspect();
    expect(opened.get(fakePython)).toBe(1);
    expect(digests.get(fakePython)?.sha256).toMatch(/^[0-9a-f]{64}$/);
    await inspect();
    expect(opened.get(fakePython)).toBe(1);
    const later = new Date(Date.now() + 60_000);
    await utimes(fakePython, later, later);
    await inspect();
    expect(opened.get(fakePython)).toBe(2);
    expect(first.inspection?.identities.some((x) => x.sha256 === digests.get(fakePython)?.sha256)).toBe(true);
  });
});
