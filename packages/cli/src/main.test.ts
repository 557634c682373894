import { readFile } from "node:fs/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { findTrailerError, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { ErrorInfoSchema } from "@seraph/proto/google/rpc/error_details_pb.js";
import { describe, expect, it } from "vitest";
import { isGroup, type Command } from "./command-spec.js";
import type { CliIo } from "./io.js";
import { COMMANDS, main, nextStep, seraphErrorInfo } from "./main.js";

// Usage and usage errors need no API: parsing happens before any connection is made.
async function seraph(args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const io: CliIo = {
    env: { SERAPH_CONFIG_DIR: "/nonexistent/seraph-cli-test", SERAPH_API_URL: "http://127.0.0.1:9" },
    stdout: { write: (s: string) => (out += s) },
    stderr: { write: (s: string) => (err += s) },
    stdinIsTTY: false,
    home: "/nonexistent",
    readLine: async () => "",
  };
  const code = await main(args, io);
  return { code, out, err };
}

const commands: [string[], Command][] = Object.entries(COMMANDS).flatMap(([name, entry]) =>
  isGroup(entry) ? Object.entries(entry.subcommands).map(([sub, c]): [string[], Command] => [[name, sub], c]) : [[[name], entry]],
);

/** Arguments that satisfy a command's positionals and required flags (values are never sent). */
function validArgs(c: Command): string[] {
  const args = (c.spec.args ?? []).map((a) => `x-${a.name.toLowerCase()}`);
  for (const [name, f] of Object.entries(c.spec.flags ?? {})) if (f.required) args.push(`--${name}`, "1");
  for (const g of c.spec.oneOf ?? []) if (g.required) args.push(`--${g.flags[0]}`, ...(c.spec.flags?.[g.flags[0] as string]?.type === "boolean" ? [] : ["1"]));
  return args;
}

describe("seraph usage", () => {
  it("prints the top-level usage, listing every subcommand, on --help and `help`", async () => {
    for (const args of [["--help"], ["-h"], ["help"]]) {
      const r = await seraph(args);
      expect(r.code).toBe(0);
      expect(r.err).toBe("");
      for (const [path] of commands) expect(r.out).toContain(path.join(" "));
    }
  });

  it.each(commands.map(([path, c]) => [path.join(" "), path, c] as const))("%s --help prints its arguments and every flag, exit 0", async (_, path, c) => {
    for (const args of [[...path, "--help"], ["help", ...path], [...path, "-h", "--unknown-is-ignored-with-help"]]) {
      const r = await seraph(args);
      expect(r.code, r.err).toBe(0);
      expect(r.err).toBe("");
      expect(r.out).toMatch(new RegExp(`^usage: seraph ${path.join(" ")}\\b`));
      for (const a of c.spec.args ?? []) expect(r.out).toContain(a.name);
      for (const name of Object.keys(c.spec.flags ?? {})) expect(r.out).toMatch(new RegExp(`\\n  --${name}\\b`));
    }
  });

  it("prints a group's usage on `seraph GROUP --help`, listing its subcommands", async () => {
    for (const [name, entry] of Object.entries(COMMANDS)) {
      if (!isGroup(entry)) continue;
      const r = await seraph([name, "--help"]);
      expect(r.code).toBe(0);
      for (const sub of Object.keys(entry.subcommands)) expect(r.out).toContain(`seraph ${name} ${sub}`);
    }
  });

  it("documents repair create's and settings set's flags", async () => {
    const create = (await seraph(["repair", "create", "--help"])).out;
    for (const f of ["--goal GOAL_ID", "--repo REPO_ID", "--source PATH", "--allow PATH", "--criteria TEXT", "--criteria-file FILE", "--selection STEPS"]) expect(create).toContain(f);
    expect(create).toContain('(default: the settings profile\'s own test selection, "test" for repo-python3-v1, "npm test" for repo-node24-npm-v1)');
    const set = (await seraph(["settings", "set", "--help"])).out;
    for (const f of ["--enable", "--disable", "--root DIR", "--limit NAME=VALUE", "--model-route ID", "--model-key-env VAR", "wall_ms"]) expect(set).toContain(f);
  });
});

