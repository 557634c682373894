// @seraph/profiles: the pure domain rules of Seraph's execution profiles, one folder per profile
// (node24-npm/) beside the rules they share (shared/). The package root exports the shared rules;
// each profile is imported by its own subpath ("@seraph/profiles/node24-npm").
export * from "./shared/index.js";
