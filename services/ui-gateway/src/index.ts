export { startGateway, GATEWAY_SERVICE_NAMES } from "./start.js";
export type { GatewayRuntime, GatewayHandle } from "./start.js";
export { loadGatewayConfig } from "./config.js";
export type { GatewayConfig } from "./config.js";
