/**
 * Resolves on a timer `ms` from now (by default the next timer turn), so that I/O already under
 * way goes first: a request's own upstream call, the end of a response body.
 */
export function later(ms = 0): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
