import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { EXECUTION_PROFILES, LEGACY_PROFILE } from "@seraph/profiles/registry";
import { afterAll, describe, expect, it } from "vitest";
import type { FixtureRepo } from "../../testing/fixture-repo.js";
import { createJsTestProject } from "../../testing/projects.js";
import { createPythonProject, pythonForTests } from "../../testing/python-projects.js";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { inspectRepository, inspectSnapshot } from "./inspect.js";
import { findHostProfile, HOST_PROFILES, hostProfileOf } from "./registry.js";

const node = await pinnedNodeForTests();
const python = pythonForTests();
const repos: FixtureRepo[] = [];
afterAll(async () => {
  await Promise.all(repos.map((r) => r.cleanup()));
});

describe("the executor's profile registry", () => {
  it("has exactly one host profile per registered ExecutionProfile, in the registry's order, wrapping that very rules object", () => {
    expect(HOST_PROFILES.map((p) => p.rules)).toEqual([...EXECUTION_PROFILES]);
    for (const rules of EXECUTION_PROFILES) expect(findHostProfile(rules.name)?.rules).toBe(rules);
    // A profile's seraph-exec flags are its own: no two profiles claim one.
    const flags = HOST_PROFILES.flatMap((p) => p.cliFlags);
    expect(new Set(flags).size).toBe(flags.length);
  });

  it("reads a record naming no profile as the legacy one, and refuses to inspect an unregistered name", async () => {
    expect(hostProfileOf("").rules).toBe(LEGACY_PROFILE);
    await expect(inspectSnapshot({ profile: "repo-python2-v1", repositoryPath: "/nonexistent", selection: "test" })).rejects.toThrow(/is not an execution profile; the profiles are repo-python3-v1 and repo-node24-npm-v1/);
  });

  it.skipIf(node === undefined)("a Node inspection fills details.node with the same values as the deprecated flat fields", async () => {
    const repo = await createJsTestProject();
    repos.push(repo);
    const i = await inspectRepository({ repositoryPath: repo.dir, selection: Selection.TEST, nodePath: node as string });
    expect(i.admitted).toBe(true);
    expect(i.details.case).toBe("node");
    expect(i.details.value).toMatchObject({ nodePath: i.nodePath, nodeVersion: i.nodeVersion, typescriptVersion: i.typescriptVersion, buildOutputDir: i.buildOutputDir });
    expect(i.details.case === "node" && i.details.value.nodeVersion).toBe("v24.15.0");
  });

  it.skipIf(python === undefined)("a Python inspection fills details.python with the same values as the deprecated flat fields", async () => {
    const repo = await createPythonProject();
    repos.push(repo);
    const i = await inspectRepository({ profile: "repo-python3-v1", repositoryPath: repo.dir, selection: "python -m unittest tests/test_ops.py", pythonPath: python as string });
    expect(i.details.case).toBe("python");
    expect(i.details.value).toMatchObject({ testPaths: ["tests/test_ops.py"], pythonPath: i.pythonPath, pythonVersion: i.pythonVersion, framework: "unittest", frameworkVersion: i.frameworkVersion });
    expect(i.testPaths).toEqual(["tests/test_ops.py"]);
  });
});
