import { createInterface } from "node:readline/promises";

/** Everything the CLI touches outside itself; main() gets the process's, tests pass their own. */
export interface CliIo {
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly stdout: { write(s: string): unknown };
  readonly stderr: { write(s: string): unknown };
  /** Whether stdin is an interactive terminal (approval prompts need one, or --yes). */
  readonly stdinIsTTY: boolean;
  /** Reads one line from stdin (a token, a confirmation). */
  readLine(prompt: string): Promise<string>;
  /** Home directory for the default config location. */
  readonly home: string;
}

/** The real process's I/O. */
export function processIo(): CliIo {
  return {
    env: process.env,
    stdout: process.stdout,
    stderr: process.stderr,
    stdinIsTTY: process.stdin.isTTY === true,
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
