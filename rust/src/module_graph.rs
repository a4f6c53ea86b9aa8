//! The modules of `rust/src` import one another without a circle: every module can be
//! read knowing only the ones below it. This test reads the source tree, takes each
//! file as a module, and draws an edge wherever a module names another by a path:
//! `crate::…`, `super::…`, `self::…`, or a child module declared in the file (use
//! trees with braces included). Comments, string literals and `#[cfg(test)]` modules
//! are left out: tests may reach anywhere. Any circle fails the test, named.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

type Module = Vec<String>;

fn name(module: &Module) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// Every `.rs` file under `dir`, as its module path and its source.
fn modules(dir: &Path, prefix: &Module, out: &mut BTreeMap<Module, String>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("the source directory is readable")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 file name")
            .to_string();
        if path.is_dir() {
            let mut inner = prefix.clone();
            inner.push(stem);
            modules(&path, &inner, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let mut module = prefix.clone();
            if stem != "mod" && stem != "lib" {
                module.push(stem);
            }
            let source = fs::read_to_string(&path).expect("a readable source file");
            out.insert(module, source);
        }
    }
}

/// The source with comments blanked and string and char literals emptied, so that
/// neither braces nor paths inside them count.
fn code_only(source: &str) -> String {
    let b: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char(&b, i) {
            // A raw string: r"…", r#"…"#, with as many hashes closing as opening.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1f}') or a lifetime ('a), which stays.
            if next == Some('\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// The code without its `#[cfg(test)]` items (inline test modules and functions).
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let open = after.find('{');
        let semi = after.find(';');
        match (open, semi) {
            // `#[cfg(test)] mod name;`: a declaration, dropped with its file kept.
            (_, Some(s)) if open.is_none_or(|o| s < o) => rest = &after[s + 1..],
            (Some(o), _) => {
                let mut depth = 0;
                let mut end = after.len();
                for (k, ch) in after[o..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = o + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            _ => rest = "",
        }
    }
    out.push_str(rest);
    out
}

/// The child modules a file declares (`mod x;`, `pub mod x;`).
fn children(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for statement in code.split([';', '{', '}']) {
        let words: Vec<&str> = statement.split_whitespace().collect();
        if let [.., "mod", child] = words[..] {
            found.insert(child.to_string());
        }
    }
    found
}

/// Every path a use tree or expression names, starting at `at` (just after the first
/// segment's `::`), as segments; `{a, b::c}` groups branch.
fn paths_from(chars: &[char], at: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let skip_space = |at: &mut usize| {
        while chars.get(*at).is_some_and(|c| c.is_whitespace()) {
            *at += 1;
        }
    };
    let mut path = prefix;
    loop {
        skip_space(at);
        if chars.get(*at) == Some(&'{') {
            *at += 1;
            loop {
                skip_space(at);
                match chars.get(*at) {
                    Some('}') => {
                        *at += 1;
                        return;
                    }
                    Some(',') => *at += 1,
                    None => return,
                    _ => {
                        let before = *at;
                        paths_from(chars, at, path.clone(), out);
                        if *at == before {
                            *at += 1;
                        }
                    }
                }
            }
        }
        let start = *at;
        while chars
            .get(*at)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        {
            *at += 1;
        }
        if *at == start {
            out.push(path);
            return;
        }
        path.push(chars[start..*at].iter().collect());
        skip_space(at);
        if chars.get(*at) == Some(&':') && chars.get(*at + 1) == Some(&':') {
            *at += 2;
        } else {
            // `as name` and whatever follows the path end it.
            out.push(path);
            return;
        }
    }
}

/// The modules `module` names, resolved against the modules that exist.
fn edges(module: &Module, code: &str, all: &BTreeMap<Module, String>) -> BTreeSet<Module> {
    let own_children = children(code);
    let chars: Vec<char> = code.chars().collect();
    let mut named: Vec<Vec<String>> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if !starts_word || !(chars[i].is_alphabetic() || chars[i] == '_') {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let preceded_by_path = start >= 2 && chars[start - 1] == ':' && chars[start - 2] == ':';
        let followed_by_path = chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':');
        if preceded_by_path || !followed_by_path {
            continue;
        }
        let base: Option<Module> = match word.as_str() {
            "crate" => Some(Vec::new()),
            "self" => Some(module.clone()),
            "super" => {
                let mut base = module.clone();
                base.pop();
                // `super::super::…` climbs again.
                let mut j = i + 2;
                while chars[j..].starts_with(&['s', 'u', 'p', 'e', 'r', ':', ':']) {
                    base.pop();
                    j += 7;
                }
                i = j - 2;
                Some(base)
            }
            w if own_children.contains(w) => Some(module.clone()),
            _ => None,
        };
        let Some(base) = base else { continue };
        let mut at = i + 2;
        if base.len() == module.len() && word != "self" && word != "crate" && word != "super" {
            at = start; // a child module's name is the path's first segment
        }
        paths_from(&chars, &mut at, base, &mut named);
        i = at.max(i + 1);
    }
    let mut found = BTreeSet::new();
    for path in named {
        let path: Vec<String> = path.into_iter().filter(|s| s != "self").collect();
        let target = (0..=path.len())
            .rev()
            .map(|k| path[..k].to_vec())
            .find(|candidate| all.contains_key(candidate));
        if let Some(target) = target {
            if &target != module {
                found.insert(target);
            }
        }
    }
    found
}

/// A circle through `start` within its strongly connected part, as module names.
fn circle_through(
    start: &Module,
    graph: &BTreeMap<Module, BTreeSet<Module>>,
    part: &BTreeSet<Module>,
) -> Vec<String> {
    // Breadth-first from `start` back to `start`, staying inside the part.
    let mut previous: BTreeMap<Module, Module> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    while let Some(at) = queue.pop_front() {
        for next in graph.get(&at).into_iter().flatten() {
            if !part.contains(next) {
                continue;
            }
            if next == start {
                let mut circle = vec![name(start)];
                let mut cur = at.clone();
                while &cur != start {
                    circle.push(name(&cur));
                    cur = previous[&cur].clone();
                }
                circle.push(name(start));
                circle.reverse();
                return circle;
            }
            if !previous.contains_key(next) {
                previous.insert(next.clone(), at.clone());
                queue.push_back(next.clone());
            }
        }
    }
    vec![name(start)]
}

/// The strongly connected parts of more than one module (Tarjan).
fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    struct State<'g> {
        graph: &'g BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on_stack: BTreeSet<Module>,
        parts: Vec<BTreeSet<Module>>,
    }
    fn visit(v: &Module, s: &mut State<'_>) {
        let n = s.index.len();
        s.index.insert(v.clone(), n);
        s.low.insert(v.clone(), n);
        s.stack.push(v.clone());
        s.on_stack.insert(v.clone());
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v.clone(), low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v.clone(), low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut part = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(&w);
                let done = &w == v;
                part.insert(w);
                if done {
                    break;
                }
            }
            if part.len() > 1 {
                s.parts.push(part);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        parts: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(v, &mut state);
        }
    }
    state.parts
}

