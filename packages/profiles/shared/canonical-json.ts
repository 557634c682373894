/** A JSON value that has exactly one canonical encoding (no floats, no undefined). */
export type CanonicalValue =
  | string
  | boolean
  | null
  | number
  | readonly CanonicalValue[]
  | { readonly [key: string]: CanonicalValue };

/**
 * Encodes `value` canonically: object keys sorted by UTF-16 code units, no whitespace, strings
 * as JSON.stringify writes them, integers only (a non-integer or unsafe number throws; large
 * counts are passed as decimal strings). Arrays keep their order; callers sort them first.
 */
export function canonicalJson(value: CanonicalValue): string {
  if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isSafeInteger(value)) throw new RangeError(`canonical JSON accepts safe integers only, got ${value}`);
    return String(value);
  }
  if (Array.isArray(value)) return `[${value.map((v: CanonicalValue) => canonicalJson(v)).join(",")}]`;
  const object = value as { readonly [key: string]: CanonicalValue };
  const keys = Object.keys(object).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(object[k] as CanonicalValue)}`).join(",")}}`;
}
