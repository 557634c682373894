export { startEmbedded } from "./compose.js";
export type { Embedded, EmbeddedOptions } from "./compose.js";
