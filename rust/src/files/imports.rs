//! The sibling modules a Python helper imports, so the staged set can be proven
//! import-closed. A light statement scanner, not a Python parser: it reads `import`
//! and `from ... import` statements (with parentheses and backslash continuations,
//! after `;` and after a compound statement's `:`) outside comments and strings, the
//! way Python reads its source: universal newlines, a leading BOM, strings continued
//! by a backslash, identifiers NFKC-normalized. It streams, so a helper of any size
//! is read whole in bounded memory. Imports made at run time (`importlib`,
//! `__import__`) are not seen.

use std::collections::HashSet;

use unicode_normalization::UnicodeNormalization;

/// What a helper's imports could load from beside it: module paths relative to the
/// helper's directory (`util`, `pkg/sub`), each a `<path>.py` or `<path>/__init__.py`,
/// and a source encoding other than UTF-8 when the helper declares one (its text then
/// means something else to Python than the bytes read here).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Imports {
    pub modules: Vec<String>,
    pub encoding: Option<String>,
}

/// The imports of a whole helper's text.
pub fn sibling_imports(source: &str) -> Imports {
    let mut scanner = ImportScanner::default();
    scanner.feed(source.as_bytes());
    scanner.finish()
}

/// The longest line, and the longest logical statement, the scanner holds at once;
/// a longer line is read in pieces of this size. Memory stays bounded however large
/// the helper is, and a helper of any size is scanned to its end.
const MAX_PIECE: usize = 1 << 20;

/// Reads a helper as its bytes stream past (it is an `io::Write` sink for the
/// hasher), one line at a time.
#[derive(Default)]
pub struct ImportScanner {
    pending: Vec<u8>,
    /// The last chunk ended on `\r`: a `\n` that opens the next one ends no line.
    after_cr: bool,
    lines: usize,
    lexer: Lexer,
    found: Found,
}

/// Module paths in order of appearance, each once.
#[derive(Default)]
struct Found {
    modules: Vec<String>,
    seen: HashSet<String>,
    encoding: Option<String>,
}

impl Found {
    fn push(&mut self, path: String) {
        if !path.is_empty() && self.seen.insert(path.clone()) {
            self.modules.push(path);
        }
    }
}

impl ImportScanner {
    pub fn feed(&mut self, mut chunk: &[u8]) {
        if self.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.after_cr = false;
        // Python's universal newlines: `\n`, `\r\n` and a lone `\r` all end a line.
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', chunk) {
            self.pending.extend_from_slice(&chunk[..pos]);
            self.line();
            let crlf = chunk[pos] == b'\r' && chunk.get(pos + 1) == Some(&b'\n');
            if chunk[pos] == b'\r' && pos + 1 == chunk.len() {
                self.after_cr = true;
            }
            chunk = &chunk[pos + 1 + usize::from(crlf)..];
        }
        self.pending.extend_from_slice(chunk);
        if self.pending.len() >= MAX_PIECE {
            self.line();
        }
    }

    pub fn finish(mut self) -> Imports {
        if !self.pending.is_empty() {
            self.line();
        }
        self.lexer.end_statement(&mut self.found);
        Imports {
            modules: self.found.modules,
            encoding: self.found.encoding,
        }
    }

    fn line(&mut self) {
        let text = String::from_utf8_lossy(&self.pending);
        let mut text: &str = &text;
        if self.lines == 0 {
            text = text.strip_prefix('\u{feff}').unwrap_or(text);
        }
        if self.lines < 2 && self.found.encoding.is_none() {
            self.found.encoding = foreign_encoding(text);
        }
        self.lines += 1;
        self.lexer.line(text, &mut self.found);
        self.pending.clear();
    }
}

