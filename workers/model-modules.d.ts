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
