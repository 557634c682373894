/** Receives every snapshot entry as inspection reads it (staging writes them into the job dir). */
export interface SnapshotSink {
  /** A regular file's exact bytes as read and hashed; parents are created by the sink. */
  file(rel: string, bytes: Uint8Array, mode: number): Promise<void>;
  /** A validated relative link (inside node_modules, or a source link resolving inside the snapshot). */
  link(rel: string, target: string): Promise<void>;
  /** A directory of the dependency tree (so empty directories are staged too). */
  directory(rel: string): Promise<void>;
}

/** What the snapshot holds for one regular file. */
export interface SnapshotFile {
  readonly sha256: string;
  readonly size: number;
  readonly mode: number;
  /** "source" outside node_modules, "dependency" inside. */
  readonly area: "source" | "dependency";
}

/** Everything an inspection read, per path, for staging and build-output validation. */
export interface SnapshotIndex {
  readonly files: ReadonlyMap<string, SnapshotFile>;
  readonly links: ReadonlyMap<string, string>;
  /** Source links only: package-relative path → the file or directory the link resolves to. */
  readonly sourceLinks: ReadonlyMap<string, string>;
  readonly directories: readonly string[];
}
