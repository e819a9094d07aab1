/**
 * Resolves on a timer `ms` from now (by default the next timer turn), so that I/O already under
 * way goes first: a request's own upstream call, the end of a response body.
 */
export function later(ms = 0): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A `waitUntil` for work a request starts late: at the end of a streamed response, a `waitUntil`
 * called then can come after the runtime has let the request's context go, and a timer started in
 * it (the usage meter's and the lake records' flushes) then never fires, leaving every later
 * request's rows waiting on it. The tail registers one promise with the request's `waitUntil` at
 * once, and holds the context until `close` has been called and everything given to its own
 * `waitUntil` meanwhile has settled. Work given after `close` goes to the request's `waitUntil`.
 */
export function requestTail(waitUntil: (p: Promise<unknown>) => void): {
  waitUntil: (p: Promise<unknown>) => void;
  close: () => void;
} {
  const tasks: Promise<unknown>[] = [];
  let closed = false;
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  waitUntil(
    released.then(async () => {
      // A task may add another as it settles.
      for (let seen = -1; seen !== tasks.length; ) {
        seen = tasks.length;
        await Promise.allSettled(tasks);
      }
    }),
  );
  return {
    waitUntil: (p) => {
      if (closed) waitUntil(p);
      else tasks.push(p);
    },
    close: () => {
      closed = true;
      release();
    },
  };
}