impl std::io::Write for ImportScanner {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.feed(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// PEP 263: `# -*- coding: <name> -*-` on line one or two. Only UTF-8 (and ASCII,
/// its subset) reads as the bytes here do.
fn foreign_encoding(line: &str) -> Option<String> {
    let comment = line
        .trim_start_matches([' ', '\t', '\x0c'])
        .strip_prefix('#')?;
    let at = comment.find("coding")?;
    let rest = comment[at + "coding".len()..].strip_prefix([':', '='])?;
    let name: String = rest
        .trim_start_matches([' ', '\t'])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    let normal = name.to_ascii_lowercase().replace('_', "-");
    let utf8 = normal == "utf-8"
        || normal.starts_with("utf-8-")
        || matches!(normal.as_str(), "utf8" | "ascii" | "us-ascii");
    (!name.is_empty() && !utf8).then_some(name)
}

/// Python's tokens as far as statements go: string literals (one-line and triple
/// quoted, with escapes) are blanked, comments dropped, brackets counted for implicit
/// line joining, backslashes join lines. A `(` or `#` inside a string changes nothing.
#[derive(Default)]
struct Lexer {
    /// The quote of a string still open at the end of the line: a triple-quoted one,
    /// or a one-line string continued by a backslash.
    open: Option<(char, bool)>,
    depth: i64,
    /// The logical statement so far, strings blanked to `""`.
    current: String,
}

impl Lexer {
    fn line(&mut self, raw: &str, found: &mut Found) {
        let mut chars = raw.chars().peekable();
        let mut code = String::new();
        loop {
            if let Some((q, triple)) = self.open {
                // Inside a string: to its closing quote, or on to the next line.
                let mut closed = false;
                while let Some(c) = chars.next() {
                    if c == '\\' {
                        if chars.next().is_none() && !triple {
                            return self.after_line(code, true, found); // continued
                        }
                    } else if c == q
                        && (!triple
                            || (chars.next_if_eq(&q).is_some() && chars.next_if_eq(&q).is_some()))
                    {
                        closed = true;
                        break;
                    }
                }
                if !closed {
                    if !triple {
                        self.open = None; // an unterminated one-line string ends with its line
                    }
                    return self.after_line(code, self.open.is_some(), found);
                }
                self.open = None;
                code.push_str("\"\"");
            }
            let Some(c) = chars.next() else { break };
            match c {
                '#' => break,
                '"' | '\'' => {
                    let triple = chars.next_if_eq(&c).is_some();
                    if triple && chars.next_if_eq(&c).is_none() {
                        code.push_str("\"\""); // an empty string
                        continue;
                    }
                    self.open = Some((c, triple));
                }
                '(' | '[' | '{' => {
                    self.depth += 1;
                    code.push(c);
                }
                ')' | ']' | '}' => {
                    self.depth -= 1;
                    code.push(c);
                }
                _ => code.push(c),
            }
        }
        let continued = code.trim_end().ends_with('\\');
        self.after_line(code, continued, found);
    }

    fn after_line(&mut self, code: String, continued: bool, found: &mut Found) {
        if self.current.len() < MAX_PIECE {
            self.current.push(' ');
            self.current
                .push_str(code.trim_end().trim_end_matches('\\'));
        }
        if self.depth <= 0 && !continued {
            self.end_statement(found);
        }
    }

    /// Simple statements follow `;` or a compound statement's `:` (`if x: import y`).
    fn end_statement(&mut self, found: &mut Found) {
        self.depth = 0;
        let statement = std::mem::take(&mut self.current);
        let mut level = 0i64;
        let mut start = 0;
        for (i, c) in statement.char_indices() {
            match c {
                '(' | '[' | '{' => level += 1,
                ')' | ']' | '}' => level -= 1,
                ';' | ':' if level <= 0 => {
                    import_paths(statement[start..i].trim(), found);
                    start = i + 1;
                }
                _ => {}
            }
        }
        import_paths(statement[start..].trim(), found);
    }
}

/// A dotted name as Python reads it: NFKC-normalized identifiers joined by `/`;
/// `None` if it is not one.
fn module_path(dotted: &str) -> Option<String> {
    let parts: Vec<String> = dotted.split('.').map(|p| p.nfkc().collect()).collect();
    let identifier = |p: &String| {
        !p.is_empty()
            && p.chars().all(|c| c.is_alphanumeric() || c == '_')
            && !p.starts_with(|c: char| c.is_ascii_digit())
    };
    parts.iter().all(identifier).then(|| parts.join("/"))
}

/// Every module an import of `path` (`a/b/c`) loads: `a`, `a/b`, `a/b/c`.
fn push_prefixes(path: &str, found: &mut Found) {
    for (i, c) in path.char_indices() {
        if c == '/' {
            found.push(path[..i].to_string());
        }
    }
    found.push(path.to_string());
}

/// The names an `import` list or a `from ... import` list gives, `as` aliases dropped.
/// Python allows blanks around the dots of a name (`import a . b`, `from a .b import c`):
/// a name is its words before `as`, joined.
fn names(list: &str) -> impl Iterator<Item = String> + '_ {
    list.split([',', '(', ')'])
        .map(|item| {
            item.split_whitespace()
                .take_while(|w| *w != "as")
                .collect::<String>()
        })
        .filter(|n| !n.is_empty() && n != "*")
}

/// Whether `c` may continue an identifier (`import` inside `important` is no keyword).
fn identifier_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` after the keyword `word` that opens it, when the keyword stands alone (followed
/// by a blank, or by what may follow it with no blank: `from.x`, `import(`, `import*`).
fn after_keyword<'s>(text: &'s str, word: &str) -> Option<&'s str> {
    let rest = text.strip_prefix(word)?;
    (!rest.starts_with(identifier_char)).then_some(rest)
}

/// The module paths one simple statement may load beside the helper, if it imports.
fn import_paths(statement: &str, found: &mut Found) {
    let statement = statement.trim_start_matches('(');
    if let Some(rest) =
        after_keyword(statement, "import").filter(|r| r.starts_with(char::is_whitespace))
    {
        for name in names(rest) {
            if let Some(path) = module_path(&name) {
                push_prefixes(&path, found);
            }
        }
        return;
    }
    let Some(rest) = after_keyword(statement, "from") else {
        return;
    };
    // The module is words and dots up to the keyword `import`, which stands alone.
    let Some(at) = rest.match_indices("import").map(|(i, _)| i).find(|&i| {
        !rest[..i].ends_with(identifier_char)
            && !rest[i + "import".len()..].starts_with(identifier_char)
    }) else {
        return;
    };
    let (module, list) = (&rest[..at], &rest[at + "import".len()..]);
    let module: String = module.split_whitespace().collect();
    let level = module.bytes().take_while(|c| *c == b'.').count();
    let dotted = &module[level..];
    if level > 1 {
        return; // `from ..x`: the parent package, not a sibling
    }
    let base = if dotted.is_empty() {
        String::new()
    } else {
        match module_path(dotted) {
            Some(path) => {
                push_prefixes(&path, found);
                format!("{path}/")
            }
            None => return,
        }
    };
    if level == 0 && dotted.is_empty() {
        return;
    }
    // `from a import b` loads a/b when b is a submodule (or `a` a namespace package).
    for name in names(list) {
        if let Some(leaf) = module_path(&name).filter(|p| !p.contains('/')) {
            found.push(format!("{base}{leaf}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modules(src: &str) -> Vec<String> {
        sibling_imports(src).modules
    }

    #[test]
    fn reads_the_import_forms() {
        let src = "import os, helper_a as a\nfrom helper_b.sub import x\nfrom . import helper_c, helper_d as d\nfrom .helper_e import y\nfrom .. import parent\nfrom pkg import (\n    one,\n    two,\n)\n# import commented\n\"\"\"\nimport in_docstring\n\"\"\"\nx = 1; import helper_f\n";
        assert_eq!(
            modules(src),
            [
                "os",
                "helper_a",
                "helper_b",
                "helper_b/sub",
                "helper_b/sub/x",
                "helper_c",
                "helper_d",
                "helper_e",
                "helper_e/y",
                "pkg",
                "pkg/one",
                "pkg/two",
                "helper_f"
            ]
        );
    }

    #[test]
    fn dotted_modules_load_every_prefix() {
        assert_eq!(modules("import a.b.c\n"), ["a", "a/b", "a/b/c"]);
        assert_eq!(modules("from ns import mod\n"), ["ns", "ns/mod"]);
        assert_eq!(
            modules("from pkg.util import x\n"),
            ["pkg", "pkg/util", "pkg/util/x"]
        );
    }

    #[test]
    fn strings_and_compound_statements_hide_nothing() {
        let src = "x = \"(\"\nimport helper_a\ns = '# not a comment'; import helper_b\nif True: import helper_c\ntry: from helper_d import y\nexcept ImportError: pass\nt = '''\nimport in_string\n'''\nu = \"\"\"one line\"\"\"; import helper_e\nd = {'a': 1}\nv = \"abc\\\n\"; import helper_f\n";
        assert_eq!(
            modules(src),
            [
                "helper_a",
                "helper_b",
                "helper_c",
                "helper_d",
                "helper_d/y",
                "helper_e",
                "helper_f"
            ]
        );
    }

    #[test]
    fn reads_source_as_python_does() {
        assert_eq!(modules("\u{feff}import sibling\n"), ["sibling"]);
        assert_eq!(modules("x = 1\rimport sibling\r"), ["sibling"]);
        assert_eq!(modules("x = 1\r\nimport sibling\r\n"), ["sibling"]);
        assert_eq!(modules("import \u{ff53}ibling\n"), ["sibling"]);
        let foreign = sibling_imports("# coding: unicode_escape\n#\\u000aimport sibling\n");
        assert_eq!(foreign.encoding.as_deref(), Some("unicode_escape"));
        assert_eq!(sibling_imports("# -*- coding: utf-8 -*-\n").encoding, None);
    }

    #[test]
    fn streams_in_pieces_of_any_size() {
        let src =
            "import helper_a\r\nx = 1\nfrom . import (\n  helper_b,\n  helper_c)\rimport helper_d";
        for size in [1, 2, 3, 7, 64] {
            let mut scanner = ImportScanner::default();
            for piece in src.as_bytes().chunks(size) {
                scanner.feed(piece);
            }
            assert_eq!(
                scanner.finish().modules,
                ["helper_a", "helper_b", "helper_c", "helper_d"]
            );
        }
        // A helper larger than any buffer is still read to its end.
        let mut big = "x = 1\n".repeat(400_000);
        big.push_str("import helper_z\n");
        assert_eq!(modules(&big), ["helper_z"]);
    }

    #[test]
    fn many_imports_cost_linear_time() {
        let src: String = (0..200_000).map(|i| format!("import m{i}\n")).collect();
        assert_eq!(modules(&src).len(), 200_000);
    }

    /// Found by fuzzing against `ast` (`rust/fuzz`, target `imports`): Python allows
    /// blanks around the dots of a module name and no blank after `from` before a dot;
    /// `from a .b import c` loads a/b, which the scanner missed.
    #[test]
    fn reads_names_spelled_with_blanks_and_dots_as_python_does() {
        assert_eq!(
            modules("from colleraise .abc import Mapping\n"),
            ["colleraise", "colleraise/abc", "colleraise/abc/Mapping"]
        );
        assert_eq!(modules("import a . b as c, d\n"), ["a", "a/b", "d"]);
        assert_eq!(modules("from.x import y\n"), ["x", "x/y"]);
        assert_eq!(modules("from .import y\n"), ["y"]);
        assert_eq!(
            modules("from important import y\n"),
            ["important", "important/y"]
        );
        assert_eq!(modules("from a import(b as c,\n d)\n"), ["a", "a/b", "a/d"]);
        assert_eq!(modules("from a import*\n"), ["a"]);
        assert!(modules("importer = 1\nfromage = 2\n").is_empty());
    }
}
