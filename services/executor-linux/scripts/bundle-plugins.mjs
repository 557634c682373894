// esbuild plugins shared by the two bundles of this package: the per-job supervisor
// (scripts/build-supervisor.mjs) and the seraph-exec CLI's `run` (scripts/build-cli.mjs).
//
// The generated supervisor descriptors import buf/validate/validate.proto for their
// protovalidate annotations; neither bundle runs protovalidate (supervisor/spec.ts mirrors the
// rules), so a bundle gets an empty file of that name instead of building ~200 descriptors at
// every start. The annotations stay in the descriptors as unknown option bytes.
//
// Their descriptors are embedded as base64 (fileDesc("…")); Node 20 and 24 have no native
// Uint8Array.prototype.setFromBase64, so protobuf's pure-JS decoder ran over ≈ 10 KiB of base64 at
// every start, hot enough for V8 to OSR-compile it with TurboFan on a background thread (34 ms of
// compile, ≈ 6 MiB more of the node executable paged in, in 9 of 11 supervisor starts measured).
// A bundle's copy of protobuf's base64 module takes Buffer's native decoder for what that native
// method would accept (standard alphabet, padding only at the end) and keeps its own decoder for
// the rest (base64url, white space, inner padding), which is exactly protobuf's own fallback rule.
import { readFileSync } from "node:fs";
import { create, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";

const BASE64 = /[\\/]@bufbuild[\\/]protobuf[\\/]dist[\\/]esm[\\/]wire[\\/]base64-encoding\.js$/;
const NATIVE_BASE64 = "const nativeSetFromBase64 = Uint8Array.prototype.setFromBase64;";
const BUFFER_BASE64 = `const nativeSetFromBase64 = Uint8Array.prototype.setFromBase64 ?? function (s) {
    // Buffer's decoder for what the native method accepts; anything else throws, so protobuf falls back to its own.
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || (s.length & 3) === 1) throw new SyntaxError("not plain base64");
    const decoded = Buffer.from(s, "base64");
    this.set(decoded);
    return { read: s.length, written: decoded.length };
};`;
const VALIDATE = /^@bufbuild\/protovalidate\/gen\/buf\/validate\/validate_pb\.js$/;
/** The namespace of the empty validate.proto module (the only protovalidate input a bundle may have). */
export const EMPTY_VALIDATE_NAMESPACE = "seraph-empty-validate";

const emptyValidateFile = Buffer.from(
  toBinary(FileDescriptorProtoSchema, create(FileDescriptorProtoSchema, { name: "buf/validate/validate.proto", package: "buf.validate", syntax: "proto2" })),
).toString("base64");

/** protobuf's base64 decoding through Buffer where the native method would have taken it. */
export const nativeBase64 = {
  name: "native-base64",
  setup(b) {
    b.onLoad({ filter: BASE64 }, (args) => {
      const source = readFileSync(args.path, "utf8");
      if (!source.includes(NATIVE_BASE64)) throw new Error(`${args.path}: no "${NATIVE_BASE64}" (protobuf changed; update scripts/bundle-plugins.mjs)`);
      return { contents: source.replace(NATIVE_BASE64, BUFFER_BASE64), loader: "js" };
    });
  },
};

/** buf/validate/validate.proto by name only, resolved against `root` (a package with @bufbuild/protobuf). */
export function noProtovalidateDescriptors(root) {
  return {
    name: "no-protovalidate-descriptors",
    setup(b) {
      b.onResolve({ filter: VALIDATE }, (args) => ({ path: args.path, namespace: EMPTY_VALIDATE_NAMESPACE }));
      b.onLoad({ filter: /.*/, namespace: EMPTY_VALIDATE_NAMESPACE }, () => ({
        contents: `import { fileDesc } from "@bufbuild/protobuf/codegenv2";\n// buf/validate/validate.proto by name only: this bundle never evaluates its rules.\nexport const file_buf_validate_validate = fileDesc(${JSON.stringify(emptyValidateFile)});\n`,
        resolveDir: root,
        loader: "js",
      }));
    },
  };
}

/** Inputs of a build's metafile that are protovalidate code or descriptors (none may be). */
export function protovalidateInputs(metafile) {
  return Object.keys(metafile.inputs).filter((i) => i.includes("protovalidate") && !i.startsWith(`${EMPTY_VALIDATE_NAMESPACE}:`));
}

/** What a bundle's text imports (static `import … from` and `import()`), by specifier. */
export function importsOf(text) {
  return [...text.matchAll(/^import\s[^;]*?from\s*"([^"]+)"|\bimport\(\s*["'`]([^"'`]+)/gm)].map((m) => m[1] ?? m[2]);
}
