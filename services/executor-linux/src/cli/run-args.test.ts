import { describe, expect, it } from "vitest";
import { MAX_ARGV_ENTRIES } from "../supervisor-client/index.js";
import { parseArgs, resolveExecutable, UsageError } from "./run-args.js";

describe("seraph-exec run arguments", () => {
  it("takes options up to -- and the argv after it; ceilings imply --cgroup", () => {
    const a = parseArgs(["--json", "--deadline-ms", "9000", "--memory-bytes", "1048576", "--job-user", "none", "--", "/bin/sh", "-c", "true"]);
    expect(a).toMatchObject({ json: true, deadlineMs: 9000, cgroup: true, memoryBytes: 1048576, jobUser: { kind: "none" }, argv: ["/bin/sh", "-c", "true"] });
  });

  it("refuses an unknown option, a malformed number, no command and an argv past the supervisor's bound", () => {
    expect(() => parseArgs(["--nope", "--", "x"])).toThrow(UsageError);
    expect(() => parseArgs(["--deadline-ms", "9s", "--", "x"])).toThrow(/non-negative integer/);
    expect(() => parseArgs(["--json"])).toThrow(/no command given/);
    expect(() => parseArgs(["--", ...Array.from({ length: MAX_ARGV_ENTRIES + 1 }, () => "a")])).toThrow(/at most/);
  });

  it("resolves a bare name through PATH and a relative one against the cwd; a missing one is undefined", () => {
    expect(resolveExecutable("sh", "/", "/nonexistent:/bin")).toBe("/bin/sh");
    expect(resolveExecutable("./bin/sh", "/", undefined)).toBe("/bin/sh");
    expect(resolveExecutable("no-such-command-here", "/", "/bin")).toBeUndefined();
  });
});
