import { defineConfig } from "vitest/config";

// Unit and integration tests live next to the code (src/**/*.test.ts); cross-service tests in test/.
// Tests run against TypeScript sources; processes they spawn (supervisors, services) run the
// compiled dist/, which `npm test` builds first with `tsc -b`.
export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    projects: [
      { extends: true, test: { name: "packages", include: ["packages/*/src/**/*.test.ts", "packages/profiles/{shared,node24-npm,python3,results}/**/*.test.ts"] } },
      { extends: true, test: { name: "services", include: ["services/*/{src,testing}/**/*.test.ts"] } },
      { extends: true, test: { name: "e2e", include: ["test/**/*.test.ts"] } },
    ],
  },
});
