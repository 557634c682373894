// Per-test results from a test runner's own report (Node's TAP, pytest's JUnit XML, verbose
// unittest), and the baseline-vs-patched comparison. Pure: the executor reads the report file,
// these functions parse it; the API compares. See README.md ("Per-test results").
export * from "./report.js";
export * from "./node-tap.js";
export * from "./python.js";
export * from "./compare.js";
