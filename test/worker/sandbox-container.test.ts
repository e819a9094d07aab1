/**
 * The sandbox host's Cloudflare Container as the deployed Worker makes it: the `SandboxContainer`
 * class behind the `SANDBOX_CONTAINER` binding, which `npm run deploy -- --containers` attaches the
 * image to. Its commands run under the `direct` driver, so the container's lack of internet is what
 * keeps a task's code from sending anything out. `@cloudflare/containers` gives a container the
 * internet unless the class says otherwise, and starts it with the instance's `enableInternet` and
 * `allowedHosts`: these are what is read here, from an instance the class's own constructor built.
 *
 * The runtime here has no container engine, so it gives the binding's objects no `ctx.container` and
 * the class's constructor refuses to run under it. The instance is built on a real object's state
 * (another class's, real SQLite storage) with only `container` added, reported as not running.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { SandboxContainer } from "../../durable-objects/sandbox-container.js";

describe("the sandbox host's container", () => {
  it("is started without internet access, and with no host let through", async () => {
    const host = env.AGENT_QUOTA.get(env.AGENT_QUOTA.idFromName(`container-host-${crypto.randomUUID()}`));
    await runInDurableObject(host, async (_instance, state) => {
      Object.defineProperty(state, "container", { value: { running: false } });
      type Args = ConstructorParameters<typeof SandboxContainer>;
      const container = new SandboxContainer(state as Args[0], env as Args[1]);
      // The constructor's own start-up (it schedules an alarm) is done before the object is used.
      await state.blockConcurrencyWhile(async () => {});
      await state.storage.deleteAlarm();
      expect(container.enableInternet).toBe(false);
      expect(container.allowedHosts ?? []).toEqual([]);
    });
  });
});
