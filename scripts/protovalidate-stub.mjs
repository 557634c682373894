// Writes a structural copy of buf/validate/validate.proto (messages, enums, fields,
// extensions; no options or comments) under proto-deps/ from the descriptor embedded in
// the installed @bufbuild/protovalidate package. buf needs the file to compile our
// schema; the generated code imports the package's own descriptor at run time, so
// the CEL rules that protovalidate enforces come from the package, not from this copy.
// We cannot depend on the Buf Schema Registry from here, so the file is derived, not fetched.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { isFieldSet } from "@bufbuild/protobuf";
import { FieldDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { file_buf_validate_validate } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const fd = file_buf_validate_validate.proto;

const scalar = {
  1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
  8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64",
  17: "sint32", 18: "sint64",
};
const label = { 1: "optional", 2: "required", 3: "repeated" };

function typeName(f) {
  if (f.type === 11 || f.type === 14) return f.typeName;
  if (f.type === 10) throw new Error("groups are not supported");
  return scalar[f.type];
}
function field(f, ind, inOneof) {
  const l = inOneof ? "" : `${label[f.label]} `;
  const dflt = isFieldSet(f, FieldDescriptorProtoSchema.field.defaultValue) ? ` [default = ${f.type === 9 ? JSON.stringify(f.defaultValue) : f.defaultValue}]` : "";
  return `${ind}${l}${typeName(f)} ${f.name} = ${f.number}${dflt};`;
}
function enm(e, ind) {
  const out = [`${ind}enum ${e.name} {`];
  for (const v of e.value) out.push(`${ind}  ${v.name} = ${v.number};`);
  out.push(`${ind}}`);
  return out;
}
function msg(m, ind) {
  const out = [`${ind}message ${m.name} {`];
  const i2 = ind + "  ";
  for (const e of m.enumType) out.push(...enm(e, i2));
  for (const n of m.nestedType) out.push(...msg(n, i2));
  const oneofs = m.oneofDecl.map(() => []);
  for (const f of m.field) {
    if (isFieldSet(f, FieldDescriptorProtoSchema.field.oneofIndex) && !f.proto3Optional) oneofs[f.oneofIndex].push(f);
    else out.push(field(f, i2, false));
  }
  m.oneofDecl.forEach((o, idx) => {
    if (oneofs[idx].length === 0) return;
    out.push(`${i2}oneof ${o.name} {`);
    for (const f of oneofs[idx]) out.push(field(f, i2 + "  ", true));
    out.push(`${i2}}`);
  });
  for (const r of m.extensionRange) out.push(`${i2}extensions ${r.start} to ${r.end >= 536870912 ? "max" : r.end - 1};`);
  for (const r of m.reservedRange) out.push(`${i2}reserved ${r.start} to ${r.end - 1};`);
  out.push(`${ind}}`);
  return out;
}

const lines = [`syntax = "${fd.syntax || "proto2"}";`, `package ${fd.package};`];
for (const d of fd.dependency) lines.push(`import "${d}";`);
for (const e of fd.enumType) lines.push(...enm(e, ""));
for (const m of fd.messageType) lines.push(...msg(m, ""));
const byExtendee = new Map();
for (const x of fd.extension) byExtendee.set(x.extendee, [...(byExtendee.get(x.extendee) ?? []), x]);
for (const [extendee, xs] of byExtendee) {
  lines.push(`extend ${extendee} {`);
  for (const x of xs) lines.push(field(x, "  ", false));
  lines.push("}");
}
const out = join(root, "proto-deps", "buf", "validate", "validate.proto");
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, lines.join("\n") + "\n");
