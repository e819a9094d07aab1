/**
 * Which URLs a task's archive may be fetched from. The edge fetches from its own network, so a URL
 * naming a loopback, private or link-local address would let a user reach (and, by how the fetch
 * fails, map) the machines beside the edge. Only https to a public host is fetched, checked when the
 * task is made and again at every redirect; an operator may let named origins through for tests and
 * local development (`ALLOW_PRIVATE_ARCHIVE_ORIGINS`), over plain http too.
 *
 * Hostnames are read as WHATWG URL parsing leaves them, which is also how `fetch` reads them: IPv4
 * in any spelling (`2130706433`, `0x7f.1`, `0177.0.0.1`) is dotted decimal by then, IPv6 is
 * bracketed hex. A name is not resolved here (a Worker cannot), so a public name whose DNS answers a
 * private address is not caught: on Cloudflare a Worker's fetch cannot reach private networks, and
 * on a local edge that is the operator's network to guard.
 */

/**
 * What a task that got no archive says, however the fetch failed: refused, broken off, a 404, not a
 * tar, empty or redirected somewhere refused would each tell a user something of the network.
 */
export const UNUSABLE_ARCHIVE =
  "The archive could not be fetched or held no files: its URL must answer a .tar.gz or .tar over https from a public host.";

/** IPv4 ranges that are not a public host (RFC 6890's special-purpose registry, less the globally reachable). */
const PRIVATE_V4: readonly (readonly [string, number])[] = [
  ["0.0.0.0", 8], // "this network", 0.0.0.0 itself
  ["10.0.0.0", 8],
  ["100.64.0.0", 10], // carrier-grade NAT
  ["127.0.0.0", 8],
  ["169.254.0.0", 16], // link-local, cloud metadata services
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved, and the broadcast address
];

/** Names that never mean a public host: `localhost` and special-use or site-local suffixes. */
const LOCAL_SUFFIXES = ["localhost", "local", "internal", "localdomain", "home.arpa"] as const;

function v4Number(host: string): number | undefined {
  const parts = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host)?.slice(1).map(Number);
  if (!parts || parts.some((p) => p > 255)) return undefined;
  return parts.reduce((n, p) => n * 256 + p, 0);
}

function publicV4(n: number): boolean {
  return PRIVATE_V4.every(([base, bits]) => {
    const size = 2 ** (32 - bits);
    return Math.floor(n / size) !== Math.floor(v4Number(base)! / size);
  });
}

/** `[…]` as its eight 16-bit groups, or undefined when it is not an IPv6 literal. */
function v6Groups(host: string): number[] | undefined {
  const inner = /^\[([0-9a-f:.]+)\]$/i.exec(host)?.[1];
  if (!inner) return undefined;
  let text = inner;
  // A dotted IPv4 tail (`::ffff:127.0.0.1`): URL parsing writes it in hex, but take it either way.
  const tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)?.[1];
  if (tail) {
    const n = v4Number(tail);
    if (n === undefined) return undefined;
    text = `${text.slice(0, -tail.length)}${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`;
  }
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const side = (s: string | undefined) => (s ? s.split(":") : []);
  const head = side(halves[0]);
  const rest = side(halves[1]);
  const fill = 8 - head.length - rest.length;
  if (halves.length === 1 ? fill !== 0 : fill < 1) return undefined;
  const groups = [...head, ...Array<string>(halves.length === 2 ? fill : 0).fill("0"), ...rest];
  if (groups.some((g) => !/^[0-9a-f]{1,4}$/i.test(g))) return undefined;
  return groups.map((g) => parseInt(g, 16));
}

/**
 * Global unicast (2000::/3) only: that leaves out ::1, ::, IPv4-mapped and -compatible forms,
 * NAT64, fc00::/7, fe80::/10, fec0::/10 and multicast. Inside it, documentation space and 6to4
 * addresses whose IPv4 is not public are left out too.
 */
function publicV6(g: number[]): boolean {
  if (g[0]! < 0x2000 || g[0]! > 0x3fff) return false;
  if (g[0] === 0x2001 && g[1] === 0x0db8) return false;
  if (g[0] === 0x2002) return publicV4(g[1]! * 65536 + g[2]!);
  return true;
}

/** Whether `hostname` (as `URL` gives it) names a public host. */
export function isPublicHost(hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/\.$/, "");
  const v4 = v4Number(host);
  if (v4 !== undefined) return publicV4(v4);
  if (host.startsWith("[")) {
    const v6 = v6Groups(host);
    return v6 !== undefined && publicV6(v6);
  }
  // A last label that is a number is an IPv4 address to URL parsing; one that reached here is not a canonical one.
  const last = host.split(".").at(-1) ?? "";
  if (/^(0x[0-9a-f]*|\d+)$/.test(last)) return false;
  // One label (`intranet`) is resolved against the machine's search domains, not the public DNS.
  if (!host.includes(".")) return false;
  return !LOCAL_SUFFIXES.some((suffix) => host === suffix || host.endsWith(`.${suffix}`));
}

/**
 * Why the edge will not fetch `url` for an archive, or undefined when it will. `allowedOrigins` are
 * origins (`http://127.0.0.1:8000`) the operator lets through whatever their host and scheme.
 */
export function archiveUrlRefusal(url: URL, allowedOrigins: readonly string[] = []): string | undefined {
  if (url.username || url.password) return "must not carry credentials";
  if (url.protocol !== "https:" && url.protocol !== "http:") return "must be an https URL";
  if (allowedOrigins.includes(url.origin)) return undefined;
  if (!isPublicHost(url.hostname))
    return "must name a public host: loopback, private, link-local and local names are refused";
  if (url.protocol !== "https:") return "must be https";
  return undefined;
}
