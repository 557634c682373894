import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalJson } from "./canonical-json.js";

describe("canonicalJson", () => {
  it("sorts keys, drops whitespace and refuses non-integers", () => {
    expect(canonicalJson({ b: 1, a: [true, null, "x"], c: { z: "1", y: "2" } })).toBe('{"a":[true,null,"x"],"b":1,"c":{"y":"2","z":"1"}}');
    expect(() => canonicalJson(1.5)).toThrow(RangeError);
  });
  it("is independent of key insertion order", () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.oneof(fc.string(), fc.integer(), fc.boolean())), (d) => {
        const reversed = Object.fromEntries(Object.entries(d).reverse());
        expect(canonicalJson(reversed)).toBe(canonicalJson(d));
        expect(JSON.parse(canonicalJson(d))).toEqual(d);
      }),
    );
  });
});
