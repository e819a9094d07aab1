/** A value decoded only when first asked for. */
export class Lazy<T> {
  #value: T | undefined;
  #load: (() => T) | undefined;
  constructor(load: () => T) {
    this.#load = load;
  }
  get loaded(): boolean {
    return this.#load === undefined;
  }
  static of<T>(value: T): Lazy<T> {
    const lazy = new Lazy(() => value);
    lazy.get();
    return lazy;
  }
  get(): T {
    if (this.#load) {
      this.#value = this.#load();
      this.#load = undefined;
    }
    return this.#value as T;
  }
}
