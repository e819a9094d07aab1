export interface Batch {
  /** Index of the batch's first text in the whole list. */
  start: number;
  texts: string[];
}

/**
 * Consecutive batches of at most `maxInputs` texts and `maxChars` characters in all: services cap
 * the inputs per request (OpenAI: 2,048) and the tokens per request, and characters are the bound
 * the edge can count without the model's tokenizer. A text longer than `maxChars` travels alone.
 */
export function batches(texts: readonly string[], maxInputs: number, maxChars: number): Batch[] {
  const out: Batch[] = [];
  let current: Batch | null = null;
  let chars = 0;
  texts.forEach((text, i) => {
    if (!current || current.texts.length >= maxInputs || (chars + text.length > maxChars && chars > 0)) {
      current = { start: i, texts: [] };
      out.push(current);
      chars = 0;
    }
    current.texts.push(text);
    chars += text.length;
  });
  return out;
}

/**
 * `fn` over `items` with at most `limit` calls in flight, results in order. The first failure
 * rejects at once and no further call starts, so a failed commit stops spending the service's quota.
 */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failed = false;
  const worker = async () => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        results[i] = await fn(items[i]!);
      } catch (err) {
        failed = true;
        throw err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
