export { DEFAULT_BASE_URL, Sextant, SextantAdmin } from "./client.js";
export type { ClientOptions, PerRequest, SextantAdminOptions, SextantOptions } from "./client.js";
export * from "./errors.js";
export type * from "../../protocol/schemas.js";
