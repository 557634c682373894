import { Code } from "@connectrpc/connect";
import { InvalidArgumentError } from "@seraph/kit";
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { describe, expect, it } from "vitest";
import { checkRepairPaths, checkRequestPath, parseSelectionText } from "./repair-input.js";

function refusal(fn: () => unknown): { field: string | undefined; reason: string } {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as InvalidArgumentError).code).toBe(Code.InvalidArgument);
    return { field: (err as InvalidArgumentError).field, reason: (err as InvalidArgumentError).reason };
  }
  throw new Error("expected a refusal");
}

describe("repair input", () => {
  it("knows exactly three selections, one token a line", () => {
    expect(parseSelectionText("npm\ntest").selection).toBe(Selection.TEST);
    expect(parseSelectionText(" npm run build\n").selection).toBe(Selection.BUILD);
    expect(parseSelectionText("npm\nrun\nbuild\ntest").selection).toBe(Selection.BUILD_THEN_TEST);
    for (const bad of ["npm run test", "npm test --watch", "yarn test", "npm test; rm -rf /", "npx tsc"]) {
      expect(refusal(() => parseSelectionText(bad))).toEqual({ field: "selection", reason: "selection_unknown" });
    }
  });
  it("parses with the settings profile's grammar only, never falling back to the other", () => {
    const py = "repo-python3-v1";
    expect(parseSelectionText("python\n-m\npytest\ntests/test_a.py", py)).toEqual({ selection: Selection.PYTHON_PYTEST, testPaths: ["tests/test_a.py"] });
    expect(parseSelectionText("test", py)).toEqual({ selection: Selection.TEST, testPaths: [] });
    expect(refusal(() => parseSelectionText("npm test", py))).toEqual({ field: "selection", reason: "python_wrapper_not_allowed" });
    expect(refusal(() => parseSelectionText("python -m pytest -k fast tests/test_a.py", py))).toEqual({ field: "selection", reason: "python_flag_not_allowed" });
    expect(refusal(() => parseSelectionText("python -m unittest tests/test_a.py"))).toEqual({ field: "selection", reason: "selection_unknown" });
    // Python configuration and the virtual environment are never allowed patch paths.
    for (const a of ["pyproject.toml", "tests/conftest.py", ".venv/lib/x.py", "setup.cfg"]) {
      expect(refusal(() => checkRepairPaths(["."], [a], py))).toEqual({ field: "allowed_patch_paths[0]", reason: "allowed_patch_path_immutable" });
    }
    expect(checkRepairPaths(["."], ["pyproject.toml"]).allowedPatchPaths).toEqual(["pyproject.toml"]);
  });
  it("normalizes safe relative paths and refuses the rest with the field", () => {
    expect(checkRequestPath("./src/", "f")).toBe("src");
    expect(checkRequestPath(".", "f")).toBe(".");
    expect(refusal(() => checkRequestPath("/etc", "f")).reason).toBe("path_absolute");
    expect(refusal(() => checkRequestPath("a/../../b", "f")).reason).toBe("path_traversal");
    expect(refusal(() => checkRequestPath("a//b", "f")).reason).toBe("path_invalid");
    expect(refusal(() => checkRequestPath("a b", "f")).reason).toBe("path_invalid");
    expect(refusal(() => checkRequestPath("-rf", "f")).reason).toBe("path_invalid");
    expect(refusal(() => checkRequestPath(".git/config", "f")).reason).toBe("path_invalid");
  });
  it("keeps allowed patch paths inside the sources and away from configuration", () => {
    expect(checkRepairPaths(["src", "test"], ["src/a.js"])).toEqual({ sourcePaths: ["src", "test"], inspectSourcePaths: ["src", "test"], allowedPatchPaths: ["src/a.js"] });
    expect(checkRepairPaths(["."], ["src"]).inspectSourcePaths).toEqual([]);
    expect(refusal(() => checkRepairPaths(["src"], ["lib"]))).toEqual({ field: "allowed_patch_paths[0]", reason: "allowed_patch_path_outside_sources" });
    expect(refusal(() => checkRepairPaths(["."], ["src", "tsconfig.build.json"]))).toEqual({ field: "allowed_patch_paths[1]", reason: "allowed_patch_path_immutable" });
    expect(refusal(() => checkRepairPaths(["src", "../x"], ["src"]))).toEqual({ field: "source_paths[1]", reason: "path_traversal" });
  });
});
