/**
 * Languages chunked by syntax, as data: the grammar to load and the node types whose bodies may be
 * split further when a definition is too large to be one chunk (classes, impls, modules).
 */
export interface LanguageSpec {
  grammar: string;
  containers: readonly string[];
}

const JS_CONTAINERS = [
  "class_declaration",
  "class",
  "class_body",
  "export_statement",
  "interface_declaration",
  "object_type",
];

export const LANGUAGES: Record<string, LanguageSpec> = {
  typescript: {
    grammar: "tree-sitter-typescript.wasm",
    containers: [...JS_CONTAINERS, "module", "internal_module", "statement_block"],
  },
  tsx: {
    grammar: "tree-sitter-tsx.wasm",
    containers: [...JS_CONTAINERS, "module", "internal_module", "statement_block"],
  },
  javascript: { grammar: "tree-sitter-javascript.wasm", containers: JS_CONTAINERS },
  python: { grammar: "tree-sitter-python.wasm", containers: ["class_definition", "block", "decorated_definition"] },
  go: {
    grammar: "tree-sitter-go.wasm",
    containers: ["type_declaration", "type_spec", "struct_type", "interface_type"],
  },
  rust: { grammar: "tree-sitter-rust.wasm", containers: ["impl_item", "trait_item", "mod_item", "declaration_list"] },
  java: {
    grammar: "tree-sitter-java.wasm",
    containers: [
      "class_declaration",
      "class_body",
      "interface_declaration",
      "interface_body",
      "enum_declaration",
      "enum_body",
    ],
  },
};

const BY_EXTENSION: Record<string, keyof typeof LANGUAGES> = {
  ".ts": "typescript",
  ".mts": "typescript",
  ".cts": "typescript",
  ".tsx": "tsx",
  ".js": "javascript",
  ".mjs": "javascript",
  ".cjs": "javascript",
  ".jsx": "javascript",
  ".py": "python",
  ".pyi": "python",
  ".go": "go",
  ".rs": "rust",
  ".java": "java",
};

/** The language of a path by its extension, or undefined for text chunked by line windows. */
export function languageOf(path: string): keyof typeof LANGUAGES | undefined {
  const dot = path.lastIndexOf(".");
  return dot < 0 ? undefined : BY_EXTENSION[path.slice(dot).toLowerCase()];
}
