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

/**
 * `promise`'s value, or "deadline" if `deadline` (ms since the epoch) comes first. What it waited
 * on is not cancelled, and a rejection after the deadline is not reported.
 */
export async function withDeadline<T>(promise: Promise<T>, deadline: number): Promise<T | "deadline"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"deadline">((resolve) => {
    timer = setTimeout(() => resolve("deadline"), Math.max(0, deadline - Date.now()));
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
}
