import * as grpc from "@grpc/grpc-js";
import { fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { DescMethodUnary } from "@bufbuild/protobuf";

/**
 * Calls one unary method with the stock @grpc/grpc-js client (not Connect), serializing with
 * protobuf-es: proves the services speak plain gRPC to third-party clients.
 */
export function grpcJsUnary<I extends DescMessage, O extends DescMessage>(
  address: string,
  method: DescMethodUnary<I, O>,
  request: MessageShape<I>,
  token?: string,
): Promise<{ response?: MessageShape<O>; error?: grpc.ServiceError }> {
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  if (token !== undefined) metadata.set("authorization", `Bearer ${token}`);
  const path = `/${method.parent.typeName}/${method.name}`;
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      path,
      (m: MessageShape<I>) => Buffer.from(toBinary(method.input, m)),
      (b: Buffer) => fromBinary(method.output, b),
      request,
      metadata,
      { deadline: Date.now() + 10_000 },
      (error, response) => {
        client.close();
        resolve(error ? { error } : response === undefined ? {} : { response });
      },
    );
  });
}
