/**
 * `npm test` needs no network beyond this machine: every Node test file runs with this set up
 * (vitest.config.ts), and a connection from the test's process to anything but loopback or a
 * local socket is refused before it starts, with an error that names where it was going. Processes
 * the tests start (an edge, the CLI) are held to it by test/client/loopback-only.test.ts's reading
 * of the test tree instead.
 */
import net from "node:net";

const INSTALLED = Symbol.for("sextant.test.loopbackOnly");

/** Whether `host` (a name or an address, IPv6 possibly in brackets) is this machine's loopback. */
export function isLoopback(host: string | undefined): boolean {
  // Node connects to localhost when no host is given.
  if (host === undefined || host === "") return true;
  const h = host.replace(/^\[(.*)\]$/, "$1").toLowerCase();
  if (h === "localhost") return true;
  if (net.isIPv4(h)) return h.startsWith("127.");
  if (net.isIPv6(h)) return h === "::1" || h === "0:0:0:0:0:0:0:1" || /^::ffff:127\./.test(h);
  return false;
}

/** Where a `Socket.prototype.connect` call goes: undefined for a local (Unix) socket. */
function destination(args: unknown[]): { host: string | undefined; port: unknown } | undefined {
  // `net.connect` and `tls.connect` pass their arguments already normalized, as one array.
  const [first, second] = Array.isArray(args[0]) ? (args[0] as unknown[]) : args;
  if (typeof first === "string") return undefined;
  if (typeof first === "number") return { host: typeof second === "string" ? second : undefined, port: first };
  if (first && typeof first === "object") {
    const options = first as { path?: string | null; host?: string; port?: unknown };
    // As net does: a path (http's options carry `path: null`) means a local socket.
    if (options.path) return undefined;
    return { host: options.host, port: options.port };
  }
  return undefined;
}

export const REFUSED = "npm test reaches only this machine's loopback";

const proto = net.Socket.prototype as net.Socket & { [INSTALLED]?: true };
if (!proto[INSTALLED]) {
  const connect = proto.connect;
  proto.connect = function (this: net.Socket, ...args: unknown[]) {
    const target = destination(args);
    if (target && !isLoopback(target.host)) {
      throw new Error(`${REFUSED}: a test tried ${target.host}:${String(target.port)}.`);
    }
    return (connect as (...a: unknown[]) => net.Socket).apply(this, args);
  } as typeof proto.connect;
  proto[INSTALLED] = true;
}
