import type { Principal } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { field, h, replace } from "../dom.js";
import { createApi, type Api } from "../rpc.js";
import { createProfileCatalog, type ProfileCatalog } from "../profiles.js";
import { act, status } from "../ui-kit.js";

/** What the sign-in screen needs. */
export interface SignInOptions {
  /** Shown above the form (e.g. why the stored session was dropped). */
  readonly message: HTMLElement | undefined;
  /** Called once WhoAmI accepted the token, with the server's execution profiles read with it. */
  onSignedIn(api: Api, principal: Principal, token: string, profiles: ProfileCatalog): void;
}

/** The Sign in screen: one token field, checked with WhoAmI before anything is stored. */
export function renderSignIn(root: HTMLElement, o: SignInOptions): void {
  const st = status();
  const input = h("input", { type: "password", name: "token", autocomplete: "off", spellcheck: "false", required: true, size: 48 });
  const submit = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    { class: "stack", "aria-labelledby": "sign-in-title" },
    field("API token", input, "The operator token is printed once at first start and saved (mode 0600) as operator-token in the data directory. It is kept in this tab's session storage only and sent only in the Authorization header."),
    h("div", { class: "actions" }, submit),
    st.el,
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    if (!token) {
      st.ok("Enter a token first.");
      return;
    }
    const api = createApi(token);
    const check = async () => {
      const who = await api.principals.whoAmI({});
      return { principal: who.principal, profiles: createProfileCatalog((await api.settings.listProfiles({})).profiles) };
    };
    void act(submit, st, "Checking the token…", check).then((res) => {
      if (!res) return;
      if (!res.principal) {
        st.ok("The server answered without a principal; not signed in.");
        return;
      }
      input.value = "";
      o.onSignedIn(api, res.principal, token, res.profiles);
    });
  });
  replace(
    root,
    h("header", { class: "masthead" }, h("p", { class: "brand" }, "Seraph")),
    h("main", { id: "main", tabindex: -1 }, h("h1", { id: "sign-in-title" }, "Sign in"), o.message ?? null, form),
  );
  input.focus();
}
