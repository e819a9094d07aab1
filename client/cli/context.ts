import { isWellFormedApiKey } from "../../protocol/api-key.js";
import { Sextant, SextantAdmin } from "../sdk/client.js";
import { SextantError } from "../sdk/errors.js";
import {
  Credentials,
  credentialsPath,
  LocalEdge,
  localEdgePath,
  localEdgePathFor,
  readJsonFile,
} from "./credentials.js";

/** Options every command accepts. */
export interface GlobalOptions {
  baseUrl?: string;
  apiKey?: string;
  adminSecret?: string;
  json?: boolean;
  timeout?: string;
}

export interface Resolved {
  baseURL: string;
  apiKey: string | undefined;
  adminSecret: string | undefined;
  /** Where the settings came from, shown by `whoami` so nobody wonders which edge they talk to. */
  source: string;
}

/**
 * Flags win, then environment variables, then `sextant login`, then the local edge that
 * `npm start` registered. A newcomer therefore needs no configuration at all.
 */
export async function resolve(options: GlobalOptions): Promise<Resolved> {
  const login = await readJsonFile(credentialsPath(), Credentials);
  const local = await readJsonFile(localEdgePath(), LocalEdge);
  const env = process.env;
  const pick = <T>(...candidates: [T | undefined, string][]): [T | undefined, string] =>
    candidates.find(([value]) => value !== undefined && value !== "") ?? [undefined, "none"];

  const [baseURL, source] = pick<string>(
    [options.baseUrl, "--base-url"],
    [env.SEXTANT_BASE_URL, "SEXTANT_BASE_URL"],
    [login?.baseURL, credentialsPath()],
    [local?.baseURL, localEdgePath()],
    ["http://127.0.0.1:8787", "default"],
  );
  // A local edge other than the default one, named by --base-url or SEXTANT_BASE_URL, has its own file.
  const edge =
    local?.baseURL === baseURL
      ? local
      : await readJsonFile(localEdgePathFor(baseURL!), LocalEdge).catch(() => undefined);
  const fromSameEdge = <T>(file: { baseURL: string } | undefined, value: T | undefined) =>
    file && file.baseURL === baseURL ? value : undefined;
  const [apiKey] = pick<string>(
    [options.apiKey, "--api-key"],
    [env.SEXTANT_API_KEY, "SEXTANT_API_KEY"],
    [fromSameEdge(login, login?.apiKey), "login"],
    [fromSameEdge(edge, edge?.apiKey), "local"],
  );
  const [adminSecret] = pick<string>(
    [options.adminSecret, "--admin-secret"],
    [env.SEXTANT_ADMIN_SECRET, "SEXTANT_ADMIN_SECRET"],
    [fromSameEdge(edge, edge?.adminSecret), "local"],
  );
  return { baseURL: baseURL!, apiKey, adminSecret, source };
}

function timeoutOf(options: GlobalOptions): number | undefined {
  if (options.timeout === undefined) return undefined;
  const seconds = Number(options.timeout);
  if (!Number.isFinite(seconds) || seconds <= 0)
    throw new UsageError("--timeout must be a positive number of seconds.");
  return seconds * 1000;
}

export async function client(options: GlobalOptions): Promise<{ sextant: Sextant; resolved: Resolved }> {
  const resolved = await resolve(options);
  if (!resolved.apiKey) {
    throw new UsageError(
      `No API key for ${resolved.baseURL}. Run \`npm start\` for a local edge, \`sextant login\`, or set SEXTANT_API_KEY.`,
    );
  }
  if (!isWellFormedApiKey(resolved.apiKey)) {
    throw new UsageError("The API key is malformed: Sextant keys look like `sxt_` followed by 46 letters and digits.");
  }
  const timeout = timeoutOf(options);
  return {
    sextant: new Sextant({ apiKey: resolved.apiKey, baseURL: resolved.baseURL, ...(timeout ? { timeout } : {}) }),
    resolved,
  };
}

export async function adminClient(options: GlobalOptions): Promise<SextantAdmin> {
  const resolved = await resolve(options);
  if (!resolved.adminSecret) {
    throw new UsageError(`No admin secret for ${resolved.baseURL}: pass --admin-secret or set SEXTANT_ADMIN_SECRET.`);
  }
  const timeout = timeoutOf(options);
  return new SextantAdmin({
    adminSecret: resolved.adminSecret,
    baseURL: resolved.baseURL,
    ...(timeout ? { timeout } : {}),
  });
}

/** A mistake in how the CLI was called or configured: exit code 2. */
export class UsageError extends SextantError {
  override name = "UsageError";
}
