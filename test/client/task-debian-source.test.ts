import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { archiveFromSources, type DebianArchive, fetchDebianSource } from "../../bench/tasks/debian.js";

/**
 * A Debian archive on disk that apt reads through `file:` URIs: one source package, `demo` 1.0-1,
 * whose orig tarball holds `demo-1.0/demo.py` (and a link, which the tree must not keep). Unsigned,
 * so apt is told to trust it; everything else (the index, its hashes, `apt-get source`) is apt's own.
 */
function makeArchive(root: string, body: string): { sha256: string } {
  const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
  const md5 = (b: Buffer) => createHash("md5").update(b).digest("hex");
  const work = mkdtempSync(join(tmpdir(), "demo-src-"));
  mkdirSync(join(work, "demo-1.0", "tests"), { recursive: true });
  writeFileSync(join(work, "demo-1.0", "demo.py"), body);
  writeFileSync(join(work, "demo-1.0", "tests", "test_demo.py"), "import demo\n");
  symlinkSync("demo.py", join(work, "demo-1.0", "alias.py"));
  const pool = join(root, "pool", "main", "d", "demo");
  mkdirSync(pool, { recursive: true });
  execFileSync("tar", ["-czf", join(pool, "demo_1.0.orig.tar.gz"), "-C", work, "demo-1.0"]);
  execFileSync("tar", ["-cJf", join(pool, "demo_1.0-1.debian.tar.xz"), "-C", work, "demo-1.0/tests"]);
  rmSync(work, { recursive: true, force: true });
  const files = ["demo_1.0.orig.tar.gz", "demo_1.0-1.debian.tar.xz"].map((name) => ({
    name,
    bytes: readFileSync(join(pool, name)),
  }));
  const dsc = Buffer.from(
    `Format: 3.0 (quilt)\nSource: demo\nVersion: 1.0-1\nChecksums-Sha256:\n${files.map((f) => ` ${sha(f.bytes)} ${f.bytes.length} ${f.name}`).join("\n")}\n`,
  );
  writeFileSync(join(pool, "demo_1.0-1.dsc"), dsc);
  files.unshift({ name: "demo_1.0-1.dsc", bytes: dsc });
  const sources = Buffer.from(
    [
      "Package: demo",
      "Binary: python3-demo",
      "Version: 1.0-1",
      "Maintainer: Nobody <nobody@localhost>",
      "Architecture: all",
      "Format: 3.0 (quilt)",
      "Directory: pool/main/d/demo",
      "Files:",
      ...files.map((f) => ` ${md5(f.bytes)} ${f.bytes.length} ${f.name}`),
      "Checksums-Sha256:",
      ...files.map((f) => ` ${sha(f.bytes)} ${f.bytes.length} ${f.name}`),
      "",
    ].join("\n"),
  );
  const dists = join(root, "dists", "bookworm");
  mkdirSync(join(dists, "main", "source"), { recursive: true });
  writeFileSync(join(dists, "main", "source", "Sources"), sources);
  writeFileSync(
    join(dists, "Release"),
    [
      "Origin: Demo",
      "Suite: bookworm",
      "Codename: bookworm",
      `Date: ${new Date().toUTCString()}`,
      "Components: main",
      "SHA256:",
      ` ${sha(sources)} ${sources.length} main/source/Sources`,
      "",
    ].join("\n"),
  );
  return { sha256: sha(files[1]!.bytes) };
}

describe("the Debian source fetcher", () => {
  let root: string;
  let archive: DebianArchive;

  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), "debian-source-"));
    archive = { uri: `file:${join(root, "archive")}`, suite: "bookworm", trusted: true };
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("unpacks the pinned orig tarball without its top folder, leaving links out, and reads it from the cache after", async () => {
    const { sha256 } = makeArchive(join(root, "archive"), "VALUE = 1\n");
    const cache = join(root, "cache-ok");
    const tree = await fetchDebianSource("demo", "1.0-1", sha256, cache, archive);
    expect(readFileSync(join(tree, "demo.py"), "utf8")).toBe("VALUE = 1\n");
    expect(readdirSync(tree).sort()).toEqual(["demo.py", "tests"]);

    // The archive is gone: the cached tarball, still matching its pin, is all the second call needs.
    rmSync(join(root, "archive"), { recursive: true, force: true });
    writeFileSync(join(tree, "demo.py"), "stale\n");
    const again = await fetchDebianSource("demo", "1.0-1", sha256, cache, archive);
    expect(readFileSync(join(again, "demo.py"), "utf8")).toBe("VALUE = 1\n");
  });

  it("refuses a tarball that differs from its pin, though the archive's own index vouches for it", async () => {
    const pinned = makeArchive(join(root, "archive"), "VALUE = 1\n").sha256;
    // The same version re-published with other bytes: apt accepts it (the index matches), the pin must not.
    const changed = makeArchive(join(root, "archive"), "VALUE = 2\n").sha256;
    expect(changed).not.toBe(pinned);
    const cache = join(root, "cache-changed");
    await expect(fetchDebianSource("demo", "1.0-1", pinned, cache, archive)).rejects.toThrow(
      `the orig tarball's SHA-256 is ${changed}, not the pinned ${pinned}`,
    );
    // Nothing of the refused download is left where a later call would read it.
    expect(readdirSync(join(cache, "demo_1.0-1"))).toEqual([]);
  });

  it("does not trust a cached tarball that no longer matches its pin: it is fetched again", async () => {
    const { sha256 } = makeArchive(join(root, "archive"), "VALUE = 3\n");
    const cache = join(root, "cache-tampered");
    await fetchDebianSource("demo", "1.0-1", sha256, cache, archive);
    writeFileSync(join(cache, "demo_1.0-1", "demo_1.0.orig.tar.gz"), "not the tarball");
    const tree = await fetchDebianSource("demo", "1.0-1", sha256, cache, archive);
    expect(readFileSync(join(tree, "demo.py"), "utf8")).toBe("VALUE = 3\n");
  });

  it("finds bookworm's main archive among the host's apt sources, in either format", () => {
    const deb822 = [
      "Types: deb",
      "# http://snapshot.example/archive/debian/20250520T000000Z",
      "URIs: http://mirror.example/debian",
      "Suites: bookworm bookworm-updates",
      "Components: main",
      "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg",
      "",
      "Types: deb",
      "URIs: http://mirror.example/debian-security",
      "Suites: bookworm-security",
      "Components: main",
    ].join("\n");
    const oneLine =
      "deb https://vendor.example/apt stable main\ndeb [arch=amd64 signed-by=/k.gpg] http://other.example/debian bookworm contrib main\n";
    expect(archiveFromSources([{ name: "debian.sources", text: deb822 }])).toEqual({
      uri: "http://mirror.example/debian",
      suite: "bookworm",
      signedBy: "/usr/share/keyrings/debian-archive-keyring.gpg",
    });
    expect(archiveFromSources([{ name: "sources.list", text: oneLine }])).toEqual({
      uri: "http://other.example/debian",
      suite: "bookworm",
      signedBy: "/k.gpg",
    });
    const security =
      "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n";
    expect(archiveFromSources([{ name: "security.sources", text: security }])).toBeUndefined();
  });
});
