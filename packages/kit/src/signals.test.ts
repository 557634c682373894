import { describe, expect, it } from "vitest";
import { createDeferredSignals, createLocalSignals, subjectMatches } from "./signals.js";

describe("subjectMatches", () => {
  it.each([
    ["seraph.>", "seraph.jobs.1.state", true],
    ["seraph.>", "seraph", false],
    ["seraph.jobs.*.state", "seraph.jobs.1.state", true],
    ["seraph.jobs.*.state", "seraph.jobs.1.other", false],
    ["seraph.jobs.*", "seraph.jobs.1.state", false],
    ["a.b", "a.b", true],
    ["a.b", "a.b.c", false],
  ])("%s vs %s → %s", (pattern, subject, expected) => {
    expect(subjectMatches(pattern, subject)).toBe(expected);
  });
});

describe("local and deferred signals", () => {
  it("delivers to matching subscribers only, and stops after unsubscribe", async () => {
    const s = createLocalSignals();
    const got: string[] = [];
    const off = s.subscribe("seraph.nodes.*.work", (m) => got.push(m.subject));
    s.publish("seraph.nodes.a.work", new Uint8Array());
    s.publish("seraph.nodes.a.cancel", new Uint8Array());
    await Promise.resolve();
    off();
    s.publish("seraph.nodes.b.work", new Uint8Array());
    await Promise.resolve();
    expect(got).toEqual(["seraph.nodes.a.work"]);
  });

  it("attaches early subscriptions when the transport arrives", async () => {
    const d = createDeferredSignals();
    const got: string[] = [];
    d.subscribe("x.>", (m) => got.push(m.subject));
    d.publish("x.lost", new Uint8Array());
    const local = createLocalSignals();
    d.attach(local);
    d.publish("x.kept", new Uint8Array());
    await Promise.resolve();
    expect(got).toEqual(["x.kept"]);
  });
});
