import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { natsPermissions, renderNatsAuthorization, type NatsRole } from "@seraph/kit";
import { DaemonSet, Deployment, StatefulSet } from "kubernetes-models/apps/v1";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";
import { PriorityClass } from "kubernetes-models/scheduling.k8s.io/v1";
import { ConfigMap, Secret, Service } from "kubernetes-models/v1";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadApiConfig } from "@seraph/api";
import { loadExecutorConfig, loadSupervisorHostConfig } from "@seraph/executor-linux";
import { loadJobsConfig } from "@seraph/jobs";
import { loadGatewayConfig } from "@seraph/ui-gateway";
import { baseName, byBaseName, containerEnv, dockerfileStages, podSpec, renderOverlays, REPO as repo, workloads, type Obj } from "./harness/deploy.js";
import { NATS_SERVER_BIN } from "./harness/nats-server.js";

// Both overlays rendered by `kubectl kustomize` (the kustomize in kubectl; the kustomizations use
// only what kustomize v2.0.3, Debian's kubectl 1.20, through v5 understand), then every object is
// validated against the Kubernetes API JSON schemas bundled in kubernetes-models 4.5 (the
// Kubernetes 1.33 API: Lifecycle.stopSignal, PodSecurityContext.supplementalGroupsPolicy and
// seLinuxChangePolicy are in it; 5.x needs Node 22, and Seraph supports Node 20), then against Seraph's own rules. The manifests need Kubernetes >= 1.30 (the
// appArmorProfile field). What the schemas do not check: unknown fields (the published schemas
// allow additional properties) and the API server's cross-field rules, some of which are
// encoded below (e.g. allowPrivilegeEscalation=false is refused together with CAP_SYS_ADMIN).

let overlays: ReturnType<typeof renderOverlays>;
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
  "scheduling.k8s.io/v1/PriorityClass": PriorityClass,
};

const containersOf = (w: Obj): any[] => podSpec(w).containers;
const initContainersOf = (w: Obj): any[] => podSpec(w).initContainers ?? [];
const byName = (objs: Obj[], kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);
const labelsMatch = (selector: Record<string, string>, labels: Record<string, string> | undefined) => Object.entries(selector).every(([k, v]) => labels?.[k] === v);
/** Pods (workloads) a NetworkPolicy-style selector (matchLabels or one `app In` expression) picks. */
const selectedBy = (objs: Obj[], sel: any): Obj[] =>
  workloads(objs).filter((w) => {
    const labels = w["spec"].template.metadata.labels as Record<string, string>;
    if (!labelsMatch(sel.matchLabels ?? {}, labels)) return false;
    return (sel.matchExpressions ?? []).every((e: any) => e.operator === "In" && e.values.includes(labels[e.key]));
  });
/** A container port by name or number. */
const portOf = (c: any, ref: string | number): number | undefined => (c.ports ?? []).find((p: any) => p.name === ref || p.containerPort === ref)?.containerPort;

/** The config reader of each Seraph container. */
const CONFIGS: Record<string, (env: Record<string, string>) => object> = {
  "seraph-api/api": loadApiConfig,
  "seraph-jobs/jobs": loadJobsConfig,
  "seraph-ui-gateway/ui-gateway": loadGatewayConfig,
  "seraph-executor/executor": loadExecutorConfig,
  "seraph-executor/supervisor-host": loadSupervisorHostConfig,
};
const isSeraph = (c: any) => /(^|\/)seraph(:|$)/.test(c.image);
/**
 * Production's Secrets come from the platform; the ones deploy/README.md tells the operator to
 * create, with stand-in values, so that every container's environment can be built.
 */
