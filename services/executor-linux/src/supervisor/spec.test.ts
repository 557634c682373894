import { create } from "@bufbuild/protobuf";
import { describe, expect, test } from "vitest";
import { SupervisorSpecSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { InvalidSpecError, assertValidSpec, effectiveLimits, specProblems } from "./spec.js";

const good = () =>
  create(SupervisorSpecSchema, {
    jobId: "j",
    commands: [{ name: "test", argv: ["/usr/bin/node", "--test"], cwd: "/tmp" }],
    env: { PATH: "/usr/bin" },
    deadlineUnixMs: BigInt(Date.now() + 60_000),
    cleanupReserveMs: 3000,
    graceMs: 2000,
    runDir: "/tmp/run",
  });

describe("spec validation", () => {
  test("a sound spec passes; zero limits mean the seed defaults", () => {
    expect(specProblems(good(), Date.now())).toEqual([]);
    expect(effectiveLimits(good())).toEqual({ streamLimitBytes: 1048576, outputLimitBytes: 16777216 });
  });

  test("every rule reports a sentence", () => {
    const s = good();
    s.jobId = "";
    s.commands[0]!.argv = ["node"];
    s.commands[0]!.cwd = "relative";
    s.commands[0]!.name = "Bad Name";
    s.env["A=B"] = "x";
    s.cleanupReserveMs = 2100;
    s.streamLimitBytes = 2n * 1024n * 1024n;
    s.runDir = `/tmp/${"x".repeat(120)}`;
    const problems = specProblems(s, Date.now());
    expect(problems.join("\n")).toMatch(/job_id/);
    expect(problems.join("\n")).toMatch(/argv\[0\].*absolute/);
    expect(problems.join("\n")).toMatch(/cwd.*absolute/);
    expect(problems.join("\n")).toMatch(/name/);
    expect(problems.join("\n")).toMatch(/env key/);
    expect(problems.join("\n")).toMatch(/cleanup_reserve_ms/);
    expect(problems.join("\n")).toMatch(/stream_limit_bytes/);
    expect(problems.join("\n")).toMatch(/socket path/);
    expect(() => assertValidSpec(s)).toThrow(InvalidSpecError);
  });

  test("a deadline inside the reserve leaves no time for commands", () => {
    const s = good();
    s.deadlineUnixMs = BigInt(Date.now() + 1000);
    expect(specProblems(s, Date.now()).join()).toMatch(/no time/);
    expect(specProblems(s)).toEqual([]);
  });
});
