/**
 * When a generation's tokens are due: each one a gap after the one before, the first a gap after the
 * generation starts. Due times are absolute, so a timer that fires late does not push back every
 * token after it. Each gap is kept on the request's record as it is planned: what the server
 * scheduled (a drip's interval, a slowdown past capacity) can be read there, where the times its
 * tokens happen to arrive at a client say as much about the machine's load as about the server.
 */
export class TokenSchedule {
  #due: number;

  /** `gaps` is the record's list, which every planned gap is appended to. */
  constructor(
    start: number,
    private readonly gaps: number[],
  ) {
    this.#due = start;
  }

  /** When the next token (or, for a generation of none, the end) is due. */
  get due(): number {
    return this.#due;
  }

  /** Plans the next token `gapMs` after the one before was due. */
  next(gapMs: number): void {
    this.gaps.push(gapMs);
    this.#due += gapMs;
  }
}
