/**
 * The sandbox host as its own process (for a machine or a container that serves the edge's agent
 * tasks):
 *
 *   SANDBOX_TOKEN=… npx tsx sandboxes/main.ts [--port 8790] [--host 0.0.0.0] [--root DIR] [--driver bubblewrap|direct]
 *
 * Prints one JSON line, `{"url": …, "driver": …}`, once it listens; stops on SIGTERM or SIGINT
 * (exit 0), destroying every sandbox. Exit code 2 for bad arguments.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startSandboxHost } from "./host.js";

function fail(message: string): never {
  process.stderr.write(`sandbox host: ${message}\n`);
  process.exit(2);
}

let values;
try {
  ({ values } = parseArgs({
    options: {
      port: { type: "string", default: "8790" },
      host: { type: "string", default: "127.0.0.1" },
      root: { type: "string" },
      driver: { type: "string", default: "bubblewrap" },
    },
  }));
} catch (err) {
  fail((err as Error).message);
}
const token = process.env.SANDBOX_TOKEN;
if (!token || token.length < 16)
  fail("set SANDBOX_TOKEN (at least 16 characters): the edge sends it with every request.");
const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`--port must be a port number, not ${values.port}`);
if (values.driver !== "bubblewrap" && values.driver !== "direct") fail("--driver is bubblewrap or direct");

const host = await startSandboxHost({
  host: values.host,
  port,
  token,
  root: values.root ?? mkdtempSync(join(tmpdir(), "sextant-sandboxes-")),
  driver: values.driver,
});
process.stdout.write(`${JSON.stringify({ url: host.url, driver: values.driver, isolation: host.isolation })}\n`);
for (const signal of ["SIGTERM", "SIGINT"] as const)
  process.once(signal, () => {
    host.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  });