describe("seraph usage errors", () => {
  it.each(commands.map(([path, c]) => [path.join(" "), path, c] as const))("%s: an unknown flag exits 2 naming it, with the usage on stderr", async (_, path, c) => {
    const r = await seraph([...path, ...validArgs(c), "--no-such-flag"]);
    expect(r.code).toBe(2);
    expect(r.out).toBe("");
    expect(r.err).toContain(`seraph ${path.join(" ")}: unknown flag --no-such-flag`);
    expect(r.err).toContain(`usage: seraph ${path.join(" ")}`);
  });

  it.each(commands.filter(([, c]) => Object.values(c.spec.flags ?? {}).some((f) => f.required)).map(([path, c]) => [path.join(" "), path, c] as const))(
    "%s: each missing required flag exits 2 naming it",
    async (_, path, c) => {
      const full = validArgs(c);
      for (const [name, f] of Object.entries(c.spec.flags ?? {})) {
        if (!f.required) continue;
        const i = full.indexOf(`--${name}`);
        const r = await seraph([...path, ...full.slice(0, i), ...full.slice(i + 2)]);
        expect(r.code).toBe(2);
        expect(r.err).toContain(`seraph ${path.join(" ")}: --${name} is required`);
        expect(r.err).toContain(`usage: seraph ${path.join(" ")}`);
      }
    },
  );

  it("names the one-of rules, missing arguments, bad numbers and flags without a value", async () => {
    const cases: [string[], string][] = [
      [["repair", "propose", "r"], "one of --patch or --model is required"],
      [["repair", "propose", "r", "--patch", "f", "--model"], "--patch and --model exclude each other"],
      [["repair", "create", "--goal", "g", "--repo", "r", "--source", "s", "--allow", "a"], "one of --criteria or --criteria-file is required"],
      [["settings", "set", "--enable", "--disable"], "--enable and --disable exclude each other"],
      [["repair", "show"], "missing REPAIR_ID"],
      [["repair", "source", "r"], "missing PATH"],
      [["token", "list", "extra"], 'unexpected argument "extra"'],
      [["goal", "revise", "g", "--revision", "two"], '--revision must be a whole number, got "two"'],
      [["repair", "create", "--goal"], "--goal needs a value"],
      [["repair", "watch", "r", "--until", "done"], "--until is a repair state"],
      [["repair", "create", "--goal", "", "--repo", "r", "--source", "s", "--allow", "a", "--criteria", "c", "--selection", "npm test"], "--goal must not be empty"],
    ];
    for (const [args, message] of cases) {
      const r = await seraph(args);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.err).toContain(message);
    }
  });

  it("exits 2 on a missing or unknown command or subcommand, with the matching usage on stderr", async () => {
    const none = await seraph([]);
    expect([none.code, none.out]).toEqual([2, ""]);
    expect(none.err).toContain("usage: seraph [--api URL]");
    const unknown = await seraph(["nonsense", "--help"]);
    expect(unknown.code).toBe(2);
    expect(unknown.err).toContain('unknown command "nonsense"');
    const sub = await seraph(["repair", "nope"]);
    expect(sub.code).toBe(2);
    expect(sub.err).toContain('seraph repair: unknown subcommand "nope"');
    expect(sub.err).toContain("usage: seraph repair SUBCOMMAND");
    expect((await seraph(["goal"])).err).toContain("seraph goal: missing subcommand");
  });

  it("says `not logged in` without the usage once the command line is valid", async () => {
    const r = await seraph(["whoami"]);
    expect(r.code).toBe(2);
    expect(r.err).toBe("seraph whoami: not logged in: run `seraph login` or set SERAPH_TOKEN\n");
  });
});

describe("docs/cli.md", () => {
  it("documents every command with each of its flags", async () => {
    const doc = await readFile(new URL("../../../docs/cli.md", import.meta.url), "utf8");
    for (const [path, c] of commands) {
      const section = doc.split(`#### \`seraph ${path.join(" ")}\``)[1]?.split("\n#### ")[0];
      expect(section, `section for seraph ${path.join(" ")}`).toBeDefined();
      for (const name of Object.keys(c.spec.flags ?? {})) expect(section).toContain(`\`--${name}`);
    }
  });
});

describe("nextStep", () => {
  /** The error as the CLI's gRPC transport decodes it: the ErrorInfo arrives in grpc-status-details-bin. */
  function received(message: string, code: Code, reason?: string): ConnectError {
    const details = reason === undefined ? [] : [{ desc: ErrorInfoSchema, value: { reason, domain: "seraph.dev", metadata: {} } }];
    const got = findTrailerError(setTrailerStatus(new Headers(), new ConnectError(message, code, undefined, details)));
    if (!got) throw new Error("no error in the trailers");
    return got;
  }

  it("reads the reason from the ErrorInfo detail, not from the message text", () => {
    const url = "http://127.0.0.1:7400";
    expect(nextStep(received("only the instance operator may (operator_required)", Code.PermissionDenied, "operator_required"), url)).toContain("instance operator");
    // The same text without the detail names no reason: no reason-specific advice.
    expect(nextStep(received("only the instance operator may (operator_required)", Code.PermissionDenied), url)).toBeUndefined();
    expect(seraphErrorInfo(received("x (limit_2mb)", Code.FailedPrecondition, "limit_2mb"))?.reason).toBe("limit_2mb");
    expect(seraphErrorInfo(new ConnectError("x (limit_2mb)", Code.FailedPrecondition))).toBeUndefined();
  });
});
