import { describe, expect, it } from "vitest";
import { requestTail } from "../../workers/later.js";

/** Whether `p` has settled after every pending microtask and timer turn of now. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((r) => setTimeout(r, 0));
  return done;
}

function deferred() {
  let resolve!: () => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

describe("requestTail", () => {
  it("holds the request open from the start until it is closed and its work has settled", async () => {
    const registered: Promise<unknown>[] = [];
    const tail = requestTail((p) => registered.push(p));
    // Registered at once, before any work is given to it.
    expect(registered).toHaveLength(1);
    const held = registered[0]!;
    expect(await settled(held)).toBe(false);

    const first = deferred();
    const second = deferred();
    tail.waitUntil(first.promise);
    tail.waitUntil(second.promise);
    expect(registered).toHaveLength(1);
    tail.close();
    expect(await settled(held)).toBe(false);
    first.resolve();
    expect(await settled(held)).toBe(false);
    // A failed task is settled too: it does not fail the request.
    second.reject(new Error("the flush failed"));
    expect(await settled(held)).toBe(true);
    await expect(held).resolves.toBeUndefined();
  });

  it("waits for work added while earlier work settles, and hands work given after closing to the request", async () => {
    const registered: Promise<unknown>[] = [];
    const tail = requestTail((p) => registered.push(p));
    const first = deferred();
    const later = deferred();
    tail.waitUntil(
      first.promise.then(() => {
        tail.waitUntil(later.promise);
      }),
    );
    // Not closed: nothing given so far releases the request.
    first.resolve();
    expect(await settled(registered[0]!)).toBe(false);
    tail.close();
    expect(await settled(registered[0]!)).toBe(false);
    later.resolve();
    expect(await settled(registered[0]!)).toBe(true);

    const afterClose = Promise.resolve("late");
    tail.waitUntil(afterClose);
    expect(registered).toEqual([registered[0], afterClose]);
  });
});
