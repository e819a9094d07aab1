/**
 * What one sandbox host holds at once, and each tenant's share of it: sandboxes, and the disk they
 * use. One tenant (an org) holds at most `tenantShare` of each, so a flood of one org's tasks leaves
 * room for the others; past its share, or with the host full, a create answers 429 `busy` until a
 * sandbox ends. Disk counts what sandboxes hold, not what their limits allow: a tmpfs takes memory
 * only as it fills, and each sandbox is held to its own `diskBytes` (and its writes to its memory
 * group) whatever the others do. Where disks are no tmpfs, what a sandbox holds is not measured and
 * only the count applies.
 */
import { totalmem } from "node:os";
import type { SharedMemory } from "./cgroups.js";
import { HttpError } from "./http.js";

export interface CapacityOptions {
  /** Sandboxes at once, ended tasks' kept for their diff included (default 1,024). */
  sandboxes?: number;
  /** Bytes the sandboxes' disks may hold together (default: half the machine's memory, since disks are tmpfs). */
  diskBytes?: number;
  /** Memory of all sandboxes together, processes and the pages their commands wrote to their disks (default 3/4 of the machine's). */
  memoryBytes?: number;
  /** The most of each one tenant holds (default 1/2). */
  tenantShare?: number;
}

export interface Held {
  tenant: string;
  /** Bytes its disk holds now (0 where that is not measured). */
  usedBytes: number;
}

export class HostCapacity {
  private constructor(
    readonly sandboxes: number,
    readonly diskBytes: number,
    readonly memoryBytes: number,
    readonly tenantShare: number,
  ) {}

  /** The memory control groups' shares: all sandboxes', and one tenant's. */
  get memory(): SharedMemory {
    return { totalBytes: this.memoryBytes, tenantBytes: Math.floor(this.memoryBytes * this.tenantShare) };
  }

  static open(options: CapacityOptions): HostCapacity {
    return new HostCapacity(
      options.sandboxes ?? 1024,
      options.diskBytes ?? Math.floor(totalmem() / 2),
      options.memoryBytes ?? Math.floor((totalmem() * 3) / 4),
      options.tenantShare ?? 0.5,
    );
  }

  /** Refuses (429 `busy`) a sandbox that would take its tenant, or the host, past its share. */
  admit(held: readonly Held[], pending: number, tenant: string): void {
    const own = held.filter((h) => h.tenant === tenant);
    const used = (list: readonly Held[]) => list.reduce((n, h) => n + h.usedBytes, 0);
    const share = (n: number) => Math.max(1, Math.floor(n * this.tenantShare));
    const busy = (message: string) => new HttpError(429, "busy", `${message}; retry when one of its sandboxes ends.`);
    if (held.length + pending >= this.sandboxes) throw busy(`The host holds its ${this.sandboxes} sandboxes`);
    if (own.length >= share(this.sandboxes))
      throw busy(`This tenant holds ${own.length} sandboxes, its share of the host`);
    if (used(held) >= this.diskBytes) throw busy("The host's sandboxes hold all the disk it gives them");
    if (used(own) >= share(this.diskBytes)) throw busy("This tenant's sandboxes hold its share of the host's disk");
  }
}
