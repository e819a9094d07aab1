import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, Me } from "../../protocol/schemas.js";
import { sextant, simulatedTabCompletion, startLocalEdge, type LocalEdge } from "../support/local-edge.js";

/** `npm run dev`: the same local edge under `wrangler dev`, which reloads on save. */
describe("npm run dev", () => {
  let edge: LocalEdge;

  beforeAll(async () => {
    edge = await startLocalEdge({ dev: true });
  });
  afterAll(async () => {
    await edge?.stop();
  });

  it("serves the API with migrations applied and the development key saved for the CLI", async () => {
    const response = await fetch(`${edge.baseURL}/healthz`);
    expect(Health.parse(await response.json()).status).toBe("ok");
    const whoami = sextant(["--json", "whoami"], { SEXTANT_CONFIG_DIR: edge.configDir });
    expect(whoami.code, whoami.stderr).toBe(0);
    expect(Me.parse(JSON.parse(whoami.stdout)).user.email).toBe("dev@sextant.localhost");
  });

  it("streams model answers from the simulated backends through the openai SDK", async () => {
    const { text, fingerprints } = await simulatedTabCompletion(edge);
    expect(text).toBe("sim0 sim1 sim2 sim3 ");
    expect([...fingerprints]).toEqual(["sextant-simulator"]);
  });
});
