/** Placeholder until implemented: fails loudly rather than pretending. */
export async function runCommand(_args: readonly string[]): Promise<number> {
  process.stderr.write("seraph-exec: this command is not implemented yet\n");
  return 2;
}
