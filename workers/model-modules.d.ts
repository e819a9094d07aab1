/**
 * Files the bundle imports as modules (wrangler's module rules, `wrangler.toml`): a `.bin` is a Data
 * module, its bytes; a `.txt` a Text module, its contents.
 */
declare module "*.bin" {
  const bytes: ArrayBuffer;
  export default bytes;
}

declare module "*.txt" {
  const text: string;
  export default text;
}

declare module "*.html" {
  const text: string;
  export default text;
}

// The dashboard's Evals panel: a browser script, served as it is (a Text module).
declare module "*/dashboard/evals-panel.js" {
  const text: string;
  export default text;
}

// uPlot's browser build and its stylesheet, served to the dashboard as they ship (Text modules).
declare module "uplot/dist/uPlot.iife.min.js" {
  const text: string;
  export default text;
}

declare module "uplot/dist/uPlot.min.css" {
  const text: string;
  export default text;
}
