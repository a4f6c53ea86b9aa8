//! The sibling modules a Python helper imports, so the staged set can be proven
//! import-closed. A light statement scanner, not a Python parser: it reads `import`
//! and `from ... import` statements (with parentheses and backslash continuations)
//! outside comments and triple-quoted strings, which is what helpers use.

/// Module names that resolve next to the helper: `import x`, `from x import y`,
/// `from . import z`, `from .m import y`. Deduplicated, in order of appearance.
pub fn sibling_imports(source: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for statement in statements(source) {
        let words: Vec<&str> = statement.split_whitespace().collect();
        match words.first() {
            Some(&"import") => {
                for item in statement["import".len()..].split(',') {
                    let module = item.split_whitespace().next().unwrap_or("");
                    push(&mut out, module.split('.').next().unwrap_or(""));
                }
            }
            Some(&"from") if words.len() >= 3 => {
                let module = words[1];
                let level = module.bytes().take_while(|c| *c == b'.').count();
                let rest = &module[level..];
                match (level, rest.is_empty()) {
                    (0, _) => push(&mut out, rest.split('.').next().unwrap_or("")),
                    (1, false) => push(&mut out, rest.split('.').next().unwrap_or("")),
                    (1, true) => {
                        // `from . import a, b as c`: each name may be a sibling module.
                        if let Some(pos) = statement.find(" import ") {
                            let names = statement[pos + 8..]
                                .trim_matches(|c: char| c == '(' || c == ')' || c.is_whitespace());
                            for item in names.split(',') {
                                push(
                                    &mut out,
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
    out
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

/// Logical statements that start with `import` or `from`, joined across continuations,
/// with comments and string contents removed.
fn statements(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut depth = 0i32;
    let mut continued = false;
    let mut in_triple: Option<&str> = None;
    for raw in source.lines() {
        let mut line = String::new();
        let mut rest = raw;
        loop {
            if let Some(q) = in_triple {
                match rest.find(q) {
                    Some(end) => {
                        rest = &rest[end + 3..];
                        in_triple = None;
                    }
                    None => break,
                }
            }
            let triple = ["\"\"\"", "'''"]
                .iter()
                .filter_map(|q| rest.find(q).map(|p| (p, *q)))
                .min();
            let hash = rest.find('#');
            match (triple, hash) {
                (Some((p, q)), h) if h.is_none_or(|h| p < h) => {
                    line.push_str(&rest[..p]);
                    rest = &rest[p + 3..];
                    in_triple = Some(q);
                }
                (_, Some(h)) => {
                    line.push_str(&rest[..h]);
                    break;
                }
                _ => {
                    line.push_str(rest);
                    break;
                }
            }
        }
        let starts_statement = depth == 0 && !continued;
        if starts_statement {
            current.clear();
        }
        current.push(' ');
        current.push_str(line.trim_end_matches('\\'));
        depth += line.matches('(').count() as i32 - line.matches(')').count() as i32;
        continued = line.trim_end().ends_with('\\');
        if depth <= 0 && !continued {
            depth = 0;
            for part in current.split(';') {
                let part = part.trim();
                if part.starts_with("import ") || part.starts_with("from ") {
                    out.push(part.to_string());
                }
            }
            current.clear();
        }
    }
    out
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
}
