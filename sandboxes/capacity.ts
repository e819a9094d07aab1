/**
 * What one sandbox host holds at once, and each tenant's share of it: sandboxes, and the disk their
 * limits reserve. One tenant (an org) holds at most `tenantShare` of each, so a flood of one org's
 * tasks leaves room for the others; past its share, or with the host full, a create answers 429
 * `busy` until a sandbox ends.
 */
import { statfs } from "node:fs/promises";
import { totalmem } from "node:os";
import { HttpError } from "./http.js";

export interface CapacityOptions {
  /** Sandboxes at once (default 256). */
  sandboxes?: number;
  /** Disk the sandboxes' limits may reserve together (default: the memory where disks are tmpfs, else the root's free space). */
  diskBytes?: number;
  /** The most of each one tenant holds (default 1/2). */
  tenantShare?: number;
}

export interface Held {
  tenant: string;
  diskBytes: number;
}

export class HostCapacity {
  private constructor(
    readonly sandboxes: number,
    readonly diskBytes: number,
    readonly tenantShare: number,
  ) {}

  static async open(options: CapacityOptions, root: string, tmpfs: boolean): Promise<HostCapacity> {
    const free = async () => {
      const s = await statfs(root);
      return s.bavail * s.bsize;
    };
    return new HostCapacity(
      options.sandboxes ?? 256,
      options.diskBytes ?? (tmpfs ? totalmem() : await free()),
      options.tenantShare ?? 0.5,
    );
  }

  /** Refuses (429 `busy`) a sandbox that would take its tenant, or the host, past its share. */
  admit(held: readonly Held[], pending: number, tenant: string, diskBytes: number): void {
    const own = held.filter((h) => h.tenant === tenant);
    const reserved = (list: readonly Held[]) => list.reduce((n, h) => n + h.diskBytes, 0);
    const share = (n: number) => Math.max(1, Math.floor(n * this.tenantShare));
    const busy = (message: string) => new HttpError(429, "busy", `${message}; retry when one of its sandboxes ends.`);
    if (held.length + pending >= this.sandboxes) throw busy(`The host holds its ${this.sandboxes} sandboxes`);
    if (own.length >= share(this.sandboxes))
      throw busy(`This tenant holds ${own.length} sandboxes, its share of the host`);
    if (reserved(held) + diskBytes > this.diskBytes) throw busy("The host's disk is reserved by its sandboxes");
    if (reserved(own) + diskBytes > share(this.diskBytes))
      throw busy("This tenant's sandboxes reserve its share of the host's disk");
  }
}
