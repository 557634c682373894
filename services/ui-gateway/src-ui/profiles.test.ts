import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { describe, expect, it } from "vitest";
import { DEFAULT_SELECTION_PROFILE, matchSelection, NODE_PROFILE, PROFILE_RUNTIMES, PYTHON_PROFILE, recordsPythonFacts, selectionForm, SELECTIONS } from "./profiles.js";

describe("the UI's profile metadata", () => {
  it("names the two profiles the server selects, and every selection belongs to one of them", () => {
    expect([PYTHON_PROFILE, NODE_PROFILE]).toEqual(["repo-python3-v1", "repo-node24-npm-v1"]);
    expect(new Set(SELECTIONS.map((s) => s.profile))).toEqual(new Set([PYTHON_PROFILE, NODE_PROFILE]));
    expect(PROFILE_RUNTIMES.map((r) => r.profile)).toEqual([PYTHON_PROFILE, NODE_PROFILE]);
    expect(DEFAULT_SELECTION_PROFILE).toBe(NODE_PROFILE);
  });

  it("only the Python profile's inspections record a pinned Python, test files and a framework", () => {
    expect(recordsPythonFacts(PYTHON_PROFILE)).toBe(true);
    expect(recordsPythonFacts(NODE_PROFILE)).toBe(false);
    expect(recordsPythonFacts("")).toBe(false);
  });

  it("TEST means the profile's own form, else the first known", () => {
    expect(selectionForm(Selection.TEST, PYTHON_PROFILE)?.title).toBe("Python declared test command");
    expect(selectionForm(Selection.TEST, NODE_PROFILE)?.title).toBe("Test");
    expect(selectionForm(Selection.BUILD, PYTHON_PROFILE)?.title).toBe("Build");
    expect(selectionForm(Selection.UNSPECIFIED, NODE_PROFILE)).toBeUndefined();
  });

  it("matchSelection: exact words, or the Python words followed by one to eight files", () => {
    expect(matchSelection(["npm", "run", "build", "test"])?.selection).toBe(Selection.BUILD_THEN_TEST);
    expect(matchSelection(["npm", "run", "build", "test", "x"])).toBeUndefined();
    expect(matchSelection(["python", "-m", "unittest"])).toBeUndefined();
    expect(matchSelection(["python", "-m", "pytest", "t.py"])?.selection).toBe(Selection.PYTHON_PYTEST);
    expect(matchSelection(["python", "-m", "unittest", ...Array.from({ length: 8 }, (_, i) => `t${i}.py`)])?.selection).toBe(Selection.PYTHON_UNITTEST);
    expect(matchSelection(["python", "-m", "unittest", ...Array.from({ length: 9 }, (_, i) => `t${i}.py`)])).toBeUndefined();
  });
});
