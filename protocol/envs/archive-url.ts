/**
 * Which URLs a task set's archives may be fetched from. The task object fetches them as it fetches
 * an agent task's archive (`protocol/agents/archive-url.ts`: https to a public host, or an origin
 * the operator lets through), and the manifest keeps the URL in the clear, so it must be a public
 * location and nothing more: a URL with a query string or fragment (a signed URL's token, a
 * session) would put a credential in the database, and is refused.
 */
import { archiveUrlRefusal } from "../agents/archive-url.js";

/** Why a task set's archive URL is refused, or undefined when it is taken. */
export function taskArchiveUrlRefusal(text: string, allowedOrigins: readonly string[] = []): string | undefined {
  if (!URL.canParse(text)) return "must be an https URL";
  const url = new URL(text);
  const refusal = archiveUrlRefusal(url, allowedOrigins);
  if (refusal) return refusal;
  if (url.search || url.hash || text.includes("?") || text.includes("#"))
    return "must not carry a query string or fragment: the manifest keeps it in the clear, so it names a public location, not a signed one";
  return undefined;
}

/** Where `sextant envs push --archive-base-url` says an archive is published: `<base>/<sha256>.tar.gz`. */
export const publishedArchiveUrl = (base: string, sha256: string): string =>
  `${base.replace(/\/+$/, "")}/${sha256}.tar.gz`;