const PLATFORM_SECRETS: Record<string, Record<string, string>> = {
  "seraph-internal": { SERAPH_INTERNAL_TOKEN: "0".repeat(64) },
  "seraph-executor-token": { SERAPH_EXECUTOR_TOKEN: "1".repeat(64) },
  "seraph-database": { DATABASE_URL: "postgres://seraph:pw@db.example:5432/seraph" },
  "seraph-nats": { NATS_URL: "nats://nats.example:4222", "api-password": "a", "jobs-password": "j", "executor-password": "e" },
};
/** The objects a container's environment resolves against: production gets the platform's Secrets. */
function withPlatform(overlay: "dev" | "production"): Obj[] {
  if (overlay === "dev") return rendered.dev;
  const secrets = Object.entries(PLATFORM_SECRETS).map(([name, d]) => ({
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name, namespace: "seraph" },
    data: Object.fromEntries(Object.entries(d).map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
  }));
  return [...rendered.production, ...secrets];
}
const POD = { podIP: "10.0.0.7", nodeName: "node-1.example" };

beforeAll(() => {
  overlays = renderOverlays();
  rendered.dev = overlays.dev;
  rendered.production = overlays.production;
}, 120_000);

afterAll(() => {
  overlays?.close();
});

describe.each(["dev", "production"] as const)("%s overlay", (overlay) => {
  const objs = () => rendered[overlay];

  it("renders, and every object is valid against the Kubernetes API schemas", () => {
    expect(objs().length).toBeGreaterThan(10);
    for (const o of objs()) {
      const Model = MODELS[`${o.apiVersion}/${o.kind}`];
      expect(Model, `no schema model for ${o.apiVersion} ${o.kind}`).toBeDefined();
      expect(() => new Model!(o).validate(), `${o.kind}/${o.metadata.name}`).not.toThrow();
      // PriorityClass is cluster-scoped: kustomize leaves it without a namespace, as it must.
      const namespace = o.kind === "PriorityClass" ? "" : overlay === "dev" ? "seraph-dev" : "seraph";
      expect(o.metadata.namespace ?? "", `${o.kind}/${o.metadata.name} namespace`).toBe(namespace);
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
      "seraph-executor/supervisor-host": ["SYS_ADMIN", "SETUID", "SETGID", "KILL"],
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
        ["seraph-database:DATABASE_URL", "seraph-executor-token:SERAPH_EXECUTOR_TOKEN", "seraph-internal:SERAPH_INTERNAL_TOKEN", "seraph-nats:NATS_URL", "seraph-nats:api-password", "seraph-nats:executor-password", "seraph-nats:jobs-password"].sort(),
      );
    }
  });

  it("every Seraph container's environment resolves as the kubelet builds it, is read by that service's config (no stray or misspelt variable) and passes it", () => {
    const objs = withPlatform(overlay);
    const configMap = byBaseName(objs, "ConfigMap", "seraph-config")!;
    const auth = new Set(["NATS_USER", "NATS_PASSWORD", "NATS_CREDS_FILE"]);
    for (const w of workloads(objs).filter((x) => containersOf(x).some(isSeraph))) {
      for (const c of containersOf(w)) {
        const load = CONFIGS[`${w.metadata.name}/${c.name}`];
        expect(load, `${w.metadata.name}/${c.name} has a config reader`).toBeDefined();
        const env = containerEnv(objs, c, POD);
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

  it("every Seraph server listens on 0.0.0.0 at exactly its declared container ports (grpc, http, metrics), and its pod's scrape annotations name the metrics port", () => {
    const objs = withPlatform(overlay);
    let servers = 0;
    for (const w of workloads(objs).filter((x) => containersOf(x).some(isSeraph))) {
      for (const c of containersOf(w)) {
        const cfg = CONFIGS[`${w.metadata.name}/${c.name}`]!(containerEnv(objs, c, POD)) as Record<string, unknown>;
        const where = `${w.metadata.name}/${c.name}`;
        const key = (suffix: string) => Object.keys(cfg).find((k) => k.endsWith(suffix));
        if (key("_GRPC_PORT") === undefined) {
          expect(c.ports ?? [], `${where} serves nothing, so declares no port`).toEqual([]);
          continue;
        }
        servers++;
        expect(cfg[key("_HOST")!], `${where} ${key("_HOST")}`).toBe("0.0.0.0");
        expect(cfg[key("_GRPC_PORT")!], `${where} ${key("_GRPC_PORT")}`).toBe(portOf(c, "grpc"));
        expect(cfg[key("_HTTP_PORT")!], `${where} ${key("_HTTP_PORT")}`).toBe(portOf(c, "http"));
        expect(cfg[key("_METRICS_PORT")!], `${where} ${key("_METRICS_PORT")}`).toBe(portOf(c, "metrics"));
        expect((c.ports as any[]).map((p) => p.name).sort(), where).toEqual(["grpc", "http", "metrics"]);
        // Prometheus's pod annotations name the same port.
        const annotations = w["spec"].template.metadata.annotations ?? {};
        expect([annotations["prometheus.io/scrape"], annotations["prometheus.io/port"], annotations["prometheus.io/path"]], `${where} scrape annotations`).toEqual(["true", String(portOf(c, "metrics")), "/metrics"]);
      }
    }
    expect(servers).toBe(4);
  });

  it("every address a service is configured with names a Service of the overlay at a port that reaches the callee's gRPC port, and the NetworkPolicies let that caller in", () => {
    const objs = withPlatform(overlay);
    const policies = objs.filter((o) => o.kind === "NetworkPolicy");
    const admits = (caller: Obj, callee: Obj, port: number) =>
      policies.some(
        (p) =>
          selectedBy(objs, p["spec"].podSelector).includes(callee) &&
          (p["spec"].ingress ?? []).some(
            (r: any) => (r.from === undefined || r.from.some((f: any) => f.podSelector !== undefined && selectedBy(objs, f.podSelector).includes(caller))) && (r.ports ?? []).some((rp: any) => rp.port === port),
          ),
      );
    const edges: string[] = [];
    for (const w of workloads(objs).filter((x) => containersOf(x).some(isSeraph))) {
      for (const c of containersOf(w)) {
        const env = containerEnv(objs, c, POD);
        const read = Object.keys(CONFIGS[`${w.metadata.name}/${c.name}`]!(env));
        for (const [name, value] of Object.entries(env)) {
          if (!read.includes(name)) continue;
          const m = /^(http|nats|postgres):\/\/(?:[^@/]*@)?([^:/]+):(\d+)/.exec(value);
          if (!m) continue;
          const [, scheme, host, portText] = m;
          const port = Number(portText);
          const where = `${w.metadata.name}/${c.name} ${name}=${scheme}://${host}:${port}`;
          if (host === POD.podIP) {
            // The executor's advertised address: its own pod IP and gRPC port.
            expect(port, where).toBe(portOf(c, "grpc"));
            continue;
          }
          if (host!.endsWith(".example")) {
            expect(overlay, `${where}: only production's platform Secrets name outside hosts`).toBe("production");
            continue;
          }
          const svc = byName(objs, "Service", host!);
          expect(svc, `${where}: a Service ${host}`).toBeDefined();
          const sp = (svc!["spec"].ports as any[]).find((p) => p.port === port);
          expect(sp, `${where}: Service port ${port}`).toBeDefined();
          const callees = workloads(objs).filter((x) => labelsMatch(svc!["spec"].selector, x["spec"].template.metadata.labels));
          for (const callee of callees) {
            const target = containersOf(callee).map((cc) => portOf(cc, sp.targetPort)).find((p) => p !== undefined);
            expect(target, `${where}: targets a container port`).toBeDefined();
            if (scheme === "http") expect(containersOf(callee).some((cc) => portOf(cc, "grpc") === target), `${where}: the callee's gRPC port`).toBe(true);
            expect(admits(w, callee, target!), `${where}: a NetworkPolicy admits ${w.metadata.name} to ${callee.metadata.name}:${target}`).toBe(true);
            edges.push(`${w.metadata.name}->${callee.metadata.name}`);
          }
        }
      }
    }
    const expected = ["seraph-api->seraph-jobs", "seraph-executor->seraph-jobs", "seraph-ui-gateway->seraph-api"];
    if (overlay === "dev") expected.push("seraph-api->seraph-nats", "seraph-api->seraph-postgres", "seraph-executor->seraph-nats", "seraph-jobs->seraph-nats", "seraph-jobs->seraph-postgres");
    expect([...new Set(edges)].sort()).toEqual(expected.sort());
  });

  it("every NetworkPolicy selects pods that exist and opens only ports those pods declare; every Service port is opened to someone", () => {
    const objs = rendered[overlay];
    const policies = objs.filter((o) => o.kind === "NetworkPolicy");
    for (const p of policies) {
      const targets = selectedBy(objs, p["spec"].podSelector);
      expect(targets.length, `${p.metadata.name} selects pods`).toBeGreaterThan(0);
      for (const r of p["spec"].ingress ?? []) {
        for (const f of r.from ?? []) {
          // The one rule from outside the namespace: Prometheus's, checked below.
          if (f.namespaceSelector !== undefined) continue;
          const sources = selectedBy(objs, f.podSelector);
          const wanted = f.podSelector.matchLabels?.app ? [f.podSelector.matchLabels.app] : f.podSelector.matchExpressions[0].values;
          expect(sources.map((x) => x.metadata.name).sort(), `${p.metadata.name}: every source it names exists`).toEqual([...wanted].sort());
        }
        for (const rp of r.ports ?? []) {
          for (const t of targets) expect(containersOf(t).some((c) => portOf(c, rp.port) !== undefined), `${p.metadata.name}: port ${rp.port} on ${t.metadata.name}`).toBe(true);
        }
      }
    }
    for (const s of objs.filter((o) => o.kind === "Service")) {
      const pods = workloads(objs).filter((w) => labelsMatch(s["spec"].selector, w["spec"].template.metadata.labels));
      for (const sp of s["spec"].ports) {
        for (const w of pods) {
          const target = containersOf(w).map((c) => portOf(c, sp.targetPort)).find((x) => x !== undefined);
          const open = policies.some((p) => selectedBy(objs, p["spec"].podSelector).includes(w) && (p["spec"].ingress ?? []).some((r: any) => (r.ports ?? []).some((rp: any) => rp.port === target)));
          expect(open, `Service ${s.metadata.name} port ${sp.name}: some policy opens ${target}`).toBe(true);
        }
      }
    }
  });

  it("every probe targets a port of its own container; every volume mount names a pod volume; every read-only-root Seraph container has a writable /tmp; no service links", () => {
    for (const w of workloads(objs())) {
      const pod = podSpec(w);
      expect(pod.enableServiceLinks, `${w.metadata.name}: no *_SERVICE_HOST/*_PORT variables injected next to the services' own`).toBe(false);
      const volumes = new Set([...(pod.volumes ?? []).map((v: any) => v.name), ...(w["spec"].volumeClaimTemplates ?? []).map((v: any) => v.metadata.name)]);
      const mounted = new Set<string>();
      for (const c of [...containersOf(w), ...initContainersOf(w)]) {
        const where = `${w.metadata.name}/${c.name}`;
        for (const probe of [c.startupProbe, c.readinessProbe, c.livenessProbe].filter(Boolean)) {
          const port = probe.grpc?.port ?? probe.httpGet?.port ?? probe.tcpSocket?.port;
          if (probe.exec) expect(probe.exec.command.length, `${where} exec probe`).toBeGreaterThan(0);
          else expect(portOf(c, port), `${where} probe port ${port}`).toBeDefined();
        }
        for (const m of c.volumeMounts ?? []) {
          expect(volumes.has(m.name), `${where} mounts ${m.name}`).toBe(true);
          mounted.add(m.name);
        }
        if (!isSeraph(c) || initContainersOf(w).includes(c)) continue;
        const writableTmp = (c.volumeMounts ?? []).some((m: any) => m.mountPath === "/tmp" && !m.readOnly);
        // The supervisor host's processes include every job: a writable /tmp there is storage a
        // job could fill until the kubelet evicts the pod (and every running supervisor).
        if (c.name === "supervisor-host") {
          expect(writableTmp, `${where}: no writable /tmp for jobs to fill`).toBe(false);
          expect(c.securityContext.readOnlyRootFilesystem, `${where}: read-only root, so /tmp is not writable either`).toBe(true);
        } else expect(writableTmp, `${where} writable /tmp (os.tmpdir())`).toBe(true);
      }
      for (const v of volumes) expect(mounted.has(v), `${w.metadata.name}: volume ${v} is mounted`).toBe(true);
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
    // Only Prometheus comes from outside the namespace, and only to the metrics ports.
    const metricsPorts = workloads(objs()).flatMap((w) => containersOf(w).map((c) => portOf(c, "metrics")).filter((x) => x !== undefined));
    expect(metricsPorts.sort()).toEqual([7409, 7419, 7429, 7439]);
    for (const p of policies) {
      for (const r of p["spec"].ingress ?? []) {
        for (const f of r.from ?? []) {
          expect(f.ipBlock, `${p.metadata.name}: no ipBlock`).toBeUndefined();
          if (f.namespaceSelector === undefined) continue;
          expect([p.metadata.name, f.namespaceSelector, f.podSelector], `${p.metadata.name}: only the metrics policy admits another namespace`).toEqual(["seraph-metrics-ingress", { matchLabels: { "kubernetes.io/metadata.name": "monitoring" } }, undefined]);
          expect((r.ports as any[]).map((rp) => rp.port), `${p.metadata.name}: the metrics port only`).toEqual(["metrics"]);
        }
      }
    }
    if (overlay === "dev") {
      expect(sourcesOf("seraph-postgres")).toEqual(["seraph-api,seraph-jobs"]);
      expect(sourcesOf("seraph-nats")).toEqual(["seraph-api,seraph-executor,seraph-jobs"]);
    }
    // Every workload is covered by a policy of its own besides the default deny.
    for (const w of workloads(objs())) expect(policies.some((p) => p["spec"].podSelector.matchLabels?.app === w.metadata.name), w.metadata.name).toBe(true);
  });

  it("the executor pod is scheduled and sized as a node agent: its own PriorityClass, ephemeral storage bounded, the supervisor host's memory derived from slots x per-job ceiling, staging off the pod's /tmp", () => {
    const objs = withPlatform(overlay);
    const ds = byName(objs, "DaemonSet", "seraph-executor")!;
    const pod = podSpec(ds);
    const priority = byName(objs, "PriorityClass", pod.priorityClassName);
    expect(priority, `PriorityClass ${pod.priorityClassName} is in the rendering`).toBeDefined();
    expect(priority!["value"]).toBeGreaterThan(0);
    // Above ordinary workloads, below the cluster's own critical classes (2,000,000,000).
    expect(priority!["value"]).toBeLessThan(1_000_000_000);
    expect(priority!["globalDefault"]).toBe(false);
    const mib = (q: string): number => {
      const m = /^(\d+)(Mi|Gi)?$/.exec(q);
      if (!m) throw new Error(`quantity ${q}: only Mi/Gi are used in the executor manifests`);
      return Number(m[1]) * (m[2] === "Gi" ? 1024 : m[2] === "Mi" ? 1 : 1 / (1024 * 1024));
    };
    for (const c of containersOf(ds)) {
      expect(c.resources.requests["ephemeral-storage"], `${c.name} ephemeral-storage request`).toBeDefined();
      expect(c.resources.limits["ephemeral-storage"], `${c.name} ephemeral-storage limit`).toBeDefined();
      // Every emptyDir a container mounts fits in its own ephemeral-storage limit.
      const emptyDirs = (c.volumeMounts ?? []).map((m: any) => pod.volumes.find((v: any) => v.name === m.name)).filter((v: any) => v?.emptyDir);
      const dirs = emptyDirs.reduce((sum: number, v: any) => sum + mib(v.emptyDir.sizeLimit), 0);
      expect(mib(c.resources.limits["ephemeral-storage"]), `${c.name}: limit covers its emptyDirs (${dirs} MiB) and its log`).toBeGreaterThan(dirs);
    }
    const agent = containersOf(ds).find((c) => c.name === "executor");
    const host = containersOf(ds).find((c) => c.name === "supervisor-host");
    const config = loadExecutorConfig(containerEnv(objs, agent, POD));
    const slots = config.SERAPH_SLOT_COUNT;
    const jobMemory = config.SERAPH_JOB_MEMORY_BYTES / (1024 * 1024);
    const jobRoot = config.SERAPH_JOB_ROOT;
    expect(slots).toBeGreaterThanOrEqual(1);
    expect(jobMemory).toBeGreaterThan(0);
    const needed = slots * (jobMemory + 64) + 256;
    expect(mib(host.resources.limits.memory), `supervisor host memory limit >= ${slots} x (${jobMemory} + 64) + 256 MiB`).toBeGreaterThanOrEqual(needed);
    // Requested at its limit: a pod within its requests is the last the kubelet evicts for memory.
    expect(host.resources.requests.memory).toBe(host.resources.limits.memory);
    const dataDir = containerEnv(objs, agent, POD)["SERAPH_EXECUTOR_DATA_DIR"]!;
    expect(jobRoot.startsWith(`${dataDir}/`), `job root ${jobRoot} is on the run directory, not the pod's /tmp`).toBe(true);
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
    // The container's main process forwards the kubelet's SIGTERM to unshare's process group.
    expect(cmd.slice(0, 9)).toEqual(["tini", "-s", "-g", "--", "unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]);
    expect(cmd).toContain("--reuid=10001");
    expect(cmd).toContain("--no-new-privs");
    expect(cmd.slice(cmd.lastIndexOf("tini"))).toEqual(["tini", "--", "node", "services/executor-linux/dist/supervisor-host/main.js"]);
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
      for (const name of ["seraph-internal", "seraph-executor-token", "seraph-database", "seraph-postgres", "seraph-nats"]) {
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

    it("dev: nats-server accepts the NATS config with the passwords make-secrets.sh generates, every time (its $VARIABLE values are parsed as config values)", () => {
      const objs = withPlatform("dev");
      const conf = byBaseName(objs, "ConfigMap", "seraph-nats-config")!["data"]["nats.conf"] as string;
      const nats = containersOf(byName(objs, "StatefulSet", "seraph-nats")!)[0];
      const dir = mkdtempSync(join(tmpdir(), "seraph-nats-conf-"));
      try {
        const file = join(dir, "nats.conf");
        execFileSync("sh", ["-c", 'cat > "$1"', "sh", file], { input: conf });
        const check = (env: Record<string, string>) => {
          try {
            execFileSync(NATS_SERVER_BIN, ["-c", file, "-t"], { env, stdio: "pipe", timeout: 10_000 });
          } catch (err) {
            throw new Error(`nats-server refused the dev config with ${JSON.stringify(env)}: ${String((err as { stderr?: Buffer }).stderr ?? err)}`);
          }
        };
        // The rendered one, then fresh secrets: a hex password reads as a number about once in
        // twelve, so forty sets of four passwords would all parse by luck about once in 10^5.
        check(containerEnv(objs, nats, POD));
        for (let i = 0; i < 40; i++) {
          const run = join(dir, `run-${i}`);
          execFileSync("sh", ["-c", `mkdir -p "${run}" && cp "${join(overlays.work, "deploy/overlays/dev/make-secrets.sh")}" "${run}/" && sh "${run}/make-secrets.sh"`], { stdio: "pipe" });
          const read = (n: string) => readFileSync(join(run, "secrets", `nats-${n}-password`), "utf8");
          check({ NATS_API_PASSWORD: read("api"), NATS_JOBS_PASSWORD: read("jobs"), NATS_EXECUTOR_PASSWORD: read("executor"), NATS_OPS_PASSWORD: read("ops") });
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it("dev: DATABASE_URL names the in-cluster PostgreSQL's user, password and database", () => {
      const objs = withPlatform("dev");
      const pg = containerEnv(objs, containersOf(byName(objs, "StatefulSet", "seraph-postgres")!)[0], POD);
      for (const name of ["seraph-api", "seraph-jobs"]) {
        const env = containerEnv(objs, containersOf(byName(objs, "Deployment", name)!)[0], POD);
        const url = new URL(env["DATABASE_URL"]!);
        expect([url.username, decodeURIComponent(url.password), url.pathname.slice(1)], name).toEqual([pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"]]);
      }
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
  // Every instruction is listed here with its counterpart in scripts/build-image-layout.mjs or
  // test/image-layout.test.ts, so that the layout the test starts is the image's filesystem and
  // run-time configuration: an instruction added without a counterpart fails this test.
  it("has exactly the instructions whose counterparts the layout script and the image-layout test carry", () => {
    const docker = readFileSync(join(repo, "Dockerfile"), "utf8");
    const script = readFileSync(join(repo, "scripts/build-image-layout.mjs"), "utf8");
    const constant = (name: string) => new RegExp(`export const ${name} = "([^"]+)"`).exec(script)?.[1];
    const appDir = constant("APP_DIR");
    const pinned = `opt/node-v${constant("PINNED_NODE_VERSION")}`;
    const root = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { workspaces: string[] };
    const [global, build, runtime, ...more] = dockerfileStages(docker);
    expect(more, "two stages: build and runtime").toEqual([]);
    // A slim Debian (bookworm, as this machine: the layout test uses its tini, setpriv, unshare) Node 20 base for both stages.
    expect(global!.instructions).toEqual([{ op: "ARG", args: "NODE_IMAGE=node:20-bookworm-slim" }]);
    const wsCopies = build!.instructions.slice(3, 3 + root.workspaces.length);
    expect(wsCopies.map((i) => i.args).sort(), "every workspace's package.json, before npm ci").toEqual(root.workspaces.map((ws) => `${ws}/package.json ${ws}/`).sort());
    expect(build!.instructions).toEqual([
      { op: "FROM", args: "${NODE_IMAGE} AS build" },
      { op: "WORKDIR", args: "/src" },
      { op: "COPY", args: "package.json package-lock.json ./" },
      ...wsCopies.map((i) => ({ op: "COPY", args: i.args })),
      // The root postinstall (scripts/protovalidate-stub.mjs) runs in npm ci.
      { op: "COPY", args: "scripts/ scripts/" },
      { op: "RUN", args: "npm ci --no-audit --no-fund" },
      { op: "COPY", args: ". ." },
      // The layout test runs the same script after the same build.
      { op: "RUN", args: "npm run build && node scripts/build-image-layout.mjs /layout" },
    ]);
    const ops = runtime!.instructions.map((i) => i.op);
    expect(ops).toEqual(["FROM", "RUN", "COPY", "WORKDIR", "ENV", "USER", "CMD"]);
    const [from, run, copy, workdir, env, user, cmd] = runtime!.instructions;
    expect(from!.args).toBe("${NODE_IMAGE} AS runtime");
    // Counterpart: the layout test uses this machine's Debian tini and python3 (bookworm, as the
    // base image; it checks the packages) and runs a Python job on /usr/bin/python3.
    expect(run!.args).toContain("apt-get install -y --no-install-recommends tini python3 && rm -rf /var/lib/apt/lists/*");
    expect(run!.args).toContain("groupadd --system --gid 10001 seraph");
    expect(run!.args).toContain("useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin seraph");
    // Counterpart: the layout script's output is the whole filesystem the image adds.
    expect(copy!.args).toBe("--from=build --chown=root:root /layout/ /");
    // Counterparts: the layout test reads WORKDIR, ENV, USER and CMD from here (imageConfig).
    expect(workdir!.args).toBe(`/${appDir}`);
    expect(env!.args).toBe(`NODE_ENV=production SERAPH_SUPERVISOR_RUNTIME=/${pinned}/bin/node`);
    expect(user!.args).toBe("10001:10001");
    expect(JSON.parse(cmd!.args)).toEqual(["node", "services/api/dist/main.js"]);
    // The build context leaves out everything built or installed on the host, so the image's
    // node_modules and dist/ are the ones npm ci and the build made inside.
    const ignore = readFileSync(join(repo, ".dockerignore"), "utf8").split("\n");
    for (const p of ["**/node_modules", "**/dist", "**/*.tsbuildinfo", ".git"]) expect(ignore, p).toContain(p);
  });
});
