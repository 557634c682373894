import { describe, expect, it } from "vitest";
import { readCommandLine, type CommandLine } from "./command-line.js";
import type { Command, CommandGroup } from "./command-spec.js";

const run = async () => 0;
const put: Command = {
  spec: {
    name: "things put",
    summary: "Put a thing.",
    args: [
      { name: "NAME", help: "its name" },
      { name: "VALUE", help: "its value" },
    ],
    flags: {
      title: { type: "string", value: "TEXT", help: "a title" },
      tag: { type: "string", value: "TAG", help: "a tag", multiple: true },
      count: { type: "int", value: "N", help: "how many" },
      force: { type: "boolean", help: "do it anyway" },
      mode: { type: "string", value: "M", help: "how", default: "plain" },
    },
  },
  run,
};
const check: Command = { spec: { name: "check", summary: "Check files.", args: [{ name: "FILE", help: "the file" }, { name: "MORE", help: "more files", variadic: true }] }, run };
const table: Record<string, Command | CommandGroup> = { things: { name: "things", summary: "Things.", subcommands: { put } }, check };

const read = (...argv: string[]): CommandLine => readCommandLine(argv, table, () => "top usage\n");
function parsed(...argv: string[]) {
  const line = read(...argv);
  if (!("command" in line)) throw new Error(`not a command: ${"problem" in line ? line.problem : "usage"}`);
  return line;
}
function problem(...argv: string[]): string | undefined {
  const line = read(...argv);
  return "command" in line ? undefined : line.problem;
}

describe("the command line", () => {
  it("reads `--flag value` and `--flag=value` alike, repeatable flags in order, and applies defaults", () => {
    const a = parsed("things", "put", "n", "v", "--title", "T", "--tag", "x", "--tag=y", "--count=3", "--force");
    expect(a.args.values).toEqual({ title: "T", tag: ["x", "y"], count: "3", force: true, mode: "plain" });
    expect(a.args.positionals).toEqual(["n", "v"]);
    expect(parsed("things", "put", "--title=a=b", "n", "v").args.values["title"]).toBe("a=b");
  });

  it("takes everything after `--` as positional, so a value may start with a dash; flags before it still count", () => {
    const a = parsed("things", "put", "--force", "--", "-n", "--json");
    expect(a.args.positionals).toEqual(["-n", "--json"]);
    expect(a.args.values["force"]).toBe(true);
    expect(a.globals.json).toBe(false);
    expect(parsed("check", "--", "--help").args.positionals).toEqual(["--help"]);
  });

  it("gives a flag the next argument as its value, whatever it starts with (as getopt does), and `=` a value starting with a dash", () => {
    const a = parsed("things", "put", "n", "v", "--title", "--json");
    expect(a.args.values["title"]).toBe("--json");
    expect(a.globals.json).toBe(false);
    expect(parsed("things", "put", "n", "v", "--title=-x").args.values["title"]).toBe("-x");
  });

  it("reads the global flags before or after the command's name, at any level", () => {
    for (const argv of [
      ["--json", "--api", "http://a", "things", "put", "n", "v"],
      ["things", "--json", "put", "--api=http://a", "n", "v"],
      ["things", "put", "n", "v", "--json", "--api", "http://a"],
    ]) {
      expect(parsed(...argv).globals).toEqual({ json: true, api: "http://a", help: false, version: false });
    }
  });

  it("names an unknown flag and a flag without its value, and the command they were given to", () => {
    expect(read("things", "put", "n", "v", "--nope")).toMatchObject({ name: "seraph things put", problem: "unknown flag --nope" });
    expect(read("things", "put", "n", "v", "--nope=1")).toMatchObject({ problem: "unknown flag --nope=1" });
    expect(read("things", "put", "n", "v", "--force=yes")).toMatchObject({ problem: "unknown flag --force=yes" });
    expect(read("things", "put", "n", "v", "--title")).toMatchObject({ name: "seraph things put", problem: "--title needs a value" });
    expect(read("--api")).toMatchObject({ name: "seraph", problem: "--api needs a value", usage: "top usage\n" });
    expect(read("things", "--bogus", "put")).toMatchObject({ name: "seraph things", problem: "unknown flag --bogus" });
    const line = read("things", "put", "n", "v", "--nope");
    expect("usage" in line && line.usage).toMatch(/^usage: seraph things put NAME VALUE \[flags\]\n/);
  });

  it("checks positions against the declaration: missing, unexpected, variadic", () => {
    expect(problem("things", "put", "n")).toBe("missing VALUE");
    expect(problem("things", "put")).toBe("missing NAME VALUE");
    expect(problem("things", "put", "n", "v", "w")).toBe('unexpected argument "w"');
    expect(problem("things", "put", "n", "v", "--count", "two")).toBe('--count must be a whole number, got "two"');
    expect(problem("check")).toBe("missing FILE");
    expect(parsed("check", "a", "b", "c").args.positionals).toEqual(["a", "b", "c"]);
  });

  it("prints a usage on --help or `help`, even with an otherwise bad line, but never for a command that does not exist", () => {
    for (const argv of [["things", "put", "--help"], ["help", "things", "put"], ["--json", "help", "things", "put"], ["things", "put", "-h", "--nope"], ["--help", "things", "put", "--title"]]) {
      const line = read(...argv);
      expect("command" in line, argv.join(" ")).toBe(false);
      expect(line).toMatchObject({ name: "seraph things put", usage: expect.stringMatching(/^usage: seraph things put/) });
      expect("problem" in line && line.problem).toBeFalsy();
    }
    expect(read("things", "--help")).toMatchObject({ usage: expect.stringMatching(/^usage: seraph things SUBCOMMAND/) });
    expect(read("--help")).toEqual({ globals: expect.anything(), name: "seraph", usage: "top usage\n" });
    expect(read("help")).toEqual({ globals: expect.anything(), name: "seraph", usage: "top usage\n" });
    expect(read("check", "--", "help")).toMatchObject({ command: { spec: { name: "check" } } });
    expect(read("nothing", "--help")).toMatchObject({ name: "seraph", problem: 'unknown command "nothing"' });
    expect(read("things", "nope")).toMatchObject({ name: "seraph things", problem: 'unknown subcommand "nope"' });
    expect(read("things")).toMatchObject({ problem: "missing subcommand" });
    expect(read()).toMatchObject({ problem: "missing command" });
  });
});
