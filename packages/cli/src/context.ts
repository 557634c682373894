import { toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { connectApi, type Api } from "./client.js";
import { readLogin, resolveApiUrl, resolveToken } from "./config.js";
import { UsageError, type CliIo } from "./io.js";

/** What every command gets: I/O, output mode, and a lazily connected API. */
export interface CommandContext {
  readonly io: CliIo;
  readonly json: boolean;
  /** Colour badges (stdout is a terminal and NO_COLOR is not set). */
  readonly colour: boolean;
  /** The --api flag, if given. */
  readonly apiFlag: string | undefined;
  /** The API with the configured token; fails with a hint when there is no token. */
  api(): Promise<Api>;
  /** Registers an API connection made outside api() (login) so close() closes it. */
  track(a: Api): Api;
  /** Closes every connection this command opened. */
  close(): void;
  /** Prints a line of human output (suppressed under --json). */
  say(text: string): void;
  /** Writes raw bytes to stdout. */
  bytes(data: Uint8Array): Promise<void>;
  /** Prints a message as JSON (proto3 JSON mapping, every field). */
  json1<D extends DescMessage>(schema: D, message: MessageShape<D>): void;
}

/** Creates the command context. */
export function createContext(io: CliIo, json: boolean, apiFlag: string | undefined): CommandContext {
  let api: Api | undefined;
  const opened: Api[] = [];
  return {
    close() {
      for (const a of opened) a.close();
    },
    io,
    json,
    colour: io.stdoutIsTTY === true && !io.env["NO_COLOR"],
    apiFlag,
    async api() {
      if (api) return api;
      const stored = await readLogin(io);
      const token = resolveToken(io, stored);
      if (!token) throw new UsageError("not logged in: run `seraph login` or set SERAPH_TOKEN", { showUsage: false });
      api = connectApi(resolveApiUrl(io, apiFlag, stored), token);
      opened.push(api);
      return api;
    },
    track(a) {
      opened.push(a);
      return a;
    },
    say(text) {
      if (!json) io.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
    },
    async bytes(data) {
      if (io.writeBytes) await io.writeBytes(data);
      else io.stdout.write(Buffer.from(data).toString("utf8"));
    },
    json1(schema, message) {
      io.stdout.write(`${JSON.stringify(toJson(schema, message, { alwaysEmitImplicit: true }))}\n`);
    },
  };
}

/** A string flag's value. */
export function str(values: Record<string, unknown>, name: string): string | undefined {
  const v = values[name];
  return typeof v === "string" ? v : undefined;
}

/** A repeated string flag's values. */
export function strs(values: Record<string, unknown>, name: string): string[] {
  const v = values[name];
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
}

/** A required string flag. */
export function need(values: Record<string, unknown>, name: string): string {
  const v = str(values, name);
  if (v === undefined) throw new UsageError(`--${name} is required`);
  if (v === "") throw new UsageError(`--${name} must not be empty`);
  return v;
}

/** A non-negative integer flag. */
export function intFlag(values: Record<string, unknown>, name: string): number | undefined {
  const v = str(values, name);
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v)) throw new UsageError(`--${name} must be a whole number, got ${JSON.stringify(v)}`);
  return Number(v);
}
