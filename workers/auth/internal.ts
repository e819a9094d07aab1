/**
 * The principal of a request the Worker makes to itself on a task object's behalf
 * (`workers/agents/gateway-entrypoint.ts`). It travels in the `env` object handed to the app, under a
 * symbol, so no request from outside can carry it: the runtime builds every outside request's `env`.
 */
import type { Principal } from "./principal.js";

export const INTERNAL_PRINCIPAL = Symbol("sextant.internal-principal");

export function internalPrincipal(env: object): Principal | undefined {
  return (env as { [INTERNAL_PRINCIPAL]?: Principal })[INTERNAL_PRINCIPAL];
}
