/**
 * A sandbox host in a Cloudflare Container, one per task: what a deployment runs when
 * `SANDBOX_HOSTS` is `containers`. The image is `sandboxes/container/Dockerfile` (the host under the
 * `direct` driver: the container is the isolation). The task object reaches its own container over
 * this object's stub, never the internet; the container has no internet either, so the code and the
 * commands in it cannot send anything out. The host's token is the edge's `SANDBOX_TOKEN`, given to
 * the container as its environment when it starts.
 */
import { Container } from "@cloudflare/containers";

interface SandboxContainerEnv {
  SANDBOX_TOKEN?: string;
  /** How long a container is kept without a request (the Container class's `sleepAfter`, e.g. `"90m"`). */
  SANDBOX_CONTAINER_SLEEP_AFTER?: string;
}

/** The port the image's host listens on (`--port 8790` in the Dockerfile). */
export const SANDBOX_CONTAINER_PORT = 8790;

export class SandboxContainer extends Container<SandboxContainerEnv> {
  override defaultPort = SANDBOX_CONTAINER_PORT;
  /** A task's commands run with no network: nothing in the container reaches out. */
  override enableInternet = false;
  /**
   * A container's sandboxes live in its memory: it must outlast its task's idle time to live (an
   * hour after the task ends, by default), or the diff and the task's events are gone with it.
   */
  override sleepAfter = "75m";

  constructor(ctx: DurableObjectState<{}>, env: SandboxContainerEnv) {
    super(ctx, env);
    this.envVars = { SANDBOX_TOKEN: env.SANDBOX_TOKEN ?? "" };
    if (env.SANDBOX_CONTAINER_SLEEP_AFTER) this.sleepAfter = env.SANDBOX_CONTAINER_SLEEP_AFTER;
  }
}
