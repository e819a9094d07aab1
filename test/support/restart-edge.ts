/**
 * For a file that stops and starts `npm start`'s edge many times (the durability tests): each start
 * runs the same prebuilt bundle and migrated state, the run's own when `npm test` made one
 * (`SEXTANT_PREBUILT_EDGE`), else one built here once for the file; and `scripts/start.ts` runs under
 * tsx's loader in one Node process, where `npx tsx` starts npm, tsx's command line and then the
 * script's process. A restart then costs the runtime's start, not a bundle, a migration check and
 * three Node starts; what runs is the same script, bundle, state and process group.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";
import { prebuildEdge } from "../../scripts/prebuilt-edge.js";
import { ROOT } from "./local-edge.js";

const VARS = ["SEXTANT_PREBUILT_EDGE", "SEXTANT_START_COMMAND"] as const;

/** Sets the file's edges up to restart cheaply, from its `beforeAll` to its `afterAll`. */
export function restartCheaply(): void {
  const before = Object.fromEntries(VARS.map((name) => [name, process.env[name]]));
  let built: string | undefined;
  beforeAll(async () => {
    if (!process.env.SEXTANT_PREBUILT_EDGE) {
      built = mkdtempSync(join(tmpdir(), "sextant-prebuilt-edge-"));
      await prebuildEdge(built, ROOT);
      process.env.SEXTANT_PREBUILT_EDGE = built;
    }
    // Another way of running start.ts (bench/device's bundle under plain node) is kept.
    process.env.SEXTANT_START_COMMAND ??= "node --import tsx scripts/start.ts";
    // A bundle and a migration, on a machine whose cores are busy with other work.
  }, 300_000);
  afterAll(() => {
    for (const name of VARS) {
      if (before[name] === undefined) delete process.env[name];
      else process.env[name] = before[name];
    }
    if (built) rmSync(built, { recursive: true, force: true });
  });
}
