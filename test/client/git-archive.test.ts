import { describe, expect, it } from "vitest";
import { gitArchiveUrl, GitUrlError } from "../../client/cli/git-archive.js";

describe("--git remotes as archive URLs", () => {
  it("maps GitHub and GitLab repositories, with or without a ref or .git", () => {
    expect(gitArchiveUrl("https://github.com/acme/widgets")).toBe(
      "https://github.com/acme/widgets/archive/HEAD.tar.gz",
    );
    expect(gitArchiveUrl("https://github.com/acme/widgets.git#v1.2")).toBe(
      "https://github.com/acme/widgets/archive/v1.2.tar.gz",
    );
    expect(gitArchiveUrl("https://github.com/acme/widgets#feature/x")).toBe(
      "https://github.com/acme/widgets/archive/feature/x.tar.gz",
    );
    expect(gitArchiveUrl("https://gitlab.com/group/sub/tool#main")).toBe(
      "https://gitlab.com/group/sub/tool/-/archive/main/tool-main.tar.gz",
    );
  });

  it("refuses what it cannot map, saying what to do instead", () => {
    for (const remote of [
      "git@github.com:acme/widgets.git",
      "http://github.com/acme/widgets",
      "https://github.com/acme",
      "https://example.org/a/b",
      "https://github.com/acme/widgets#a#b",
      "https://github.com/acme/widgets#",
    ])
      expect(() => gitArchiveUrl(remote), remote).toThrow(GitUrlError);
    expect(() => gitArchiveUrl("https://example.org/a/b")).toThrow(/--archive/);
  });
});
