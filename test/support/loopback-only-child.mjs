/**
 * `node --import` this into a program a test starts that is not the project's own (an editor's CLI,
 * and through NODE_OPTIONS whatever that starts): a connection to anything but loopback or a local
 * socket is refused before it starts, as test/support/loopback-only.ts does for the test's own
 * process, and its destination is appended to the file SEXTANT_REFUSED_LOG names. A program may
 * swallow the refusal (a telemetry or update check that fails quietly); the log still says it tried.
 * Plain JavaScript, so that it loads under plain Node with no TypeScript loader in front of a large bundle.
 */
import { appendFileSync } from "node:fs";
import net from "node:net";

const INSTALLED = Symbol.for("sextant.test.loopbackOnly");
const LOG = process.env.SEXTANT_REFUSED_LOG;

function isLoopback(host) {
  if (host === undefined || host === null || host === "") return true;
  const h = String(host)
    .replace(/^\[(.*)\]$/, "$1")
    .toLowerCase();
  if (h === "localhost") return true;
  if (net.isIPv4(h)) return h.startsWith("127.");
  if (net.isIPv6(h)) return h === "::1" || h === "0:0:0:0:0:0:0:1" || /^::ffff:127\./.test(h);
  return false;
}

function destination(args) {
  const [first, second] = Array.isArray(args[0]) ? args[0] : args;
  if (typeof first === "string") return undefined;
  if (typeof first === "number") return { host: typeof second === "string" ? second : undefined, port: first };
  if (first && typeof first === "object") {
    if (first.path) return undefined;
    return { host: first.host, port: first.port };
  }
  return undefined;
}

const proto = net.Socket.prototype;
if (!proto[INSTALLED]) {
  const connect = proto.connect;
  proto.connect = function (...args) {
    const target = destination(args);
    if (target && !isLoopback(target.host)) {
      const where = `${target.host}:${String(target.port)}`;
      if (LOG) appendFileSync(LOG, `${process.pid} ${process.argv.slice(1).join(" ")} -> ${where}\n`);
      throw new Error(`npm test reaches only this machine's loopback: a program a test started tried ${where}.`);
    }
    return connect.apply(this, args);
  };
  proto[INSTALLED] = true;
}
