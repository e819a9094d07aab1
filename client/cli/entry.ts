// The bundle's entry: `client/bin/sextant.js` imports it, or the source through tsx without a build.
// `--version` alone answers here, before the rest of the CLI loads: the build puts `main.ts` and
// everything it imports in a file of its own, whose 2 MB took more CPU to read than Node takes to
// start.
import { VERSION } from "../../protocol/version.js";

const argv = process.argv.slice(2);
if (argv.length === 1 && (argv[0] === "--version" || argv[0] === "-V")) {
  // A reader gone before the write (`sextant --version | true`) is an ordinary end, as in main().
  process.stdout.on("error", () => {});
  process.stdout.write(`${VERSION}\n`);
} else {
  const { main } = await import("./main.js");
  process.exitCode = await main(argv);
}
