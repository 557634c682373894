import { create } from "@bufbuild/protobuf";
import { JobPhaseSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { describe, expect, it } from "vitest";
import { phasesText, shortDuration } from "./phases-text.js";

const phase = (name: string, start: number, end: number) => create(JobPhaseSchema, { name, startUnixMs: BigInt(start), endUnixMs: BigInt(end) });

describe("the phase timeline of repair show", () => {
  it("lists each phase with its offset, duration and a bar on the job's span", () => {
    const lines = phasesText({ phases: [phase("queue and claim", 1000, 1100), phase("stage", 1100, 1150), phase("command and cleanup", 1150, 3150)] }, "");
    expect(lines[0]).toBe("phases (2.1 s from the first recorded phase to the last; executor wall clock):");
    expect(lines).toHaveLength(4);
    expect(lines[1]).toBe("  queue and claim      +    0 ms     100 ms  |█                       |");
    expect(lines[3]).toContain("command and cleanup  +  150 ms      2.0 s");
    // The longest phase's bar fills most of the track and ends at its right edge.
    expect(lines[3]!.split("|")[1]).toMatch(/^ +█{20,}$/);
    for (const l of lines.slice(1)) expect(l.split("|")[1]).toHaveLength(24);
  });

  it("says nothing before the job has phases", () => {
    expect(phasesText({ phases: [] })).toEqual([]);
  });

  it("shortens durations as a person reads them", () => {
    expect([shortDuration(850), shortDuration(12_400), shortDuration(185_000)]).toEqual(["850 ms", "12.4 s", "3 min 5 s"]);
  });
});
