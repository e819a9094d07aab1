/**
 * The sandbox host `npm start` runs for agent tasks when no `SANDBOX_URL` is given: in this process,
 * on a free loopback port, with a token made for this run, under bubblewrap. Without a bubblewrap
 * that works, no host starts and the edge refuses agent tasks saying how to install it: the `direct`
 * driver (no namespaces, so a task's commands could read this machine's files and reach the edge,
 * the simulator and anything else listening here) runs only when the operator names it,
 * `SEXTANT_SANDBOX_DRIVER=direct`, which is for a container that is itself the isolation. Sandboxes
 * live in a directory of their own and go with the process.
 */
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bubblewrapWorks, type DriverName } from "../sandboxes/drivers.js";
import { startSandboxHost } from "../sandboxes/host.js";

/** The environment variable that names the driver. */
export const DRIVER_VAR = "SEXTANT_SANDBOX_DRIVER";

const INSTALL =
  "Install it (`sudo apt-get install bubblewrap` on Debian or Ubuntu, `sudo dnf install bubblewrap` on " +
  "Fedora or RHEL, `sudo pacman -S bubblewrap` on Arch, `sudo apk add bubblewrap` on Alpine) and restart `npm start`.";
const DIRECT =
  `Only inside a container that is itself the isolation (a Cloudflare Container, sandboxes/container/Dockerfile), ` +
  `never on a shared machine, \`${DRIVER_VAR}=direct npm start\` runs commands without namespaces instead.`;

/** Why there is no sandbox host, by what the machine lacks: the sentence the edge answers task creation with. */
export const REFUSALS = {
  missing:
    "Agent tasks are off on this edge: `npm start` found no bubblewrap (`bwrap`), which keeps a task's commands " +
    `away from this machine's files, its network and the services listening on it. ${INSTALL} ${DIRECT}`,
  blocked:
    "Agent tasks are off on this edge: bubblewrap (`bwrap`) is installed but cannot make its namespaces here " +
    "(run `bwrap --unshare-all --ro-bind / / true` to see why: unprivileged user namespaces disabled by a sysctl " +
    "or AppArmor, or a container that withholds them). Allow them and restart `npm start`. " +
    DIRECT,
} as const;

/** What `npm start` does for agent tasks: which driver runs them, or why none does. */
export type DriverChoice = { driver: "bubblewrap" } | { driver: "direct" } | { driver: undefined; refusal: string };

export interface DriverProbes {
  /** Whether bubblewrap can make a sandbox here. */
  works(): boolean;
  /** Whether `bwrap` is on the PATH at all. */
  installed(): boolean;
}

const probes: DriverProbes = {
  works: bubblewrapWorks,
  installed: () => spawnSync("bwrap", ["--version"], { stdio: "ignore" }).status === 0,
};

/**
 * The driver `SEXTANT_SANDBOX_DRIVER` names (`bubblewrap` when unset), or the refusal when it is
 * bubblewrap and bubblewrap cannot run. Throws for a name that is no driver.
 */
export function chooseDriver(env: NodeJS.ProcessEnv = process.env, probe: DriverProbes = probes): DriverChoice {
  const named = env[DRIVER_VAR] || "bubblewrap";
  if (named === "direct") return { driver: "direct" };
  if (named !== "bubblewrap")
    throw new Error(`${DRIVER_VAR} is \`${named}\`: it is \`bubblewrap\` (the default) or \`direct\`.`);
  if (probe.works()) return { driver: "bubblewrap" };
  return { driver: undefined, refusal: probe.installed() ? REFUSALS.blocked : REFUSALS.missing };
}

/** A line about the driver, framed to stand out when it is not bubblewrap. */
export function driverBanner(choice: DriverChoice): string {
  if (choice.driver === "bubblewrap")
    return "Agent sandboxes: bubblewrap (namespaces of their own for every command, no network).";
  const text =
    choice.driver === "direct"
      ? `Agent sandboxes: DIRECT (${DRIVER_VAR}=direct): NO namespaces. A task's commands run as this user, ` +
        "read what it can read and reach the edge, the simulator and everything else listening here. Only " +
        "for a container that is itself the isolation, never a shared machine."
      : choice.refusal;
  const lines: string[] = [];
  for (const word of text.split(" ")) {
    const last = lines.at(-1);
    if (last !== undefined && last.length + word.length < 96) lines[lines.length - 1] = `${last} ${word}`;
    else lines.push(word);
  }
  const rule = "!".repeat(100);
  return [rule, ...lines.map((l) => `!! ${l}`), rule].join("\n");
}

export interface LocalSandboxHost {
  url: string;
  driver: DriverName;
  /** The edge's `--var`s that point it at this host. */
  vars: string[];
  stop(): Promise<void>;
}

/** `npm start`'s sandbox host, with the driver chosen (`chooseDriver`), which must not be a refusal. */
export async function startLocalSandboxHost(driver: DriverName): Promise<LocalSandboxHost> {
  // One directory per run, in the system's temporary directory (every directory above a sandbox's
  // tree must let the sandbox's own user through): sandboxes do not outlive the host that made them
  // (their keys were only ever in its memory), and another edge started from the same checkout keeps
  // its own.
  const token = randomBytes(32).toString("base64url");
  const root = mkdtempSync(join(tmpdir(), "sextant-sandboxes-"));
  const host = await startSandboxHost({ host: "127.0.0.1", port: 0, token, root, driver });
  return {
    url: host.url,
    driver,
    vars: [`SANDBOX_URL:${host.url}`, `SANDBOX_TOKEN:${token}`],
    stop: async () => {
      await host.stop();
      rmSync(root, { recursive: true, force: true });
    },
  };
}
