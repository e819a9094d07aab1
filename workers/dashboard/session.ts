/**
 * The dashboard's browser session: a cookie holding an expiry and an HMAC of it keyed by the admin
 * secret, set once the operator has typed the secret into the login form. The secret itself never
 * goes into the cookie, rotating it ends every session, and the cookie is `HttpOnly`,
 * `SameSite=Strict` and scoped to the dashboard's own paths; it is honoured for the dashboard's
 * reads only, never for the admin API.
 */
import { toBase64url } from "../../protocol/base64.js";

export const SESSION_COOKIE = "sextant_dashboard";
export const SESSION_PATH = "/admin/dashboard";
export const SESSION_TTL_MS = 12 * 3_600_000;

const encoder = new TextEncoder();

async function mac(secret: string, expires: number): Promise<string> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  return toBase64url(
    new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(`sextant-dashboard:${expires}`))),
  );
}

export async function sessionToken(secret: string, now = Date.now()): Promise<string> {
  const expires = now + SESSION_TTL_MS;
  return `${expires}.${await mac(secret, expires)}`;
}

export async function validSession(secret: string, token: string | undefined, now = Date.now()): Promise<boolean> {
  const match = /^(\d{13})\.([A-Za-z0-9_-]{43})$/.exec(token ?? "");
  if (!match) return false;
  const expires = Number(match[1]);
  if (!(expires > now && expires <= now + SESSION_TTL_MS)) return false;
  const expected = encoder.encode(await mac(secret, expires));
  const given = encoder.encode(match[2]!);
  return given.byteLength === expected.byteLength && crypto.subtle.timingSafeEqual(given, expected);
}
