// The free-space floor's numbers (free-space.ts checks them), apart so the configuration reads
// them without loading the runner.
const MiB = 1024 * 1024;

/** SERAPH_MIN_FREE_BYTES' default: free space a job's staging filesystem must have when it starts. */
export const DEFAULT_MIN_FREE_BYTES = 256 * MiB;
/** Smallest SERAPH_MIN_FREE_BYTES the configuration accepts. */
export const MIN_FREE_BYTES_MIN = 16 * MiB;
/**
 * What one step's run directory needs beside its journals: spec, token, markers, log and the
 * receipt's reserve (receipt-bound.ts: tens of KiB), rounded up generously.
 */
export const RUN_DIR_FILES_BYTES = 1 * MiB;
