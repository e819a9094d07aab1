import { describe, expect, it } from "vitest";
import { isHeldOut, mayEvaluate } from "../../eval/packages.js";

/** `../shared/HELD-OUT.md`'s packages never reach an eval or a fixture, by name or vendored in a path. */
describe("held-out packages", () => {
  it("names every reserved npm package, and vendored copies by folder", () => {
    for (const name of ["lodash", "lodash.merge", "@types/lodash-es", "underscore", "date-fns-tz", "@tiptap/core"])
      expect(isHeldOut(name), name).toBe(true);
    expect(isHeldOut("some-pkg/vendor/lodash/index.js")).toBe(true);
    for (const name of ["zod", "express", "lodashed", "asyncify"]) expect(isHeldOut(name), name).toBe(false);
  });

  it("lets the search eval run on its own three packages and on no other reserved one", () => {
    for (const name of ["ramda", "rxjs", "async", "zod"]) expect(mayEvaluate(name), name).toBe(true);
    for (const name of ["lodash", "underscore", "prosemirror-model", "rambda"])
      expect(mayEvaluate(name), name).toBe(false);
  });
});
