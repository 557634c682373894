import { create, toBinary } from "@bufbuild/protobuf";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import { SeraphError, sha256Hex, toConnectError } from "@seraph/kit";
import { PrerequisiteReportSchema, type ExecutorService, type InspectRequest, type ReadJobOutputResponse } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { BlockReasonSchema, IdentityKind, IdentitySchema, InspectionSchema, StepSchema, type Identity, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { NodeContainment } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";

/** The supervisor source hash the fake node reports unless a test changes it. */
export const SUPERVISOR_SHA256 = "5".repeat(64);

/** A fake executor node: repositories as in-memory files, and what it was asked. */
export interface FakeExecutor {
  readonly impl: Partial<ServiceImpl<typeof ExecutorService>>;
  /** Repositories by absolute path: relative path → file content. Edit a file to make the repository drift. */
  readonly repositories: Map<string, Map<string, string>>;
  /** Where a repository path really is (a link's target); default: the path itself. */
  readonly realPaths: Map<string, string>;
  /** Number of calls per method (a refusal before the node is reached leaves it unchanged). */
  readonly calls: Record<string, number>;
  /** What the node reports with every inspection (change to simulate a rebuilt executor or a new cgroup). */
  supervisorSourceSha256: string;
  containment: NodeContainment | undefined;
  /** The live output ReadJobOutput answers (default: nothing live). */
  liveOutput: (offset: bigint) => ReadJobOutputResponse | undefined;
  /** Adds a repository with its files. */
  addRepository(path: string, files: Record<string, string>): void;
}

/** A refusal as the real executor sends it: the text "message (reason)" and its ErrorInfo detail. */
const fail = (code: Code, reason: string, message: string) => toConnectError(new SeraphError(code, reason, message));

function under(path: string, dirs: readonly string[]): boolean {
  return dirs.length === 0 || dirs.some((d) => d === "." || path === d || path.startsWith(`${d}/`));
}

/** The inspection of in-memory files: every file under the source paths (and package.json), hashed, so any edit is drift. */
function inspectFiles(files: ReadonlyMap<string, string>, req: InspectRequest): Inspection {
  const missing = req.sourcePaths.filter((s) => ![...files.keys()].some((f) => under(f, [s])));
  const identities: Identity[] = [...files.entries()]
    .filter(([name]) => under(name, req.sourcePaths) || name === "package.json")
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, content]) => create(IdentitySchema, { kind: name === "package.json" ? IdentityKind.PACKAGE_JSON : IdentityKind.SOURCE_FILE, name, sha256: sha256Hex(content), size: BigInt(Buffer.byteLength(content)) }));
  const inspection = create(InspectionSchema, {
    profile: req.profile,
    admitted: missing.length === 0,
    reasons: missing.map((s) => create(BlockReasonSchema, { code: "source_path_not_found", message: `${s} does not exist`, subject: s })),
    selection: req.selection,
    steps: [create(StepSchema, { name: "test", scriptName: "test", scriptBody: "node --test test/a.test.js", argv: [req.runtimePath, "--test", "test/a.test.js"] })],
    identities,
    limits: req.limits,
    sourcePaths: req.sourcePaths,
    repositoryPath: req.repositoryPath,
    testPaths: req.testPaths,
  });
  inspection.inspectionSha256 = sha256Hex(toBinary(InspectionSchema, inspection));
  return inspection;
}

/**
 * An in-memory ExecutorService at the API's client boundary. Inspection hashes exactly the
 * inspected files (so editing one is drift), ReadSource refuses a changed file with `(drift)` as
 * the real node does, CheckProposal admits a diff whose `+++ b/` paths lie under the allowed
 * patch paths. Staging, supervisors and receipts are the executor's own tests.
 */
export function createFakeExecutor(): FakeExecutor {
  const repositories = new Map<string, Map<string, string>>();
  const realPaths = new Map<string, string>();
  const calls: Record<string, number> = {};
  const count = (m: string) => {
    calls[m] = (calls[m] ?? 0) + 1;
  };
  const repo = (path: string) => {
    const files = repositories.get(path);
    if (!files) throw fail(Code.FailedPrecondition, "not_found", `${path} is not a directory`);
    return files;
  };
  const fake: FakeExecutor = {
    repositories,
    realPaths,
    calls,
    supervisorSourceSha256: SUPERVISOR_SHA256,
    containment: undefined,
    liveOutput: () => undefined,
    addRepository(path, files) {
      repositories.set(path, new Map(Object.entries(files)));
    },
    impl: {
      async checkRepository(req) {
        count("checkRepository");
        if (!repositories.has(req.repositoryPath)) return { ok: false, code: "not_found", message: `${req.repositoryPath} is not a directory on this node` };
        const realPath = realPaths.get(req.repositoryPath) ?? req.repositoryPath;
        return { ok: true, code: "ok", realPath, directoryIds: [`1:${sha256Hex(realPath).slice(0, 8)}`], hasPackageJson: true, repositoryRoots: ["/repos"] };
      },
      async inspect(req) {
        count("inspect");
        return { inspection: inspectFiles(repo(req.repositoryPath), req), supervisorSourceSha256: fake.supervisorSourceSha256, containment: fake.containment };
      },
      async readSource(req) {
        count("readSource");
        const content = repo(req.repositoryPath).get(req.path);
        if (content === undefined) throw fail(Code.NotFound, "not_found", `${req.path} not found`);
        if (sha256Hex(content) !== req.expectedSha256) throw fail(Code.FailedPrecondition, "drift", `${req.path} changed since it was inspected`);
        return { content: Buffer.from(content), sha256: sha256Hex(content) };
      },
      async checkProposal(req) {
        count("checkProposal");
        repo(req.repositoryPath);
        const changed = [...req.diff.matchAll(/^\+\+\+ b\/(\S+)$/gm)].map((m) => m[1] ?? "");
        const reasons = changed.length === 0 ? [create(BlockReasonSchema, { code: "patch_malformed", message: "no file in the diff" })] : changed.filter((p) => !under(p, req.allowedPatchPaths)).map((p) => create(BlockReasonSchema, { code: "patch_path_not_allowed", message: `${p} may not be patched`, subject: p }));
        return { ok: reasons.length === 0, reasons, changedPaths: changed, diffSha256: sha256Hex(req.diff) };
      },
      async checkPrerequisites(req) {
        count("checkPrerequisites");
        return { report: create(PrerequisiteReportSchema, { ok: true, nodeId: "node-a", runtimePath: req.runtimePath, items: [{ name: "runtime", ok: true, code: "ok", message: `${req.runtimePath} is ${req.profile}'s runtime` }], supervisorSourceSha256: fake.supervisorSourceSha256 }) };
      },
      async readJobOutput(req) {
        count("readJobOutput");
        const out = fake.liveOutput(req.offset);
        if (!out) return { live: false, offset: req.offset, data: new Uint8Array(), keptBytes: 0n, eof: false };
        return out;
      },
    },
  };
  return fake;
}
