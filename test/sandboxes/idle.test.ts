import { existsSync } from "node:fs";
import { join } from "node:path";
import { expect, it, vi } from "vitest";
import { useHost } from "./harness.js";

// The host measures idle time on this clock, which moves only when the test moves it: however slowly
// the machine runs the test's requests, no sandbox expires between them.
let clock = 0;
const host = useHost({ clock: () => clock });
const SECOND = 1000;

it("destroys a sandbox that has had no request for its idle time to live, and keeps one that has", async () => {
  for (const id of ["idle-sandbox", "used-sandbox"]) {
    await host.create(id, { idleTtlSeconds: 10 });
    await host.upload(id, { "a.txt": "a\n" });
  }
  clock += 9 * SECOND;
  await host.upload("used-sandbox", { "b.txt": "b\n" });
  // Now 11 s since the idle sandbox's last request and 2 s since the used one's.
  clock += 2 * SECOND;
  // The host's sweep, once a second, finds the idle one; the pass that does looks at both at the same time.
  await vi.waitFor(() => expect(existsSync(join(host.root, "idle-sandbox"))).toBe(false), { timeout: 10_000 });
  expect((await host.request("GET", "/v1/sandboxes/idle-sandbox")).status).toBe(404);
  expect((await host.request("GET", "/v1/sandboxes/used-sandbox")).status).toBe(200);
  expect(existsSync(join(host.root, "used-sandbox"))).toBe(true);
});
