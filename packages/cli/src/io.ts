import { createInterface } from "node:readline/promises";

/** Everything the CLI touches outside itself; main() gets the process's, tests pass their own. */
export interface CliIo {
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly stdout: { write(s: string): unknown };
  readonly stderr: { write(s: string): unknown };
  /** Whether stdin is an interactive terminal (approval prompts need one, or --yes). */
  readonly stdinIsTTY: boolean;
  /** Whether stdout is a terminal (badges are coloured then, unless NO_COLOR is set). */
  readonly stdoutIsTTY?: boolean;
  /** Writes raw bytes to stdout (artifact get, repair logs); resolves once written. */
  writeBytes?(data: Uint8Array): Promise<void>;
  /** Reads one line from stdin (a token, a confirmation). */
  readLine(prompt: string): Promise<string>;
  /** Home directory for the default config location. */
  readonly home: string;
}

/**
 * The real process's I/O. A reader that goes away (`seraph repair list | head`) is not an error:
 * EPIPE on stdout ends the process quietly with status 0, as the output was not wanted any more.
 */
export function processIo(): CliIo {
  process.stdout.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code === "EPIPE") process.exit(0);
    throw err;
  });
  return {
    env: process.env,
    stdout: process.stdout,
    stderr: process.stderr,
    stdinIsTTY: process.stdin.isTTY === true,
    stdoutIsTTY: process.stdout.isTTY === true,
    writeBytes: (data) =>
      new Promise<void>((resolve) => {
        if (process.stdout.write(data)) resolve();
        else process.stdout.once("drain", () => resolve());
      }),
    home: process.env["HOME"] ?? "",
    async readLine(prompt) {
      const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: process.stdin.isTTY === true });
      try {
        return (await rl.question(prompt)).trim();
      } finally {
        rl.close();
      }
    },
  };
}

/** A command's own refusal with its exit status and message (no usage printed). */
export class CliFailure extends Error {
  override readonly name = "CliFailure";
  /** @param exitCode the status to exit with */
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/**
 * A usage error: exit status 2, printed with the command's usage unless `showUsage` is false
 * (for refusals that are not about the command line, like "not logged in").
 */
export class UsageError extends Error {
  override readonly name = "UsageError";
  readonly showUsage: boolean;
  constructor(message: string, options: { showUsage?: boolean } = {}) {
    super(message);
    this.showUsage = options.showUsage ?? true;
  }
}
