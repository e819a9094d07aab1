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
