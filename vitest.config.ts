import { configDefaults, defineConfig } from "vitest/config";

// Three tiers (vitest projects), each selectable with --project:
//   unit         tests next to the code that need no service: no PostgreSQL, NATS or browser
//                (real Linux processes and supervisors are fine): npm run test:unit
//   integration  tests next to the code against real PostgreSQL or NATS (*.int.test.ts)
//   e2e          test/: the services as separate processes, stock gRPC clients, Chromium
// Tests run against TypeScript sources; processes they spawn (supervisors, services) run the
// compiled dist/, which `npm test` (scripts/test.mjs) builds first.
const nextToCode = ["packages/*/src/**/", "packages/profiles/{shared,node24-npm,python3,results,registry}/**/", "services/*/{src,src-ui,testing}/**/"];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Most files wait on processes, sockets and PostgreSQL rather than on the CPU, and each owns its
    // database, ports and run directories, so three run at once even on two cores
    // (SERAPH_TEST_WORKERS overrides; docs/benchmarks.md "The test suite" has the measurements).
    maxWorkers: Number(process.env["SERAPH_TEST_WORKERS"] ?? 3),
    projects: [
      { extends: true, test: { name: "unit", include: nextToCode.map((d) => `${d}*.test.ts`), exclude: [...configDefaults.exclude, "**/*.int.test.ts"] } },
      { extends: true, test: { name: "integration", include: nextToCode.map((d) => `${d}*.int.test.ts`) } },
      { extends: true, test: { name: "e2e", include: ["test/**/*.test.ts"] } },
    ],
  },
});
