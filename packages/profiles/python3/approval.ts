/**
 * What the approval document says about cleanup for repo-python3-v1. The Python profile runs
 * under the same per-job supervisor as the Node profile, so this is about that supervisor — not
 * the process-group-only cleanup of an older Python design, which would not be true here.
 */
export const PYTHON_CLEANUP_CLAIM =
  "per_job_subreaper_echild: each step runs under its own per-job supervisor, a child subreaper, so the CPython interpreter and every process it starts (subprocess, multiprocessing, daemonized or re-parented descendants) stay its descendants. A descendant still alive when the interpreter exits makes the step rejected_leftover_descendants; at the end, on a timeout or a cancel, the supervisor signals every live descendant (pidfd, start time re-checked; SIGTERM, then SIGKILL) and reports cleanup proved only when waitpid returns ECHILD. Without ECHILD the outcome is unknown, never succeeded. This is reaping, not isolation: what the job can reach (its user, files, network) is stated by the document's isolation claim and containment, not here.";
