/** The lake's settings that `wrangler.toml` leaves unset. */
export interface LakeFaults {
  /**
   * For testing the pipeline's exactly-once writes: every Nth write of each partition object fails
   * after its file is written (before it is committed), and every Nth batch a consumer isolate takes
   * is redelivered after it was written. Unset in any real deployment.
   */
  LAKE_FAULT_EVERY?: string;
}

/** N of `LAKE_FAULT_EVERY`, or 0 when faults are off. */
export function faultEvery(env: LakeFaults): number {
  const every = Number(env.LAKE_FAULT_EVERY ?? 0);
  return Number.isInteger(every) && every >= 2 ? every : 0;
}

/**
 * How long the records' consumer waits for a partition's write before it gives up on it and has the
 * write's messages delivered again (`LAKE_WRITE_TIMEOUT_SECONDS`, default 60).
 */
export function writeTimeoutMs(env: { LAKE_WRITE_TIMEOUT_SECONDS?: string }): number {
  const seconds = Number(env.LAKE_WRITE_TIMEOUT_SECONDS ?? 60);
  return (Number.isFinite(seconds) && seconds > 0 ? seconds : 60) * 1000;
}

const DAY_MS = 86_400_000;

/** How long a partition is kept after its hour ends (`LAKE_RETENTION_DAYS`, default 90 days). */
export function retentionMs(env: { LAKE_RETENTION_DAYS?: string }): number {
  const days = Number(env.LAKE_RETENTION_DAYS ?? 90);
  return (Number.isFinite(days) && days > 0 ? days : 90) * DAY_MS;
}

/** How long after its hour ends a partition is compacted (`LAKE_COMPACT_DELAY_SECONDS`, default 600). */
export function compactDelayMs(env: { LAKE_COMPACT_DELAY_SECONDS?: string }): number {
  const seconds = Number(env.LAKE_COMPACT_DELAY_SECONDS ?? 600);
  return (Number.isFinite(seconds) && seconds >= 0 ? seconds : 600) * 1000;
}