fn graph_of(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut all = BTreeMap::new();
    modules(src, &Vec::new(), &mut all);
    all.iter()
        .map(|(module, source)| {
            let code = without_tests(&code_only(source));
            (module.clone(), edges(module, &code, &all))
        })
        .collect()
}

#[test]
fn the_modules_form_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph_of(&src);
    assert!(graph.len() > 30, "only {} modules found", graph.len());
    // The graph is read, not assumed: known edges are there.
    let kinds: Module = vec!["kinds".into()];
    let spec_bundle: Module = vec!["kinds".into(), "spec_bundle".into()];
    assert!(graph[&kinds].contains(&spec_bundle));
    assert!(graph[&vec!["validator".to_string()]].contains(&vec!["files".to_string()]));
    let parts = circles(&graph);
    let named: Vec<String> = parts
        .iter()
        .map(|part| {
            let start = part.iter().next().expect("a non-empty part");
            format!(
                "{} (a circle among {} modules: {})",
                circle_through(start, &graph, part).join(" -> "),
                part.len(),
                part.iter().map(name).collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    assert!(
        named.is_empty(),
        "import circles in rust/src:\n{}",
        named.join("\n")
    );
}

#[test]
fn a_circle_is_found_and_named() {
    let code = |s: &str| without_tests(&code_only(s));
    let mut all: BTreeMap<Module, String> = BTreeMap::new();
    all.insert(vec![], "mod a; mod b;".into());
    all.insert(vec!["a".into()], "use crate::b::{x, y as z};".into());
    all.insert(
        vec!["b".into()],
        "// crate::nothing\nfn f() { let s = \"crate::a\"; super::a::g(); }".into(),
    );
    let graph: BTreeMap<Module, BTreeSet<Module>> = all
        .iter()
        .map(|(m, s)| (m.clone(), edges(m, &code(s), &all)))
        .collect();
    let parts = circles(&graph);
    assert_eq!(parts.len(), 1);
    let start = parts[0].iter().next().unwrap();
    assert_eq!(circle_through(start, &graph, &parts[0]), ["a", "b", "a"]);
    assert_eq!(
        code("x #[cfg(test)]\nmod tests { fn f() { '{'; } } y #[cfg(test)] mod m; z"),
        "x  y  z"
    );
}
