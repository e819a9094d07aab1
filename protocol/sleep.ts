/**
 * Waits, or rejects when `signal` aborts. Its listener goes once the wait is over: a long-lived
 * signal (`sextant watch`'s) sees a wait per retry, and listeners left behind pile up past Node's
 * warning threshold during an outage.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
