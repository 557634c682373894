import { create, fromBinary, toBinary, type DescMessage, type DescMethodServerStreaming, type DescMethodUnary, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { createFileRegistry } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import {
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "@seraph/proto/grpc/reflection/v1/reflection_pb.js";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { ErrorInfoSchema, type ErrorInfo } from "@seraph/proto/google/rpc/error_details_pb.js";
import { StatusSchema } from "@seraph/proto/google/rpc/status_pb.js";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { RepairService, RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SandboxBackend, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch } from "@seraph/executor-linux/testing";
import { startJourneyStack, type JourneyStack } from "./journey-stack.js";

// The same journey driven by a stock @grpc/grpc-js client (no Connect on the client side),
// serializing with protobuf-es: a third-party gRPC program can take a repair to a queued job.
describe("the journey with a stock @grpc/grpc-js client", () => {
  let stack: JourneyStack;
  let client: grpc.Client;
  let metadata: grpc.Metadata;

  beforeAll(async () => {
    stack = await startJourneyStack();
    client = new grpc.Client(`127.0.0.1:${stack.api.server.grpcPort}`, grpc.credentials.createInsecure());
    metadata = new grpc.Metadata();
    metadata.set("authorization", `Bearer ${stack.operatorToken}`);
  });
  afterAll(async () => {
    client?.close();
    await stack?.stop();
  });

  function unary<I extends DescMessage, O extends DescMessage>(method: DescMethodUnary<I, O>, init: MessageInitShape<I>): Promise<MessageShape<O>> {
    return new Promise((resolve, reject) => {
      client.makeUnaryRequest(
        `/${method.parent.typeName}/${method.name}`,
        (m: MessageShape<I>) => Buffer.from(toBinary(method.input, m)),
        (b: Buffer) => fromBinary(method.output, b),
        create(method.input, init),
        metadata,
        { deadline: Date.now() + 60_000 },
        (err, res) => (err ? reject(err) : resolve(res as MessageShape<O>)),
      );
    });
  }

  function stream<I extends DescMessage, O extends DescMessage>(method: DescMethodServerStreaming<I, O>, init: MessageInitShape<I>): grpc.ClientReadableStream<MessageShape<O>> {
    return client.makeServerStreamRequest(
      `/${method.parent.typeName}/${method.name}`,
      (m: MessageShape<I>) => Buffer.from(toBinary(method.input, m)),
      (b: Buffer) => fromBinary(method.output, b),
      create(method.input, init),
      metadata,
    );
  }

  it("creates, watches, proposes, approves and gets the queued job; refusals carry gRPC status codes", async () => {
    await unary(SettingsService.method.updateSandboxSettings, {
      expectedRevision: 0n,
      settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: stack.node, enabled: true },
    });
    const repo = await createJsTestProject({ parent: stack.root, failing: true });
    const { repository } = await unary(RepositoryService.method.registerRepository, { path: repo.dir });
    const { goal } = await unary(GoalService.method.createGoal, { title: "grpc-js" });
    const { repair } = await unary(RepairService.method.createRepair, {
      goalId: goal!.id,
      goalRevision: goal!.revision,
      repositoryId: repository!.id,
      sourcePaths: ["src", "test"],
      allowedPatchPaths: ["src"],
      acceptanceCriteria: "add adds",
      selection: "npm\ntest",
    });
    expect(repair?.state).toBe(RepairState.INSPECTED);

    const seen: Repair[] = [];
    const call = stream(RepairService.method.watchRepair, { repairId: repair!.id });
    // The stream's first message is the repair as it is when the server starts watching: wait
    // for it before changing the repair, or under load it may already be PROPOSED.
    let firstSeen!: () => void;
    const first = new Promise<void>((resolve) => (firstSeen = resolve));
    const watched = new Promise<void>((resolve, reject) => {
      call.on("data", (m: { repair?: Repair }) => {
        seen.push(m.repair!);
        firstSeen();
        if (m.repair?.job) {
          call.cancel();
          resolve();
        }
      });
      call.on("error", (err: grpc.ServiceError) => (err.code === grpc.status.CANCELLED ? resolve() : reject(err)));
    });

    await first;
    const refused = await unary(RepairService.method.proposePatch, { repairId: repair!.id, route: { case: "model", value: true } }).catch((e: grpc.ServiceError) => e);
    expect((refused as grpc.ServiceError).code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(decodeURIComponent((refused as grpc.ServiceError).details)).toContain("(consent_required)");

    const { proposal } = await unary(RepairService.method.proposePatch, { repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch("js") } });
    expect(proposal?.valid).toBe(true);
    const { document } = await unary(RepairService.method.getApprovalDocument, { repairId: repair!.id, proposalId: proposal!.id });
    const mismatch = await unary(RepairService.method.approve, { repairId: repair!.id, documentSha256: "a".repeat(64) }).catch((e: grpc.ServiceError) => e);
    expect((mismatch as grpc.ServiceError).code).toBe(grpc.status.FAILED_PRECONDITION);
    const approved = await unary(RepairService.method.approve, { repairId: repair!.id, documentSha256: document!.documentSha256 });
    expect(approved.repair?.state).toBe(RepairState.APPROVED);
    expect(approved.repair?.job?.approvalId).toBe(approved.approval?.id);

    await watched;
    expect(seen.map((r) => RepairState[r.state])).toEqual(expect.arrayContaining(["INSPECTED", "PROPOSED", "APPROVED"]));
    expect(seen.at(-1)?.job?.id).toBe(approved.repair?.job?.id);

    const notFound = await unary(RepairService.method.getRepair, { repairId: "00000000-0000-4000-8000-000000000000" }).catch((e: grpc.ServiceError) => e);
    expect((notFound as grpc.ServiceError).code).toBe(grpc.status.NOT_FOUND);
  });

  it("discovers the API through gRPC server reflection (v1 and v1alpha), without a token or the .proto files, then calls what it found", async () => {
    // What grpcurl does: list services, fetch the file that defines one (with its imports),
    // build the types from those descriptors alone, and call a method with them.
    const ask = (version: "v1" | "v1alpha", requests: MessageInitShape<typeof ServerReflectionRequestSchema>[]) =>
      new Promise<ServerReflectionResponse[]>((resolve, reject) => {
        const call = client.makeBidiStreamRequest(
          `/grpc.reflection.${version}.ServerReflection/ServerReflectionInfo`,
          (m: ServerReflectionRequest) => Buffer.from(toBinary(ServerReflectionRequestSchema, m)),
          (b: Buffer) => fromBinary(ServerReflectionResponseSchema, b),
          new grpc.Metadata(),
          { deadline: Date.now() + 30_000 },
        );
        const out: ServerReflectionResponse[] = [];
        call.on("data", (r: ServerReflectionResponse) => out.push(r));
        call.on("error", reject);
        call.on("end", () => resolve(out));
        for (const r of requests) call.write(create(ServerReflectionRequestSchema, r));
        call.end();
      });
    for (const version of ["v1", "v1alpha"] as const) {
      const [list, byName, missing] = await ask(version, [
        { messageRequest: { case: "listServices", value: "" } },
        { messageRequest: { case: "fileContainingSymbol", value: "seraph.api.v1.GoalService" } },
        { messageRequest: { case: "fileContainingSymbol", value: "seraph.api.v1.NoSuchService" } },
      ]);
      const names = list!.messageResponse.case === "listServicesResponse" ? list!.messageResponse.value.service.map((x) => x.name) : [];
      expect(names).toEqual(expect.arrayContaining(["seraph.api.v1.GoalService", "seraph.api.v1.RepairService", "seraph.api.v1.OperatorService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"]));
      expect(missing!.messageResponse.case).toBe("errorResponse");
      expect(missing!.messageResponse.value).toMatchObject({ errorCode: grpc.status.NOT_FOUND });
      expect(byName!.messageResponse.case).toBe("fileDescriptorResponse");
      if (byName!.messageResponse.case !== "fileDescriptorResponse") continue;
      const files = byName!.messageResponse.value.fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b));
      // The requested file first, then every file it imports: the registry builds from them alone.
      expect(files[0]!.name).toBe("seraph/api/v1/goals.proto");
      const registry = createFileRegistry(files[0]!, (name) => files.find((f) => f.name === name));
      const service = registry.getService("seraph.api.v1.GoalService");
      expect(service?.methods.map((m) => m.name)).toContain("CreateGoal");
      const createGoal = service!.methods.find((m) => m.name === "CreateGoal")!;
      const created = await new Promise<any>((resolve, reject) => {
        client.makeUnaryRequest(
          `/${service!.typeName}/${createGoal.name}`,
          (m: any) => Buffer.from(toBinary(createGoal.input, m)),
          (b: Buffer) => fromBinary(createGoal.output, b),
          create(createGoal.input, { title: `found by reflection ${version}` } as never),
          metadata,
          { deadline: Date.now() + 30_000 },
          (err, res) => (err ? reject(err) : resolve(res)),
        );
      });
      expect(created.goal.title).toBe(`found by reflection ${version}`);
    }
  });

  /** The google.rpc.ErrorInfo details of a refusal, decoded from `grpc-status-details-bin` as any gRPC client can. */
  function errorInfos(err: grpc.ServiceError): ErrorInfo[] {
    const [bin, ...more] = err.metadata.get("grpc-status-details-bin");
    expect(more).toEqual([]);
    const status = fromBinary(StatusSchema, bin as Buffer);
    expect(status.code).toBe(err.code);
    return status.details.flatMap((any) => {
      const info = anyUnpack(any, ErrorInfoSchema);
      return info ? [info] : [];
    });
  }

  it("a refusal carries its reason and field as a google.rpc.ErrorInfo in grpc-status-details-bin", async () => {
    const missing = (await unary(RepairService.method.getRepair, { repairId: "00000000-0000-4000-8000-000000000000" }).catch((e: unknown) => e)) as grpc.ServiceError;
    expect(missing.code).toBe(grpc.status.NOT_FOUND);
    expect(errorInfos(missing).map((i) => ({ reason: i.reason, domain: i.domain, metadata: i.metadata }))).toEqual([{ reason: "not_found", domain: "seraph.dev", metadata: {} }]);
    // The message keeps its wording: "… (reason)".
    expect(missing.details).toMatch(/ \(not_found\)$/);

    const untitled = (await unary(GoalService.method.createGoal, { title: "" }).catch((e: unknown) => e)) as grpc.ServiceError;
    expect(untitled.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(errorInfos(untitled).map((i) => [i.reason, i.metadata["field"]])).toEqual([["string.min_len", "title"]]);

    const saved = metadata;
    metadata = new grpc.Metadata();
    metadata.set("authorization", "Bearer sk_not-a-real-token-at-all-0000");
    try {
      const anonymous = (await unary(GoalService.method.createGoal, { title: "x" }).catch((e: unknown) => e)) as grpc.ServiceError;
      expect(anonymous.code).toBe(grpc.status.UNAUTHENTICATED);
      expect(errorInfos(anonymous).map((i) => i.reason)).toEqual(["unauthenticated"]);
    } finally {
      metadata = saved;
    }
  });
});
