/**
 * `sextant agent run --git <url>[#ref]`: a GitHub or GitLab repository as the URL of its tree's
 * `.tar.gz`, which the edge fetches into the task's sandbox (no clone: the sandbox has no network).
 * The ref is a branch, tag or commit; without one, the repository's default branch (`HEAD`).
 */
export class GitUrlError extends Error {
  override name = "GitUrlError";
}

export function gitArchiveUrl(remote: string): string {
  const [address = "", ref = "HEAD", ...rest] = remote.trim().split("#");
  if (rest.length > 0 || ref === "") throw new GitUrlError(`${remote}: put at most one #ref after the URL.`);
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    throw new GitUrlError(`${remote} is not a URL; use https://github.com/<owner>/<repo>[#ref].`);
  }
  if (url.protocol !== "https:") throw new GitUrlError(`${remote}: only https remotes can be fetched.`);
  const parts = url.pathname
    .replace(/\.git\/?$/, "")
    .split("/")
    .filter(Boolean);
  const r = encodeURIComponent(ref).replace(/%2F/g, "/");
  if (url.hostname === "github.com" && parts.length === 2)
    return `https://github.com/${parts[0]}/${parts[1]}/archive/${r}.tar.gz`;
  if (url.hostname === "gitlab.com" && parts.length >= 2) {
    const name = parts.at(-1)!;
    return `https://gitlab.com/${parts.join("/")}/-/archive/${r}/${name}-${r.replace(/\//g, "-")}.tar.gz`;
  }
  throw new GitUrlError(
    `${remote}: --git knows https://github.com/<owner>/<repo> and https://gitlab.com/<group>/<repo>; for another host, pass the URL of its .tar.gz with --archive.`,
  );
}
