/**
 * The errnos by which storage refuses a write the supervisor makes (a full disk, a quota, a
 * failing device). On these a supervisor write is given up and recorded, never fatal: journals
 * stop keeping bytes (still counting and hashing them), log lines are dropped, and the receipt,
 * whose space was reserved before GO (receipt-reserve.ts), says what was not kept.
 */
export const STORAGE_ERRNOS: ReadonlySet<string> = new Set(["ENOSPC", "EDQUOT", "EIO"]);

/** The storage errno of `err` ("ENOSPC", "EDQUOT", "EIO"), or undefined for any other error. */
export function storageErrno(err: unknown): string | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === "string" && STORAGE_ERRNOS.has(code) ? code : undefined;
}

/** Exit status of a supervisor that found no space for its marker and receipt reserve (EX_CANTCREAT). */
export const EXIT_NO_SPACE = 73;

/** Most lines StorageNotes keeps (the receipt's storage_errors is bounded: receipt-bound.ts). */
export const MAX_STORAGE_NOTES = 16;
/** Longest line StorageNotes keeps. */
export const MAX_STORAGE_NOTE_CHARS = 120;

/**
 * Every supervisor write the storage refused, one line per file (`<file>: <errno> …`), for the
 * receipt's storage_errors. A file noted again updates its line (the log's dropped-line count).
 */
export class StorageNotes {
  readonly #lines = new Map<string, string>();

  /** Records (or updates) the line of `file`; past MAX_STORAGE_NOTES files nothing new is added. */
  note(file: string, detail: string): void {
    if (!this.#lines.has(file) && this.#lines.size >= MAX_STORAGE_NOTES) return;
    this.#lines.set(file, `${file}: ${detail}`.slice(0, MAX_STORAGE_NOTE_CHARS));
  }

  /** The lines so far, in the order the files first failed. */
  lines(): string[] {
    return [...this.#lines.values()];
  }
}
