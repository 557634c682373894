import { create, fromBinary, toBinary, type DescExtension, type DescFile, type DescMessage, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import {
  ServerReflection,
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "@seraph/proto/grpc/reflection/v1/reflection_pb.js";
import {
  ServerReflection as ServerReflectionAlpha,
  ServerReflectionRequestSchema as AlphaRequestSchema,
  ServerReflectionResponseSchema as AlphaResponseSchema,
} from "@seraph/proto/grpc/reflection/v1alpha/reflection_pb.js";

/** The two service names of gRPC server reflection (v1 and its predecessor v1alpha). */
export const REFLECTION_SERVICES: readonly string[] = [ServerReflection.typeName, ServerReflectionAlpha.typeName];

/** gRPC status codes reflection reports inside its ErrorResponse (not as the stream's status). */
const NOT_FOUND = 5;
const INVALID_ARGUMENT = 3;

/** What a reflection server knows: the files that define the listed services, with their imports. */
export interface ReflectionIndex {
  readonly services: readonly string[];
  /** A file by name and every file it imports, transitively, the file itself first. */
  fileWithImports(name: string): readonly DescFile[] | undefined;
  /** The file that defines a fully-qualified symbol (service, method, message, enum, field, extension). */
  fileOfSymbol(symbol: string): DescFile | undefined;
  /** Extensions of a message type, by field number. */
  extensionsOf(typeName: string): ReadonlyMap<number, DescExtension> | undefined;
}

/** Indexes the files that define `services` and everything they import. */
export function createReflectionIndex(services: readonly DescService[]): ReflectionIndex {
  const files = new Map<string, DescFile>();
  const symbols = new Map<string, DescFile>();
  const extensions = new Map<string, Map<number, DescExtension>>();
  const addMessage = (file: DescFile, m: DescMessage) => {
    symbols.set(m.typeName, file);
    for (const f of m.fields) symbols.set(`${m.typeName}.${f.name}`, file);
    for (const n of m.nestedMessages) addMessage(file, n);
    for (const e of m.nestedEnums) symbols.set(e.typeName, file);
    for (const x of m.nestedExtensions) addExtension(file, x);
  };
  const addExtension = (file: DescFile, x: DescExtension) => {
    symbols.set(x.typeName, file);
    const byNumber = extensions.get(x.extendee.typeName) ?? new Map<number, DescExtension>();
    byNumber.set(x.number, x);
    extensions.set(x.extendee.typeName, byNumber);
  };
  const addFile = (file: DescFile) => {
    if (files.has(file.proto.name)) return;
    files.set(file.proto.name, file);
    for (const m of file.messages) addMessage(file, m);
    for (const e of file.enums) symbols.set(e.typeName, file);
    for (const x of file.extensions) addExtension(file, x);
    for (const s of file.services) {
      symbols.set(s.typeName, file);
      for (const m of s.methods) symbols.set(`${s.typeName}.${m.name}`, file);
    }
    for (const d of file.dependencies) addFile(d);
  };
  for (const s of services) addFile(s.file);
  return {
    services: [...new Set(services.map((s) => s.typeName))].sort(),
    fileWithImports(name) {
      const first = files.get(name);
      if (first === undefined) return undefined;
      const out: DescFile[] = [];
      const seen = new Set<string>();
      const walk = (f: DescFile) => {
        if (seen.has(f.proto.name)) return;
        seen.add(f.proto.name);
        out.push(f);
        for (const d of f.dependencies) walk(d);
      };
      walk(first);
      return out;
    },
    fileOfSymbol: (symbol) => symbols.get(symbol.replace(/^\./, "")),
    extensionsOf: (typeName) => extensions.get(typeName.replace(/^\./, "")),
  };
}

/** The answer part of a reflection response. */
type Answer = NonNullable<MessageInitShape<typeof ServerReflectionResponseSchema>["messageResponse"]>;

/** One reflection answer: pure, so the v1 and v1alpha services share it. */
export function answerReflection(index: ReflectionIndex, req: ServerReflectionRequest): ServerReflectionResponse {
  return create(ServerReflectionResponseSchema, { validHost: req.host, originalRequest: req, messageResponse: answerOf(index, req) });
}

function answerOf(index: ReflectionIndex, req: ServerReflectionRequest): Answer {
  const error = (errorCode: number, errorMessage: string): Answer => ({ case: "errorResponse", value: { errorCode, errorMessage } });
  const files = (found: readonly DescFile[]): Answer => ({
    case: "fileDescriptorResponse",
    value: { fileDescriptorProto: found.map((f) => toBinary(FileDescriptorProtoSchema, f.proto)) },
  });
  const r = req.messageRequest;
  switch (r.case) {
    case "listServices":
      return { case: "listServicesResponse", value: { service: index.services.map((name) => ({ name })) } };
    case "fileByFilename": {
      const found = index.fileWithImports(r.value);
      return found ? files(found) : error(NOT_FOUND, `file ${r.value} is not known to this server`);
    }
    case "fileContainingSymbol": {
      const file = index.fileOfSymbol(r.value);
      return file ? files(index.fileWithImports(file.proto.name)!) : error(NOT_FOUND, `symbol ${r.value} is not known to this server`);
    }
    case "fileContainingExtension": {
      const x = index.extensionsOf(r.value.containingType)?.get(r.value.extensionNumber);
      return x ? files(index.fileWithImports(x.file.proto.name)!) : error(NOT_FOUND, `extension ${r.value.extensionNumber} of ${r.value.containingType} is not known to this server`);
    }
    case "allExtensionNumbersOfType": {
      if (index.fileOfSymbol(r.value) === undefined) return error(NOT_FOUND, `type ${r.value} is not known to this server`);
      const numbers = [...(index.extensionsOf(r.value)?.keys() ?? [])].sort((a, b) => a - b);
      return { case: "allExtensionNumbersResponse", value: { baseTypeName: r.value.replace(/^\./, ""), extensionNumber: numbers } };
    }
    default:
      return error(INVALID_ARGUMENT, "the request names no reflection query");
  }
}

/**
 * Registers grpc.reflection.v1 and v1alpha ServerReflection on `router`, describing `services`
 * (and reflection itself), so grpcurl and buf curl work without the .proto files. It answers
 * only schema questions: every other RPC keeps its own authentication.
 */
export function registerReflection(router: ConnectRouter, services: readonly DescService[]): void {
  const index = createReflectionIndex([...services, ServerReflection, ServerReflectionAlpha]);
  const v1: ServiceImpl<typeof ServerReflection> = {
    async *serverReflectionInfo(requests) {
      for await (const req of requests) yield answerReflection(index, req);
    },
  };
  // v1alpha's messages are v1's field for field: translate through the wire format.
  const alpha: ServiceImpl<typeof ServerReflectionAlpha> = {
    async *serverReflectionInfo(requests) {
      for await (const req of requests) {
        const answer = answerReflection(index, fromBinary(ServerReflectionRequestSchema, toBinary(AlphaRequestSchema, req)));
        yield fromBinary(AlphaResponseSchema, toBinary(ServerReflectionResponseSchema, answer));
      }
    },
  };
  router.service(ServerReflection, v1);
  router.service(ServerReflectionAlpha, alpha);
}
