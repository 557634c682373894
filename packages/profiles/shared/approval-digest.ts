import { clone, toBinary } from "@bufbuild/protobuf";
import { ApprovalDocumentSchema, type ApprovalDocument } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { sha256Hex } from "./digest.js";

/**
 * The SHA-256 a person approves: over the protobuf binary encoding (protobuf-es toBinary) of the
 * approval document with document_sha256 empty. The encoding is canonical for this message:
 * fields are written in field-number order, repeated fields in their order, it has no maps and no
 * unknown fields, and default values are omitted — so the same document always hashes the same.
 * The one rule for the API (which issues and approves by it) and for recovery in the jobs
 * service (which re-hashes the stored document before it releases a slot).
 */
export function approvalDocumentSha256(doc: ApprovalDocument): string {
  const body = clone(ApprovalDocumentSchema, doc);
  body.documentSha256 = "";
  return sha256Hex(toBinary(ApprovalDocumentSchema, body));
}
