import { describe, expect, it } from "vitest";
import { isInbox } from "./operator-nats.js";

describe("isInbox", () => {
  it("admits only subjects under the inbox prefix", () => {
    expect(isInbox("_INBOX.abc123")).toBe(true);
    expect(isInbox("_INBOX.abc.def")).toBe(true);
    expect(isInbox("_INBOX.")).toBe(false);
    expect(isInbox("_INBOX")).toBe(false);
    expect(isInbox("_INBOXES.x")).toBe(false);
    expect(isInbox("seraph.jobs.x")).toBe(false);
    expect(isInbox(undefined)).toBe(false);
    expect(isInbox("")).toBe(false);
    expect(isInbox("tools.inbox.1", "tools.inbox")).toBe(true);
    expect(isInbox("_INBOX.1", "tools.inbox")).toBe(false);
  });
});
