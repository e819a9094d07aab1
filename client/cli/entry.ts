// The bundle's entry: `client/bin/sextant.js` imports it, or `main.ts` through tsx without a build.
import { main } from "./main.js";

process.exitCode = await main(process.argv.slice(2));
