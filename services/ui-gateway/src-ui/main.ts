// The Seraph browser UI: Sign in, Work → Repository repair (with the repair Inspector) and
// Settings → Repository sandbox. Hash routes keep every screen on index.html, so the gateway
// serves static files only; nothing secret is ever put in the URL.
import type { Principal } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { h, replace } from "./dom.js";
import { createApi, errorCode, errorText, Code, type Api } from "./rpc.js";
import { createProfileCatalog, useProfiles, type ProfileCatalog } from "./profiles.js";
import { clearToken, loadToken, saveToken } from "./session.js";
import { button, status } from "./ui-kit.js";
import type { ViewContext } from "./view.js";
import { renderInspector } from "./views/inspector/inspector.js";
import { renderSettings } from "./views/settings.js";
import { renderSignIn } from "./views/sign-in.js";
import { renderWork } from "./views/work.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

interface Session {
  readonly api: Api;
  readonly principal: Principal;
}

const app = document.getElementById("app") ?? document.body;
let session: Session | undefined;
let current: AbortController | undefined;

function signOut(): void {
  current?.abort();
  clearToken();
  session = undefined;
  showSignIn();
}

function showSignIn(message?: HTMLElement): void {
  current?.abort();
  current = new AbortController();
  document.title = "Sign in — Seraph";
  renderSignIn(app, {
    message,
    onSignedIn: (api, principal, token, catalog) => {
      saveToken(token);
      useProfiles(catalog);
      session = { api, principal };
      if (!window.location.hash || window.location.hash === "#/" || window.location.hash === "#/sign-in") window.location.hash = "#/work";
      else route();
    },
  });
}

function shell(s: Session, active: "work" | "settings"): HTMLElement {
  const main = h("main", { id: "main", tabindex: -1 });
  const nav = h(
    "nav",
    { "aria-label": "Main" },
    h("ul", null, h("li", null, h("a", { href: "#/work", "aria-current": active === "work" ? "page" : null }, "Work → Repository repair")), h("li", null, h("a", { href: "#/settings", "aria-current": active === "settings" ? "page" : null }, "Settings → Repository sandbox"))),
  );
  const who = h("p", { class: "who" }, "Signed in as ", h("strong", { "data-testid": "principal-name" }, s.principal.name), ` (principal ${s.principal.id}, root ${s.principal.rootId})`, " ", button("Sign out", signOut));
  replace(app, h("header", { class: "masthead" }, h("p", { class: "brand" }, "Seraph"), nav, who), main);
  return main;
}

function route(): void {
  if (!session) return showSignIn();
  current?.abort();
  current = new AbortController();
  const hash = window.location.hash.replace(/^#/, "") || "/work";
  const ctx: ViewContext = {
    api: session.api,
    principal: session.principal,
    signal: current.signal,
    navigate: (to) => {
      window.location.hash = to;
    },
  };
  const repair = /^\/repair\/([^/]+)(?:\/([a-z]+))?$/.exec(hash);
  if (repair && UUID.test(repair[1] ?? "")) {
    document.title = "Repair inspector — Seraph";
    renderInspector(shell(session, "work"), ctx, repair[1] ?? "", repair[2] ?? "");
  } else if (/^\/work\/from\/[^/]+$/.test(hash) && UUID.test(hash.slice("/work/from/".length))) {
    document.title = "Work → New repair from a repair — Seraph";
    renderWork(shell(session, "work"), ctx, hash.slice("/work/from/".length));
  } else if (hash === "/settings") {
    document.title = "Settings → Repository sandbox — Seraph";
    renderSettings(shell(session, "settings"), ctx);
  } else {
    document.title = "Work → Repository repair — Seraph";
    renderWork(shell(session, "work"), ctx);
  }
  document.querySelector<HTMLElement>("main h1")?.focus();
}

/** Reads the server's execution profiles (names, runtimes, selections) for every view. */
async function loadProfiles(api: Api): Promise<ProfileCatalog> {
  return createProfileCatalog((await api.settings.listProfiles({})).profiles);
}

async function boot(): Promise<void> {
  const token = loadToken();
  if (!token) return showSignIn();
  const api = createApi(token);
  const st = status();
  replace(app, h("main", null, h("h1", null, "Seraph"), st.el));
  st.busy("Checking the stored session…");
  try {
    const res = await api.principals.whoAmI({});
    if (!res.principal) throw new Error("the server returned no principal");
    useProfiles(await loadProfiles(api));
    session = { api, principal: res.principal };
    route();
  } catch (err) {
    if (errorCode(err) === Code.Unauthenticated) clearToken();
    showSignIn(h("p", { class: "error", role: "alert" }, "The stored session could not be used — ", h("code", null, errorText(err))));
  }
}

window.addEventListener("hashchange", route);
void boot();
