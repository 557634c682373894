import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { ServerReflectionRequestSchema } from "@seraph/proto/grpc/reflection/v1/reflection_pb.js";
import { Health } from "@seraph/proto/grpc/health/v1/health_pb.js";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { describe, expect, it } from "vitest";
import { answerReflection, createReflectionIndex } from "./reflection.js";

const index = createReflectionIndex([GoalService, Health]);
const ask = (messageRequest: MessageInitShape<typeof ServerReflectionRequestSchema>["messageRequest"]) =>
  answerReflection(index, create(ServerReflectionRequestSchema, { host: "h", messageRequest }));

describe("gRPC server reflection answers", () => {
  it("lists exactly the services it was given, sorted", () => {
    const r = ask({ case: "listServices", value: "" });
    expect(r.validHost).toBe("h");
    expect(r.originalRequest?.messageRequest.case).toBe("listServices");
    expect(r.messageResponse.case === "listServicesResponse" && r.messageResponse.value.service.map((s) => s.name)).toEqual(["grpc.health.v1.Health", "seraph.api.v1.GoalService"]);
  });

  it("finds the file of a service, a method, a message, a field and a nested name, with its imports after it", () => {
    for (const symbol of ["seraph.api.v1.GoalService", "seraph.api.v1.GoalService.CreateGoal", "seraph.api.v1.CreateGoalRequest", ".seraph.api.v1.CreateGoalRequest", "seraph.api.v1.CreateGoalRequest.title"]) {
      const r = ask({ case: "fileContainingSymbol", value: symbol });
      expect(r.messageResponse.case, symbol).toBe("fileDescriptorResponse");
      if (r.messageResponse.case !== "fileDescriptorResponse") continue;
      expect(r.messageResponse.value.fileDescriptorProto.length).toBeGreaterThan(1);
    }
    const byName = ask({ case: "fileByFilename", value: "buf/validate/validate.proto" });
    expect(byName.messageResponse.case).toBe("fileDescriptorResponse");
  });

  it("answers NOT_FOUND (5) inside the stream for what it does not know, and INVALID_ARGUMENT (3) for an empty request", () => {
    for (const r of [
      ask({ case: "fileContainingSymbol", value: "seraph.api.v1.RepairService" }),
      ask({ case: "fileByFilename", value: "seraph/api/v1/repairs.proto" }),
      ask({ case: "allExtensionNumbersOfType", value: "no.such.Type" }),
      ask({ case: "fileContainingExtension", value: { containingType: "google.protobuf.FieldOptions", extensionNumber: 1 } }),
    ]) {
      expect(r.messageResponse.case).toBe("errorResponse");
      expect(r.messageResponse.value).toMatchObject({ errorCode: 5 });
    }
    expect(ask({ case: undefined }).messageResponse.value).toMatchObject({ errorCode: 3 });
  });

  it("knows the extensions its files declare (protovalidate's field rules extend FieldOptions)", () => {
    const numbers = ask({ case: "allExtensionNumbersOfType", value: "google.protobuf.FieldOptions" });
    expect(numbers.messageResponse.case).toBe("allExtensionNumbersResponse");
    const list = numbers.messageResponse.case === "allExtensionNumbersResponse" ? numbers.messageResponse.value.extensionNumber : [];
    expect(list.length).toBeGreaterThan(0);
    const ext = ask({ case: "fileContainingExtension", value: { containingType: "google.protobuf.FieldOptions", extensionNumber: list[0]! } });
    expect(ext.messageResponse.case).toBe("fileDescriptorResponse");
  });
});
