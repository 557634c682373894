import { ScalarType, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import { InvalidArgumentError, toConnectError } from "./errors.js";

/** The reason code of a request string that contains U+0000. */
export const NUL_REASON = "string_contains_nul";

const hasNul = (v: unknown): boolean => typeof v === "string" && v.includes("\u0000");

/**
 * The path of the first string field (at any depth: repeated, map keys and values, nested
 * messages, oneofs) of `message` that contains U+0000, in protovalidate's field-path form
 * (`source_paths[2]`, `settings.model_routes[0].base_url`), or undefined when there is none.
 * PostgreSQL text cannot store U+0000, so such a request would fail at the database instead
 * of being refused for its field.
 */
export function nulStringField<D extends DescMessage>(schema: D, message: MessageShape<D>): string | undefined {
  return walk(schema, message as unknown as Record<string, unknown>, "");
}

function walk(desc: DescMessage, msg: Record<string, unknown>, prefix: string): string | undefined {
  for (const f of desc.fields) {
    let v: unknown;
    if (f.oneof) {
      const o = msg[f.oneof.localName] as { case?: string; value?: unknown } | undefined;
      if (o?.case !== f.localName) continue;
      v = o.value;
    } else {
      v = msg[f.localName];
    }
    if (v === undefined || v === null) continue;
    const name = `${prefix}${f.name}`;
    switch (f.fieldKind) {
      case "scalar":
        if (f.scalar === ScalarType.STRING && hasNul(v)) return name;
        break;
      case "message": {
        const hit = walk(f.message, v as Record<string, unknown>, `${name}.`);
        if (hit) return hit;
        break;
      }
      case "list": {
        const items = v as unknown[];
        for (let i = 0; i < items.length; i++) {
          if (f.listKind === "scalar" && f.scalar === ScalarType.STRING && hasNul(items[i])) return `${name}[${i}]`;
          if (f.listKind === "message") {
            const hit = walk(f.message, items[i] as Record<string, unknown>, `${name}[${i}].`);
            if (hit) return hit;
          }
        }
        break;
      }
      case "map": {
        for (const [k, item] of Object.entries(v as Record<string, unknown>)) {
          if (hasNul(k)) return `${name}[${JSON.stringify(k)}]`;
          if (f.mapKind === "scalar" && f.scalar === ScalarType.STRING && hasNul(item)) return `${name}[${JSON.stringify(k)}]`;
          if (f.mapKind === "message") {
            const hit = walk(f.message, item as Record<string, unknown>, `${name}[${JSON.stringify(k)}].`);
            if (hit) return hit;
          }
        }
        break;
      }
      default:
        break;
    }
  }
  return undefined;
}

/** Throws INVALID_ARGUMENT `string_contains_nul` naming the field when `message` has a string with U+0000. */
export function assertNoNulStrings<D extends DescMessage>(schema: D, message: MessageShape<D>): void {
  const field = nulStringField(schema, message);
  if (field !== undefined) throw new InvalidArgumentError(field, NUL_REASON, "contains U+0000 (NUL), which no string field accepts");
}

/**
 * Refuses every request message with a U+0000 in any string field (INVALID_ARGUMENT
 * `string_contains_nul`, naming the field) before it reaches a handler, on every service.
 */
export function createNulStringInterceptor(): Interceptor {
  return (next) => async (req) => {
    if (!req.stream) {
      const field = nulStringField(req.method.input, req.message);
      if (field !== undefined) throw toConnectError(new InvalidArgumentError(field, NUL_REASON, "contains U+0000 (NUL), which no string field accepts"));
    }
    return next(req);
  };
}
