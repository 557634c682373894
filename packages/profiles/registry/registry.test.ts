import { create } from "@bufbuild/protobuf";
import { InspectionSchema, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { describe, expect, it } from "vitest";
import { SelectionError } from "../shared/errors.js";
import { NODE_CLEANUP_CLAIM } from "../node24-npm/approval.js";
import { PYTHON_CLEANUP_CLAIM } from "../python3/approval.js";
import { computeInspectionHash, DEFAULT_PROFILE, EXECUTION_PROFILES, findProfile, LEGACY_PROFILE, profileNames, profileNamesText, profileOf } from "./index.js";

describe("execution profile registry", () => {
  it("lists each profile once, the seeds' default (Python) first, and refuses names it does not hold", () => {
    expect(profileNames()).toEqual(["repo-python3-v1", "repo-node24-npm-v1"]);
    expect(new Set(profileNames()).size).toBe(EXECUTION_PROFILES.length);
    expect(DEFAULT_PROFILE.name).toBe("repo-python3-v1");
    expect(findProfile("repo-python2-v1")).toBeUndefined();
    expect(profileNamesText("or")).toBe("repo-python3-v1 or repo-node24-npm-v1");
  });

  it("reads a record that names no profile as the legacy (Node) one, as before profiles were a type", () => {
    expect(LEGACY_PROFILE.name).toBe("repo-node24-npm-v1");
    expect(profileOf("")).toBe(LEGACY_PROFILE);
    expect(profileOf("repo-python3-v1").cleanupClaim).toBe(PYTHON_CLEANUP_CLAIM);
    expect(profileOf("").cleanupClaim).toBe(NODE_CLEANUP_CLAIM);
  });

  it("parses selections with each profile's own grammar, never the other's", () => {
    const py = profileOf("repo-python3-v1");
    const node = profileOf("repo-node24-npm-v1");
    expect(py.parseSelection("python -m pytest tests/test_a.py")).toEqual({ selection: Selection.PYTHON_PYTEST, testPaths: ["tests/test_a.py"] });
    expect(node.parseSelection("npm run build test")).toEqual({ selection: Selection.BUILD_THEN_TEST, testPaths: [] });
    expect(() => node.parseSelection("python -m pytest tests/test_a.py")).toThrow(SelectionError);
    expect(() => py.parseSelection("npm run build")).toThrow(SelectionError);
    expect(py.selectionText(Selection.PYTHON_UNITTEST, ["t/test_x.py"])).toBe("python -m unittest t/test_x.py");
    expect(node.selectionText(Selection.BUILD, [])).toBe("npm run build");
    // Every offered selection's words parse back to it (the UI metadata and the grammar agree).
    for (const p of EXECUTION_PROFILES) {
      for (const s of p.selections) {
        const words = [...s.tokens, ...(s.takesTestFiles ? ["tests/test_a.py"] : [])].join(" ");
        expect(p.parseSelection(words).selection, `${p.name}: ${words}`).toBe(s.selection);
      }
      expect(() => p.parseSelection(p.defaultSelectionText)).not.toThrow();
    }
  });

  it("keeps Python's configuration and virtual environment immutable to patches, and adds nothing for Node", () => {
    const py = profileOf("repo-python3-v1");
    const node = profileOf("repo-node24-npm-v1");
    const inspection = create(InspectionSchema, { profile: py.name, sitePackages: ".venv/lib/python3.11/site-packages" });
    expect(py.immutableRequestPath("pyproject.toml")).toBe(true);
    expect(py.immutableRequestPath(".venv/x.py")).toBe(true);
    expect(py.immutableRequestPath("calc/ops.py")).toBe(false);
    expect(node.immutableRequestPath("pyproject.toml")).toBe(false);
    expect(py.immutableInputReason(".venv/lib/python3.11/site-packages/a.py", inspection)).toBe("it is part of the virtual environment");
    expect(py.immutableInputReason("sub/conftest.py", inspection)).toMatch(/configuration/);
    expect(node.immutableInputReason("sub/conftest.py", inspection)).toBeUndefined();
  });

  it("hashes a Python inspection's own inputs and a Node inspection exactly as before (no Python keys)", () => {
    const base = { selection: Selection.TEST, testPaths: ["tests/test_a.py"], pythonVersion: "3.11.2" };
    const py = create(InspectionSchema, { ...base, profile: "repo-python3-v1" });
    const py2 = create(InspectionSchema, { ...base, profile: "repo-python3-v1", testPaths: ["tests/test_b.py"] });
    const node = create(InspectionSchema, { ...base, profile: "repo-node24-npm-v1" });
    const node2 = create(InspectionSchema, { ...base, profile: "repo-node24-npm-v1", testPaths: ["tests/test_b.py"] });
    expect(computeInspectionHash(py)).not.toBe(computeInspectionHash(py2));
    expect(computeInspectionHash(node)).toBe(computeInspectionHash(node2));
    // The oneof mirrors the flat fields and is not hashed: records stored before it re-hash the same.
    const withDetails = create(InspectionSchema, { ...base, profile: "repo-python3-v1", details: { case: "python", value: { testPaths: ["x"] } } });
    expect(computeInspectionHash(withDetails)).toBe(computeInspectionHash(py));
  });
});
