import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { natsPermissions, renderNatsAuthorization, type NatsRole } from "@seraph/kit";
import { DaemonSet, Deployment, StatefulSet } from "kubernetes-models/apps/v1";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";
import { ConfigMap, Secret, Service } from "kubernetes-models/v1";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { loadApiConfig } from "../services/api/src/config.js";
import { loadExecutorConfig } from "../services/executor-linux/src/config.js";
import { loadSupervisorHostConfig } from "../services/executor-linux/src/supervisor-host/config.js";
import { loadJobsConfig } from "../services/jobs/src/config.js";
import { loadGatewayConfig } from "../services/ui-gateway/src/config.js";

// Both overlays rendered by `kubectl kustomize` (the kustomize in kubectl; the kustomizations use
// only what kustomize v2.0.3, Debian's kubectl 1.20, through v5 understand), then every object is
// validated against the Kubernetes API JSON schemas bundled in kubernetes-models 4.5 (the
// Kubernetes 1.33 API: Lifecycle.stopSignal, PodSecurityContext.supplementalGroupsPolicy and
// seLinuxChangePolicy are in it; 5.x needs Node 22, and Seraph supports Node 20), then against Seraph's own rules. The manifests need Kubernetes >= 1.30 (the
// appArmorProfile field). What the schemas do not check: unknown fields (the published schemas
// allow additional properties) and the API server's cross-field rules, some of which are
// encoded below (e.g. allowPrivilegeEscalation=false is refused together with CAP_SYS_ADMIN).

type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string> }; [k: string]: any };

const repo = fileURLToPath(new URL("..", import.meta.url));
let work: string;
const rendered: Record<"dev" | "production", Obj[]> = { dev: [], production: [] };

const MODELS: Record<string, new (data: any) => { validate(): void }> = {
  "apps/v1/Deployment": Deployment,
  "apps/v1/DaemonSet": DaemonSet,
  "apps/v1/StatefulSet": StatefulSet,
  "v1/Service": Service,
  "v1/ConfigMap": ConfigMap,
  "v1/Secret": Secret,
  "networking.k8s.io/v1/NetworkPolicy": NetworkPolicy,
  "policy/v1/PodDisruptionBudget": PodDisruptionBudget,
};

function kustomize(dir: string): Obj[] {
  let out: string;
  try {
    out = execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 });
  } catch (err) {
    throw new Error(`kubectl kustomize ${dir} failed (kubectl is required: Debian package kubernetes-client; .ci/run installs it): ${String((err as { stderr?: string }).stderr ?? err)}`);
  }
  const objs = parseAllDocuments(out)
    .map((d) => d.toJS() as Obj)
    .filter((o) => o !== null);
  // kustomize wraps long base64 values of generated Secrets over lines; the API server's
  // base64 decoder skips line breaks, the schema's "byte" format does not.
  for (const o of objs) if (o.kind === "Secret") for (const k of Object.keys(o["data"] ?? {})) o["data"][k] = String(o["data"][k]).replace(/\s+/g, "");
  return objs;
}

