import { create } from "@bufbuild/protobuf";
import { ExecutionProfileInfoSchema } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { InspectionSchema, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { describe, expect, it } from "vitest";
import { createProfileCatalog, matchSelection, recordsPythonFacts, selectionForm } from "./profiles.js";

// A ListProfiles answer as a server with two profiles gives it (the toy names are deliberate:
// the UI must work with whatever the server's registry holds).
const catalog = createProfileCatalog([
  create(ExecutionProfileInfoSchema, {
    name: "toy-npm",
    runtimeDescription: "Node 24",
    selections: [
      { selection: Selection.TEST, title: "Test", tokens: ["npm", "test"], execution: "Inspected test script" },
      { selection: Selection.BUILD_THEN_TEST, title: "Build then test", tokens: ["npm", "run", "build", "test"], execution: "both" },
    ],
  }),
  create(ExecutionProfileInfoSchema, {
    name: "toy-python",
    isDefault: true,
    runtimeDescription: "CPython 3.11",
    selections: [
      { selection: Selection.PYTHON_PYTEST, title: "Python pytest", tokens: ["python", "-m", "pytest"], takesTestFiles: true, execution: "pytest" },
      { selection: Selection.TEST, title: "Python declared test command", tokens: ["test"], execution: "declared" },
    ],
  }),
]);

describe("the UI's profile catalog, from the server's ListProfiles", () => {
  it("puts the server's default profile first, with its runtime and selections", () => {
    expect(catalog.names).toEqual(["toy-python", "toy-npm"]);
    expect(catalog.defaultProfile).toBe("toy-python");
    expect(catalog.runtimes).toEqual([{ profile: "toy-python", runtime: "CPython 3.11" }, { profile: "toy-npm", runtime: "Node 24" }]);
    expect(catalog.selections.map((s) => `${s.profile}:${s.title}`)).toEqual(["toy-python:Python pytest", "toy-python:Python declared test command", "toy-npm:Test", "toy-npm:Build then test"]);
  });

  it("TEST means the profile's own form, else the default profile's", () => {
    expect(selectionForm(Selection.TEST, "toy-npm", catalog)?.title).toBe("Test");
    expect(selectionForm(Selection.TEST, "toy-python", catalog)?.title).toBe("Python declared test command");
    expect(selectionForm(Selection.TEST, "", catalog)?.title).toBe("Python declared test command");
    expect(selectionForm(Selection.BUILD_THEN_TEST, "toy-python", catalog)?.title).toBe("Build then test");
    expect(selectionForm(Selection.UNSPECIFIED, "toy-npm", catalog)).toBeUndefined();
  });

  it("matchSelection: exact words, or words that take files followed by one to eight files", () => {
    expect(matchSelection(["npm", "run", "build", "test"], catalog)?.selection).toBe(Selection.BUILD_THEN_TEST);
    expect(matchSelection(["npm", "run", "build", "test", "x"], catalog)).toBeUndefined();
    expect(matchSelection(["python", "-m", "pytest"], catalog)).toBeUndefined();
    expect(matchSelection(["python", "-m", "pytest", "t.py"], catalog)?.selection).toBe(Selection.PYTHON_PYTEST);
    expect(matchSelection(["python", "-m", "pytest", ...Array.from({ length: 9 }, (_, i) => `t${i}.py`)], catalog)).toBeUndefined();
  });

  it("an empty catalog (no profiles) matches nothing", () => {
    const empty = createProfileCatalog([]);
    expect(empty.defaultProfile).toBe("");
    expect(matchSelection(["npm", "test"], empty)).toBeUndefined();
  });

  it("Python facts are shown for inspections with Python details, whatever the profile is called", () => {
    expect(recordsPythonFacts(create(InspectionSchema, { profile: "anything", details: { case: "python", value: {} } }))).toBe(true);
    expect(recordsPythonFacts(create(InspectionSchema, { profile: "anything", details: { case: "node", value: {} } }))).toBe(false);
    expect(recordsPythonFacts(create(InspectionSchema, { profile: "repo-python3-v1" }))).toBe(false);
  });
});
