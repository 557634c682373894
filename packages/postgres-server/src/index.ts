export { findPostgresBinaries, type PostgresBinaries } from "./binaries.js";
export { serverUser, SERVER_USER_NAME, type ServerUser } from "./server-user.js";
export { startPostgresServer, stopLeftoverServer, type PostgresServer, type PostgresServerOptions } from "./server.js";
