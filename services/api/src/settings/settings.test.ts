import { create } from "@bufbuild/protobuf";
import { SandboxBackend, SandboxSettingsSchema } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { NodeSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { describe, expect, it } from "vitest";
import { DEFAULT_LIMITS, profileOptions } from "./defaults.js";
import { redactSettings } from "./settings.repository.js";
import { normalizeSettings } from "./settings-service.js";

const empty = create(SandboxSettingsSchema);

describe("settings", () => {
  it("fills defaults, keeps limits at most the profile's, and keeps write-only keys", () => {
    const previous = normalizeSettings(create(SandboxSettingsSchema, { modelRoutes: [{ id: "a", baseUrl: "http://x/v1", model: "m", apiKey: "secret" }] }), empty);
    expect(previous).toMatchObject({ backend: SandboxBackend.LOCAL, profile: "repo-python3-v1", approvalTtlSeconds: 900 });
    expect(normalizeSettings(create(SandboxSettingsSchema, { profile: "repo-node24-npm-v1" }), empty).profile).toBe("repo-node24-npm-v1");
    expect(() => normalizeSettings(create(SandboxSettingsSchema, { profile: "repo-python2-v1" }), empty)).toThrow(/profile_unknown|not a profile/);
    expect(Number(previous.limits?.wallMs)).toBe(DEFAULT_LIMITS.wallMs);
    expect(previous.modelRoutes[0]).toMatchObject({ apiKey: "secret", apiKeySet: true, timeoutMs: 60_000, maxAttempts: 3 });
    const shown = redactSettings(previous);
    expect(shown.modelRoutes[0]).toMatchObject({ apiKey: "", apiKeySet: true });
    // Sending the redacted settings back keeps the key; api_key_set=false clears it.
    expect(normalizeSettings(shown, previous).modelRoutes[0]?.apiKey).toBe("secret");
    shown.modelRoutes[0]!.apiKeySet = false;
    expect(normalizeSettings(shown, previous).modelRoutes[0]?.apiKey).toBe("");
    expect(() => normalizeSettings(create(SandboxSettingsSchema, { limits: { wallMs: 180_001 } }), empty)).toThrow(/limit_widened|above/);
    expect(Number(normalizeSettings(create(SandboxSettingsSchema, { limits: { wallMs: 60_000 } }), empty).limits?.wallMs)).toBe(60_000);
    expect(() => normalizeSettings(create(SandboxSettingsSchema, { backend: SandboxBackend.DOCKER }), empty)).toThrow(/Docker/);
    expect(() => normalizeSettings(create(SandboxSettingsSchema, { enabled: true }), empty)).toThrow(/runtime/);
    expect(() => normalizeSettings(create(SandboxSettingsSchema, { runtimePath: "node" }), empty)).toThrow(/absolute/);
    expect(() => normalizeSettings(create(SandboxSettingsSchema, { repositoryRoots: ["/a/../b"] }), empty)).toThrow(/normalized/);
  });
  it("shows the platforms and backends the profile cannot use as blocked with a code", () => {
    const here = profileOptions([], { platform: "darwin", arch: "arm64" });
    expect(here[0]).toMatchObject({ available: false, blockedCode: "platform_unsupported" });
    expect(profileOptions([], { platform: "linux", arch: "arm64" })[0]?.blockedCode).toBe("arch_unsupported");
    expect(profileOptions([], { platform: "linux", arch: "x64" })[0]?.available).toBe(true);
    expect(here.find((p) => p.backend === SandboxBackend.DOCKER)?.blockedCode).toBe("node_docker_unverified");
  });
  it("blocks the local profiles when a registered node's facility probe found a facility missing, naming it", () => {
    const node = (nodeId: string, ok: boolean) =>
      create(NodeSchema, { nodeId, facilities: { ok, arch: "x64", kernel: "6.1", items: [{ name: "pidfd", ok, code: ok ? "ok" : "pidfd_unavailable", message: ok ? "" : "no pidfd_open" }] } });
    const fine = profileOptions([node("a", true)], { platform: "linux", arch: "x64" });
    expect(fine.slice(0, 2).map((p) => p.available)).toEqual([true, true]);
    const blocked = profileOptions([node("a", true), node("b", false)], { platform: "linux", arch: "x64" });
    for (const p of blocked.slice(0, 2)) {
      expect(p).toMatchObject({ available: false, blockedCode: "facilities_unavailable" });
      expect(p.blockedMessage).toContain("b lacks Linux supervision facilities the per-job supervisor needs (pidfd: pidfd_unavailable: no pidfd_open)");
    }
  });
});
