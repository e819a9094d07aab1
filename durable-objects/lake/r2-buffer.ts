import type { AsyncBuffer } from "hyparquet";

/** An R2 object as hyparquet reads it: ranged reads, so only what is parsed is fetched. */
export function r2Buffer(bucket: R2Bucket, key: string, size: number): AsyncBuffer {
  return {
    byteLength: size,
    async slice(start: number, end?: number) {
      const length = (end ?? size) - start;
      const object = await bucket.get(key, { range: { offset: start, length } });
      if (!object) throw new Error(`lake file ${key} is missing`);
      return object.arrayBuffer();
    },
  };
}
