//! The sibling modules a Python helper imports, so the staged set can be proven
//! import-closed. A light statement scanner, not a Python parser: it reads `import`
//! and `from ... import` statements (with parentheses and backslash continuations,
//! after `;` and after a compound statement's `:`) outside comments and strings,
//! streaming, so a helper of any size is read whole in bounded memory.

/// Module names that resolve next to the helper: `import x`, `from x import y`,
/// `from . import z`, `from .m import y`. Deduplicated, in order of appearance.
pub fn sibling_imports(source: &str) -> Vec<String> {
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
    lexer: Lexer,
    modules: Vec<String>,
}

impl ImportScanner {
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while let Some(pos) = memchr::memchr(b'\n', chunk) {
            self.pending.extend_from_slice(&chunk[..pos]);
            self.line();
            chunk = &chunk[pos + 1..];
        }
        self.pending.extend_from_slice(chunk);
        if self.pending.len() >= MAX_PIECE {
            self.line();
        }
    }

    pub fn finish(mut self) -> Vec<String> {
        if !self.pending.is_empty() {
            self.line();
        }
        self.lexer.end_statement(&mut self.modules);
        self.modules
    }

    fn line(&mut self) {
        let text = String::from_utf8_lossy(&self.pending);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        self.lexer.line(text, &mut self.modules);
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

/// Python's tokens as far as statements go: string literals (one-line and triple
/// quoted, with escapes) are blanked, comments dropped, brackets counted for implicit
/// line joining, backslashes join lines. A `(` or `#` inside a string changes nothing.
#[derive(Default)]
struct Lexer {
    /// The quote character of a triple-quoted string still open, across lines.
    in_triple: Option<char>,
    depth: i64,
    /// The logical statement so far, strings blanked to `""`.
    current: String,
}

impl Lexer {
    fn line(&mut self, raw: &str, modules: &mut Vec<String>) {
        let mut chars = raw.chars().peekable();
        let mut code = String::new();
        while let Some(c) = chars.next() {
            if let Some(q) = self.in_triple {
                if c == '\\' {
                    chars.next();
                } else if c == q && chars.next_if_eq(&q).is_some() && chars.next_if_eq(&q).is_some()
                {
                    self.in_triple = None;
                    code.push_str("\"\"");
                }
                continue;
            }
            match c {
                '#' => break,
                '"' | '\'' => {
                    if chars.next_if_eq(&c).is_some() {
                        if chars.next_if_eq(&c).is_some() {
                            self.in_triple = Some(c);
                        } else {
                            code.push_str("\"\"");
                        }
                        continue;
                    }
                    // A one-line string: to its closing quote or the end of the line.
                    while let Some(d) = chars.next() {
                        if d == '\\' {
                            chars.next();
                        } else if d == c {
                            break;
                        }
                    }
                    code.push_str("\"\"");
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
        let trimmed = code.trim_end();
        let continued = self.in_triple.is_some() || trimmed.ends_with('\\');
        if self.current.len() < MAX_PIECE {
            self.current.push(' ');
            self.current.push_str(trimmed.trim_end_matches('\\'));
        }
        if self.depth <= 0 && !continued {
            self.end_statement(modules);
        }
    }

    /// Simple statements follow `;` or a compound statement's `:` (`if x: import y`).
    fn end_statement(&mut self, modules: &mut Vec<String>) {
        self.depth = 0;
        let statement = std::mem::take(&mut self.current);
        let mut level = 0i64;
        let mut start = 0;
        for (i, c) in statement.char_indices() {
            match c {
                '(' | '[' | '{' => level += 1,
                ')' | ']' | '}' => level -= 1,
                ';' | ':' if level <= 0 => {
                    import_names(statement[start..i].trim(), modules);
                    start = i + 1;
                }
                _ => {}
            }
        }
        import_names(statement[start..].trim(), modules);
    }
}

/// The sibling candidates one simple statement names, if it is an import.
fn import_names(statement: &str, out: &mut Vec<String>) {
    let words: Vec<&str> = statement.split_whitespace().collect();
    match words.first() {
        Some(&"import") => {
            for item in statement["import".len()..].split(',') {
                let module = item
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .trim_matches(|c| c == '(' || c == ')');
                push(out, module.split('.').next().unwrap_or(""));
            }
        }
        Some(&"from") if words.len() >= 3 => {
            let module = words[1];
            let level = module.bytes().take_while(|c| *c == b'.').count();
            let rest = &module[level..];
            match (level, rest.is_empty()) {
                (0, _) | (1, false) => push(out, rest.split('.').next().unwrap_or("")),
                (1, true) => {
                    // `from . import a, b as c`: each name may be a sibling module.
                    if let Some(pos) = statement.find(" import ") {
                        let names = statement[pos + 8..]
                            .trim_matches(|c: char| c == '(' || c == ')' || c.is_whitespace());
                        for item in names.split(',') {
                            push(
                                out,
                                item.split_whitespace()
                                    .next()
                                    .unwrap_or("")
                                    .trim_matches(|c| c == '(' || c == ')'),
                            );
                        }
                    }
                }
                _ => {} // `from ..x`: the parent package, not a sibling
            }
        }
        _ => {}
    }
}

fn push(out: &mut Vec<String>, name: &str) {
    let ok = !name.is_empty()
        && name != "*"
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok && !out.iter().any(|n| n == name) {
        out.push(name.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_import_forms() {
        let src = "import os, helper_a as a\nfrom helper_b.sub import x\nfrom . import helper_c, helper_d as d\nfrom .helper_e import y\nfrom .. import parent\nfrom pkg import (\n    one,\n    two,\n)\n# import commented\n\"\"\"\nimport in_docstring\n\"\"\"\nx = 1; import helper_f\n";
        assert_eq!(
            sibling_imports(src),
            ["os", "helper_a", "helper_b", "helper_c", "helper_d", "helper_e", "pkg", "helper_f"]
        );
    }

    #[test]
    fn strings_and_compound_statements_hide_nothing() {
        let src = "x = \"(\"\nimport helper_a\ns = '# not a comment'; import helper_b\nif True: import helper_c\ntry: from helper_d import y\nexcept ImportError: pass\nt = '''\nimport in_string\n'''\nu = \"\"\"one line\"\"\"; import helper_e\nd = {'a': 1}\n";
        assert_eq!(
            sibling_imports(src),
            ["helper_a", "helper_b", "helper_c", "helper_d", "helper_e"]
        );
    }

    #[test]
    fn streams_in_pieces_of_any_size() {
        let src =
            "import helper_a\nx = 1\nfrom . import (\n  helper_b,\n  helper_c)\nimport helper_d";
        for size in [1, 2, 3, 7, 64] {
            let mut scanner = ImportScanner::default();
            for piece in src.as_bytes().chunks(size) {
                scanner.feed(piece);
            }
            assert_eq!(
                scanner.finish(),
                ["helper_a", "helper_b", "helper_c", "helper_d"]
            );
        }
        // A helper larger than any buffer is still read to its end.
        let mut big = "x = 1\n".repeat(400_000);
        big.push_str("import helper_z\n");
        assert_eq!(sibling_imports(&big), ["helper_z"]);
    }
}
