#!/usr/bin/env node
// Runs the TypeScript CLI directly, so the package needs no build step.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../cli/main.ts");
process.exitCode = await main(process.argv.slice(2));
