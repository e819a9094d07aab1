import { existsSync } from "node:fs";
import { join } from "node:path";
import { expect, it, vi } from "vitest";
import { useHost } from "./harness.js";

// One idle second lasts 5 ms here, so that a 10-second time to live passes in 50 ms.
const host = useHost({ idleTtlScaleMs: 5 });

it("destroys a sandbox that has had no request for its idle time to live", async () => {
  await host.create("idle-sandbox", { idleTtlSeconds: 10 });
  await host.upload("idle-sandbox", { "a.txt": "a\n" });
  await vi.waitFor(() => expect(existsSync(join(host.root, "idle-sandbox"))).toBe(false), { timeout: 10_000 });
  expect((await host.request("GET", "/v1/sandboxes/idle-sandbox")).status).toBe(404);
});
