/** What one `.pth` file in site-packages would do when `site` processes it. */
export interface PthLines {
  /** Lines `site` would execute (they start with `import`). */
  readonly code: readonly string[];
  /** Lines `site` would add to sys.path (relative to the site-packages directory, or absolute). */
  readonly paths: readonly string[];
}

/**
 * Classifies a `.pth` file's lines exactly as CPython 3.11's `site.addpackage` does: blank lines
 * and lines starting with `#` are skipped, a line starting with `import ` or `import\t` is
 * executed, every other line (right-stripped) is a directory added to sys.path if it exists.
 */
export function classifyPth(text: string): PthLines {
  const code: string[] = [];
  const paths: string[] = [];
  for (const raw of text.split("\n")) {
    if (raw.startsWith("#")) continue;
    if (raw.startsWith("import ") || raw.startsWith("import\t")) {
      code.push(raw.trimEnd());
      continue;
    }
    const line = raw.trimEnd();
    if (line.trim() === "") continue;
    paths.push(line);
  }
  return { code, paths };
}