const workloads = (objs: Obj[]) => objs.filter((o) => ["Deployment", "DaemonSet", "StatefulSet"].includes(o.kind));
const podSpec = (w: Obj) => w["spec"].template.spec;
const containersOf = (w: Obj): any[] => podSpec(w).containers;
const initContainersOf = (w: Obj): any[] => podSpec(w).initContainers ?? [];
const byName = (objs: Obj[], kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);
/** Kustomize appends a content hash to generated names; the base name without it. */
const baseName = (name: string) => name.replace(/-[a-z0-9]{10}$/, "");

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "seraph-deploy-"));
  cpSync(join(repo, "deploy"), join(work, "deploy"), { recursive: true, filter: (s) => !s.includes("/secrets") });
  execFileSync("sh", [join(work, "deploy/overlays/dev/make-secrets.sh")], { stdio: "pipe" });
  rendered.dev = kustomize(join(work, "deploy/overlays/dev"));
  rendered.production = kustomize(join(work, "deploy/overlays/production"));
}, 120_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe.each(["dev", "production"] as const)("%s overlay", (overlay) => {
  const objs = () => rendered[overlay];

  it("renders, and every object is valid against the Kubernetes API schemas", () => {
    expect(objs().length).toBeGreaterThan(10);
    for (const o of objs()) {
      const Model = MODELS[`${o.apiVersion}/${o.kind}`];
      expect(Model, `no schema model for ${o.apiVersion} ${o.kind}`).toBeDefined();
      expect(() => new Model!(o).validate(), `${o.kind}/${o.metadata.name}`).not.toThrow();
      expect(o.metadata.namespace ?? "", `${o.kind}/${o.metadata.name} namespace`).toBe(overlay === "dev" ? "seraph-dev" : "seraph");
    }
  });

  it("a broken object fails the schema check (the validator is not a no-op)", () => {
    const d = structuredClone(byName(objs(), "Deployment", "seraph-api")!);
    d["spec"].replicas = "two";
    expect(() => new Deployment(d as never).validate()).toThrow();
    const p = structuredClone(d);
    p["spec"].replicas = 1;
    p["spec"].template.spec.containers[0].readinessProbe.grpc.port = "grpc";
    expect(() => new Deployment(p as never).validate()).toThrow();
  });

  it("every container has readiness and liveness probes (gRPC health on every gRPC port), resources and a hardened security context", () => {
    for (const w of workloads(objs())) {
      const pod = podSpec(w);
      expect(pod.securityContext?.seccompProfile?.type, `${w.metadata.name} seccomp`).toBe("RuntimeDefault");
      expect(pod.automountServiceAccountToken, `${w.metadata.name} service account token`).toBe(false);
      expect(typeof pod.terminationGracePeriodSeconds, `${w.metadata.name} grace`).toBe("number");
      for (const c of [...containersOf(w), ...initContainersOf(w)]) {
        const where = `${w.metadata.name}/${c.name}`;
        const init = initContainersOf(w).includes(c);
        expect(c.resources?.requests?.cpu, `${where} cpu request`).toBeDefined();
        expect(c.resources?.requests?.memory, `${where} memory request`).toBeDefined();
        expect(c.resources?.limits?.memory, `${where} memory limit`).toBeDefined();
        expect(c.securityContext?.readOnlyRootFilesystem, `${where} read-only root`).toBe(true);
        expect(c.securityContext?.capabilities?.drop, `${where} drops all`).toEqual(["ALL"]);
        const added: string[] = c.securityContext?.capabilities?.add ?? [];
        if (added.includes("SYS_ADMIN")) expect(c.securityContext.allowPrivilegeEscalation, `${where}: the API refuses false with SYS_ADMIN`).not.toBe(false);
        else expect(c.securityContext?.allowPrivilegeEscalation, `${where} no privilege escalation`).toBe(false);
        if (!init) {
          expect(c.readinessProbe, `${where} readiness`).toBeDefined();
          expect(c.livenessProbe, `${where} liveness`).toBeDefined();
          const grpc = (c.ports ?? []).find((p: any) => p.name === "grpc");
          if (grpc) {
            for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe]) expect(probe?.grpc?.port, `${where} gRPC health probe`).toBe(grpc.containerPort);
          }
        }
      }
    }
  });

  it("runs as non-root everywhere except the two executor steps that need root, each with only its stated capabilities", () => {
    const allowed: Record<string, string[]> = {
      "seraph-executor/prepare-run-dir": ["CHOWN", "FOWNER"],
      "seraph-executor/supervisor-host": ["SYS_ADMIN", "SETUID", "SETGID"],
    };
    for (const w of workloads(objs())) {
      expect(podSpec(w).securityContext?.runAsNonRoot, `${w.metadata.name} pod runAsNonRoot`).toBe(true);
      expect(podSpec(w).securityContext?.runAsUser ?? 0, `${w.metadata.name} pod uid`).toBeGreaterThan(0);
      for (const c of [...containersOf(w), ...initContainersOf(w)]) {
        const where = `${w.metadata.name}/${c.name}`;
        const caps: string[] = c.securityContext?.capabilities?.add ?? [];
        if (where in allowed) {
          expect(caps.sort(), where).toEqual([...allowed[where]!].sort());
        } else {
          expect(caps, `${where} adds no capability`).toEqual([]);
          expect(c.securityContext?.runAsUser ?? podSpec(w).securityContext.runAsUser, `${where} uid`).toBeGreaterThan(0);
          expect(c.securityContext?.runAsNonRoot ?? true, `${where} runAsNonRoot`).toBe(true);
        }
      }
    }
  });

  it("every Service port targets a container port of the pods it selects", () => {
    for (const s of objs().filter((o) => o.kind === "Service")) {
      const selected = workloads(objs()).filter((w) => Object.entries(s["spec"].selector).every(([k, v]) => w["spec"].template.metadata.labels?.[k] === v));
      expect(selected.length, `Service ${s.metadata.name} selects a workload`).toBeGreaterThan(0);
      for (const p of s["spec"].ports) {
        const ports = selected.flatMap((w) => containersOf(w).flatMap((c) => c.ports ?? []));
        expect(ports.some((cp: any) => cp.name === p.targetPort || cp.containerPort === p.targetPort), `Service ${s.metadata.name} port ${p.name}`).toBe(true);
      }
    }
  });

  it("every ConfigMap and Secret key a pod reads exists (dev generates them all; production expects exactly the documented platform Secrets)", () => {
    const refs: { kind: "Secret" | "ConfigMap"; name: string; key?: string; where: string }[] = [];
    for (const w of workloads(objs())) {
      for (const c of [...containersOf(w), ...initContainersOf(w)]) {
        const where = `${w.metadata.name}/${c.name}`;
        for (const e of c.env ?? []) {
          if (e.valueFrom?.secretKeyRef) refs.push({ kind: "Secret", name: e.valueFrom.secretKeyRef.name, key: e.valueFrom.secretKeyRef.key, where });
          if (e.valueFrom?.configMapKeyRef) refs.push({ kind: "ConfigMap", name: e.valueFrom.configMapKeyRef.name, key: e.valueFrom.configMapKeyRef.key, where });
        }
        for (const e of c.envFrom ?? []) {
          if (e.secretRef) refs.push({ kind: "Secret", name: e.secretRef.name, where });
          if (e.configMapRef) refs.push({ kind: "ConfigMap", name: e.configMapRef.name, where });
        }
      }
      for (const v of podSpec(w).volumes ?? []) {
        if (v.secret) refs.push({ kind: "Secret", name: v.secret.secretName, where: `${w.metadata.name} volume ${v.name}` });
        if (v.configMap) refs.push({ kind: "ConfigMap", name: v.configMap.name, where: `${w.metadata.name} volume ${v.name}` });
      }
    }
    expect(refs.length).toBeGreaterThan(5);
    const platform = new Set<string>();
    for (const r of refs) {
      const obj = byName(objs(), r.kind, r.name);
      if (overlay === "production" && r.kind === "Secret") {
        expect(obj, `${r.where}: production Secrets come from the platform`).toBeUndefined();
        platform.add(`${r.name}:${r.key ?? "*"}`);
        continue;
      }
      expect(obj, `${r.where} reads ${r.kind} ${r.name}`).toBeDefined();
      if (r.key !== undefined) expect(Object.keys(obj!["data"] ?? {}), `${r.where} reads ${r.name}.${r.key}`).toContain(r.key);
    }
    if (overlay === "production") {
      expect([...platform].sort()).toEqual(
        ["seraph-database:DATABASE_URL", "seraph-internal:SERAPH_INTERNAL_TOKEN", "seraph-nats:NATS_URL", "seraph-nats:api-password", "seraph-nats:executor-password", "seraph-nats:jobs-password"].sort(),
      );
    }
  });

  it("every Seraph container's environment is read by that service's config (no stray or misspelt variable) and passes it", () => {
    const configs: Record<string, (env: Record<string, string>) => object> = {
      "seraph-api/api": loadApiConfig,
      "seraph-jobs/jobs": loadJobsConfig,
      "seraph-ui-gateway/ui-gateway": loadGatewayConfig,
      "seraph-executor/executor": loadExecutorConfig,
      "seraph-executor/supervisor-host": loadSupervisorHostConfig,
    };
    const configMap = byName(objs(), "ConfigMap", objs().find((o) => o.kind === "ConfigMap" && baseName(o.metadata.name) === "seraph-config")!.metadata.name)!;
    const auth = new Set(["NATS_USER", "NATS_PASSWORD", "NATS_CREDS_FILE"]);
    for (const w of workloads(objs()).filter((x) => x.metadata.name.startsWith("seraph-") && containersOf(x).some((c) => /seraph(:|$)/.test(c.image)))) {
      for (const c of containersOf(w)) {
        const load = configs[`${w.metadata.name}/${c.name}`];
        expect(load, `${w.metadata.name}/${c.name} has a config reader`).toBeDefined();
        const env: Record<string, string> = {};
        for (const from of c.envFrom ?? []) if (from.configMapRef) Object.assign(env, configMap["data"]);
        for (const e of c.env ?? []) {
          if (e.value !== undefined) env[e.name] = String(e.value).replace("$(POD_IP)", "10.0.0.7");
          else if (e.valueFrom?.fieldRef) env[e.name] = e.valueFrom.fieldRef.fieldPath === "spec.nodeName" ? "node-1.example" : "10.0.0.7";
          else env[e.name] = e.valueFrom?.secretKeyRef?.key === "DATABASE_URL" ? "postgres://u:p@db:5432/seraph" : e.valueFrom?.secretKeyRef?.key === "NATS_URL" ? "nats://nats:4222" : "x".repeat(64);
        }
        const cfg = load!(env);
        for (const name of Object.keys(env)) {
          if (name === "POD_IP" || auth.has(name)) continue;
          // The shared ConfigMap carries settings of several services; each reads its own.
          if (name in configMap["data"] && !(c.env ?? []).some((e: any) => e.name === name)) continue;
          expect(Object.keys(cfg), `${w.metadata.name}/${c.name} sets ${name}`).toContain(name);
        }
      }
    }
  });

  it("network policies: default deny; only the gateway and the API open to all; jobs from the API and executors; executors from the API", () => {
    const policies = objs().filter((o) => o.kind === "NetworkPolicy");
    const deny = policies.find((p) => Object.keys(p["spec"].podSelector).length === 0);
    expect(deny?.["spec"].policyTypes).toEqual(["Ingress"]);
    expect(deny?.["spec"].ingress ?? []).toEqual([]);
    const sourcesOf = (app: string) => {
      const ps = policies.filter((p) => p["spec"].podSelector.matchLabels?.app === app);
      expect(ps.length, `a policy selects ${app}`).toBe(1);
      return (ps[0]!["spec"].ingress as any[]).map((r) =>
        r.from === undefined ? "*" : r.from.map((f: any) => (f.podSelector?.matchLabels?.app ? [f.podSelector.matchLabels.app] : f.podSelector.matchExpressions[0].values)).flat().sort().join(","),
      );
    };
    expect(sourcesOf("seraph-api")).toEqual(["*"]);
    expect(sourcesOf("seraph-ui-gateway")).toEqual(["*"]);
    expect(sourcesOf("seraph-jobs")).toEqual(["seraph-api,seraph-executor"]);
    expect(sourcesOf("seraph-executor")).toEqual(["seraph-api"]);
    for (const p of policies) for (const r of p["spec"].ingress ?? []) for (const f of r.from ?? []) expect(f.namespaceSelector ?? f.ipBlock, `${p.metadata.name} stays in the namespace`).toBeUndefined();
    if (overlay === "dev") {
      expect(sourcesOf("seraph-postgres")).toEqual(["seraph-api,seraph-jobs"]);
      expect(sourcesOf("seraph-nats")).toEqual(["seraph-api,seraph-executor,seraph-jobs"]);
    }
    // Every workload is covered by a policy of its own besides the default deny.
    for (const w of workloads(objs())) expect(policies.some((p) => p["spec"].podSelector.matchLabels?.app === w.metadata.name), w.metadata.name).toBe(true);
  });

  it("the executor pod: shared PID namespace, the agent delegating to a supervisor host that is tini as PID 1 of its own namespace, one run directory, 0700 and owned by uid 10001", () => {
    const ds = byName(objs(), "DaemonSet", "seraph-executor")!;
    expect(ds).toBeDefined();
    const pod = podSpec(ds);
    expect(pod.shareProcessNamespace).toBe(true);
    expect(pod.nodeSelector["seraph.dev/executor"]).toBe("true");
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(200);
    const agent = containersOf(ds).find((c) => c.name === "executor");
    const host = containersOf(ds).find((c) => c.name === "supervisor-host");
    const env = (c: any, n: string) => c.env.find((e: any) => e.name === n)?.value;
    expect(env(agent, "SERAPH_SUPERVISOR_HOST_SOCKET")).toBe(env(host, "SERAPH_SUPERVISOR_HOST_SOCKET"));
    expect(env(agent, "SERAPH_EXECUTOR_DATA_DIR")).toBe(env(host, "SERAPH_EXECUTOR_DATA_DIR"));
    const dataDir = env(agent, "SERAPH_EXECUTOR_DATA_DIR");
    for (const c of [agent, host]) expect(c.volumeMounts.find((m: any) => m.name === "run")?.mountPath).toBe(dataDir);
    const cmd: string[] = host.command;
    expect(cmd.slice(0, 5)).toEqual(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]);
    expect(cmd).toContain("--reuid=10001");
    expect(cmd).toContain("--no-new-privs");
    expect(cmd.slice(cmd.indexOf("tini"))).toEqual(["tini", "--", "node", "services/executor-linux/dist/supervisor-host/main.js"]);
    const init = initContainersOf(ds).find((c) => c.name === "prepare-run-dir");
    expect(init.command.join(" ")).toContain(`chown 10001:10001 ${dataDir}`);
    expect(init.command.join(" ")).toContain(`chmod 0700 ${dataDir}`);
    expect(pod.volumes.find((v: any) => v.name === "run").hostPath).toEqual({ path: dataDir, type: "DirectoryOrCreate" });
  });

  if (overlay === "dev") {
    it("dev: one replica each, PostgreSQL and NATS as StatefulSets with volumes and generated credentials, NATS users exactly as the services' permission table", () => {
      for (const w of workloads(objs()).filter((x) => x.kind !== "DaemonSet")) expect(w["spec"].replicas, w.metadata.name).toBe(1);
      for (const name of ["seraph-postgres", "seraph-nats"]) {
        const ss = byName(objs(), "StatefulSet", name)!;
        expect(ss["spec"].volumeClaimTemplates.length, name).toBe(1);
      }
      for (const name of ["seraph-internal", "seraph-database", "seraph-postgres", "seraph-nats"]) {
        const s = objs().find((o) => o.kind === "Secret" && baseName(o.metadata.name) === name);
        expect(s, `generated Secret ${name}`).toBeDefined();
        for (const v of Object.values(s!["data"] as Record<string, string>)) expect(Buffer.from(v, "base64").length).toBeGreaterThan(10);
      }
      const internal = objs().find((o) => o.kind === "Secret" && baseName(o.metadata.name) === "seraph-internal")!;
      expect(Buffer.from(internal["data"].SERAPH_INTERNAL_TOKEN, "base64").toString()).toMatch(/^[0-9a-f]{64}$/);
      const conf = objs().find((o) => o.kind === "ConfigMap" && baseName(o.metadata.name) === "seraph-nats-config")!["data"]["nats.conf"] as string;
      const roles: [string, NatsRole, string][] = [
        ["seraph-jobs", "jobs", "NATS_JOBS_PASSWORD"],
        ["seraph-api", "api", "NATS_API_PASSWORD"],
        ["seraph-executor", "executor", "NATS_EXECUTOR_PASSWORD"],
        ["seraph-ops", "ops", "NATS_OPS_PASSWORD"],
      ];
      const expected = renderNatsAuthorization(roles.map(([user, role, v]) => ({ user, password: `@@${v}`, permissions: natsPermissions(role) }))).replace(/"@@(\w+)"/g, "$$$1");
      expect(conf).toContain(expected);
      expect(conf).not.toContain("no_auth_user");
      // The service users the pods connect as are exactly those of the config.
      const users = workloads(objs()).flatMap((w) => containersOf(w).flatMap((c) => (c.env ?? []).filter((e: any) => e.name === "NATS_USER").map((e: any) => e.value)));
      expect([...new Set(users)].sort()).toEqual(roles.map(([u]) => u).filter((u) => u !== "seraph-ops").sort());
    });
  } else {
    it("production: two spread replicas of api, jobs and gateway with PodDisruptionBudgets, required anti-affinity for api and jobs, the image from the registry", () => {
      for (const name of ["seraph-api", "seraph-jobs", "seraph-ui-gateway"]) {
        const d = byName(objs(), "Deployment", name)!;
        expect(d["spec"].replicas, name).toBe(2);
        const pdb = objs().find((o) => o.kind === "PodDisruptionBudget" && o["spec"].selector.matchLabels.app === name);
        expect(pdb?.["spec"].minAvailable, `${name} PDB`).toBe(1);
      }
      for (const name of ["seraph-api", "seraph-jobs"]) {
        const terms = podSpec(byName(objs(), "Deployment", name)!).affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution;
        expect(terms[0].topologyKey).toBe("kubernetes.io/hostname");
        expect(terms[0].labelSelector.matchLabels.app).toBe(name);
      }
      for (const w of workloads(objs())) for (const c of [...containersOf(w), ...initContainersOf(w)]) expect(c.image, `${w.metadata.name}/${c.name}`).toBe("registry.example.com/seraph:0.1.0");
      expect(objs().some((o) => o.kind === "StatefulSet")).toBe(false);
    });
  }
});

describe("Dockerfile", () => {
  it("installs from every workspace's package.json and builds the layout the image-layout test starts", () => {
    const docker = readFileSync(join(repo, "Dockerfile"), "utf8");
    const root = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { workspaces: string[] };
    for (const ws of root.workspaces) expect(docker, ws).toContain(`COPY ${ws}/package.json ${ws}/`);
    expect(docker).toContain("node scripts/build-image-layout.mjs /layout");
    expect(docker).toContain("COPY --from=build --chown=root:root /layout/ /");
    expect(docker).toMatch(/^USER 10001:10001$/m);
    expect(docker).toMatch(/^ARG NODE_IMAGE=node:20-bookworm-slim$/m);
  });
});
