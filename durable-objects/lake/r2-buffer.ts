import type { AsyncBuffer } from "hyparquet";

/** A file a manifest listed is gone (a compaction replaced it since). */
export class MissingLakeFile extends Error {
  constructor(readonly key: string) {
    super(`lake file ${key} is missing`);
  }
}

/** An R2 object as hyparquet reads it: ranged reads, so only what is parsed is fetched. */
export function r2Buffer(bucket: R2Bucket, key: string, size: number): AsyncBuffer {
  return {
    byteLength: size,
    async slice(start: number, end?: number) {
      const length = (end ?? size) - start;
      const object = await bucket.get(key, { range: { offset: start, length } });
      if (!object) throw new MissingLakeFile(key);
      return object.arrayBuffer();
    },
  };
}
