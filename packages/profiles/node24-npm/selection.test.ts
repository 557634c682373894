import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { describe, expect, it } from "vitest";
import { SelectionError } from "../shared/errors.js";
import { parseSelection, selectionScripts, selectionText } from "./selection.js";

describe("parseSelection", () => {
  it.each([
    ["npm\ntest", Selection.TEST],
    ["npm test", Selection.TEST],
    ["  npm \n  test \n", Selection.TEST],
    ["npm\nrun\nbuild", Selection.BUILD],
    ["npm run build", Selection.BUILD],
    ["npm\r\nrun\r\nbuild\r\ntest\r\n", Selection.BUILD_THEN_TEST],
    ["npm run build test", Selection.BUILD_THEN_TEST],
  ])("%j", (text, expected) => {
    expect(parseSelection(text)).toBe(expected);
  });

  it.each(["", "  \n ", "npm", "npm run test", "npm run", "npm run build test lint", "npm install", "npx test", "yarn test", "npm test build", "NPM TEST", "npm run-script build"])(
    "refuses %j",
    (text) => {
      expect(() => parseSelection(text)).toThrow(SelectionError);
      try {
        parseSelection(text);
      } catch (err) {
        expect((err as SelectionError).reasons[0]?.code).toMatch(/^selection_(empty|unknown)$/);
      }
    },
  );

  it("names the scripts each selection runs", () => {
    expect(selectionScripts(Selection.BUILD_THEN_TEST)).toEqual(["build", "test"]);
    expect(selectionText(Selection.BUILD)).toBe("npm run build");
  });
});
