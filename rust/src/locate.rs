//! Where a violation sits in its source: the line and column of the value a JSON
//! Pointer names, or of its key, in JSON or YAML text, so that editors, terminals and
//! CI annotations can jump to it.
//!
//! Only failing documents are located, after they were checked, so a passing one
//! costs nothing. One pass serves every pointer of a report: JSON is scanned without
//! building anything, skipping whole subtrees no pointer leads into; YAML is walked
//! event by event with the parser's own positions. A pointer the source does not hold
//! (a missing field, an index past the end) is placed at the deepest node it does
//! hold, so every violation gets a place. Lines and columns count from 1; columns
//! count characters (Unicode scalar values), not bytes.
//!
//! Imports nothing from the rest of the crate: the text and the pointers are all it
//! needs.

use std::collections::HashSet;

use saphyr_parser::{Event, Parser};

/// A place in the source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub line: u32,
    pub column: u32,
}

const START: Location = Location { line: 1, column: 1 };

/// One pointer to place; `key` asks for the member's key rather than its value
/// (rules about keys: unknown fields, dotted keys, duplicate keys).
#[derive(Clone, Copy, Debug)]
pub struct Target<'p> {
    pub pointer: &'p str,
    pub key: bool,
}

/// The location of every target, in order. Text that is neither JSON nor YAML the
/// parsers accept places everything at 1:1.
pub fn locate(source: &[u8], targets: &[Target<'_>]) -> Vec<Location> {
    let paths: Vec<Vec<String>> = targets.iter().map(|t| tokens(t.pointer)).collect();
    let mut found = Found::new(&paths, targets);
    let text = source.strip_prefix(b"\xef\xbb\xbf").unwrap_or(source);
    let first = text.iter().copied().find(|b| !b.is_ascii_whitespace());
    if first == Some(b'{') || first == Some(b'[') {
        let mut scanner = JsonScanner {
            text,
            at: 0,
            found: &mut found,
            path: Vec::new(),
            place: Place::default(),
        };
        scanner.value(None);
    } else if let Ok(text) = std::str::from_utf8(text) {
        walk_yaml(text, &mut found);
    }
    found.into_locations()
}

/// The tokens of a JSON Pointer (`/a/b~1c/0` → `a`, `b/c`, `0`).
fn tokens(pointer: &str) -> Vec<String> {
    if pointer.is_empty() {
        return Vec::new();
    }
    pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// The best place found so far for each target: how deep it matched, and where.
struct Found<'a> {
    paths: &'a [Vec<String>],
    keys: Vec<bool>,
    best: Vec<(usize, Location)>,
    /// Every prefix of every target's path: a subtree outside these is skipped.
    prefixes: HashSet<Vec<String>>,
}

impl<'a> Found<'a> {
    fn new(paths: &'a [Vec<String>], targets: &[Target<'_>]) -> Self {
        let mut prefixes = HashSet::new();
        for path in paths {
            for n in 0..=path.len() {
                prefixes.insert(path[..n].to_vec());
            }
        }
        Found {
            paths,
            keys: targets.iter().map(|t| t.key).collect(),
            best: vec![(0, START); paths.len()],
            prefixes,
        }
    }

    fn leads_somewhere(&self, path: &[String]) -> bool {
        self.prefixes.contains(path)
    }

    /// A node at `path` starts at `value`; its key (for a member) at `key`.
    fn node(&mut self, path: &[String], value: Location, key: Option<Location>) {
        let depth = path.len();
        for (i, target) in self.paths.iter().enumerate() {
            if depth <= target.len() && target[..depth] == *path && depth >= self.best[i].0 {
                let exact = depth == target.len();
                let place = if exact && self.keys[i] {
                    key.unwrap_or(value)
                } else {
                    value
                };
                self.best[i] = (depth, place);
            }
        }
    }

    fn into_locations(self) -> Vec<Location> {
        self.best.into_iter().map(|(_, l)| l).collect()
    }
}

// ---- JSON

struct JsonScanner<'t, 'f, 'a> {
    text: &'t [u8],
    at: usize,
    found: &'f mut Found<'a>,
    path: Vec<String>,
    place: Place,
}

/// The line and column of the last offset placed. Places are asked for in text order
/// (a key before its value, a value before the next member), so each byte is counted
/// once however many violations a document has: a megabyte with a thousand
/// violations costs one pass, not a thousand.
#[derive(Clone, Copy)]
struct Place {
    offset: usize,
    line: usize,
    column: usize,
}

impl Default for Place {
    fn default() -> Self {
        Place {
            offset: 0,
            line: 1,
            column: 1,
        }
    }
}

impl JsonScanner<'_, '_, '_> {
    fn location(&mut self, offset: usize) -> Location {
        let offset = offset.min(self.text.len());
        if offset < self.place.offset {
            self.place = Place::default(); // never in text order; counted again from the start
        }
        let mut place = self.place;
        for &b in &self.text[place.offset..offset] {
            if b == b'\n' {
                place.line += 1;
                place.column = 1;
            } else if b & 0xC0 != 0x80 {
                place.column += 1; // a character starts here (not a UTF-8 continuation byte)
            }
        }
        place.offset = offset;
        self.place = place;
        Location {
            line: u32::try_from(place.line).unwrap_or(u32::MAX),
            column: u32::try_from(place.column).unwrap_or(u32::MAX),
        }
    }

    fn space(&mut self) {
        while self.at < self.text.len() && self.text[self.at].is_ascii_whitespace() {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    /// The value at the cursor, whose key (if a member) began at `key`. Iterative
    /// over containers the targets do not lead into; recursive only along target
    /// paths, whose depth the pointers bound.
    fn value(&mut self, key: Option<usize>) {
        self.space();
        let start = self.at;
        let interesting = self.found.leads_somewhere(&self.path);
        if interesting {
            let key = key.map(|k| self.location(k)); // the key comes first in the text
            let value = self.location(start);
            let path = self.path.clone();
            self.found.node(&path, value, key);
        }
        match self.peek() {
            Some(b'{') if interesting => self.object(),
            Some(b'[') if interesting => self.array(),
            Some(b'{' | b'[') => self.skip_container(),
            Some(b'"') => {
                self.string();
            }
            Some(_) => {
                while self.at < self.text.len()
                    && !matches!(self.text[self.at], b',' | b'}' | b']')
                    && !self.text[self.at].is_ascii_whitespace()
                {
                    self.at += 1;
                }
            }
            None => {}
        }
    }

    fn object(&mut self) {
        self.at += 1;
        loop {
            self.space();
            match self.peek() {
                Some(b'}') => {
                    self.at += 1;
                    return;
                }
                Some(b',') => self.at += 1,
                Some(b'"') => {
                    let key_at = self.at;
                    let name = self.string();
                    self.space();
                    if self.peek() == Some(b':') {
                        self.at += 1;
                    }
                    self.path.push(name);
                    self.value(Some(key_at));
                    self.path.pop();
                }
                _ => return, // not JSON after all: what was found stands
            }
        }
    }

    fn array(&mut self) {
        self.at += 1;
        let mut index = 0usize;
        loop {
            self.space();
            match self.peek() {
                Some(b']') => {
                    self.at += 1;
                    return;
                }
                Some(b',') => self.at += 1,
                Some(_) => {
                    self.path.push(index.to_string());
                    let before = self.at;
                    self.value(None);
                    self.path.pop();
                    index += 1;
                    if self.at == before {
                        return;
                    }
                }
                None => return,
            }
        }
    }

    /// Skips a whole object or array without looking inside it, strings included.
    fn skip_container(&mut self) {
        let mut depth = 0usize;
        while self.at < self.text.len() {
            match self.text[self.at] {
                b'"' => {
                    self.string_end();
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        self.at += 1;
                        return;
                    }
                }
                _ => {}
            }
            self.at += 1;
        }
    }

    fn string_end(&mut self) {
        self.at += 1;
        while self.at < self.text.len() {
            match self.text[self.at] {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return;
                }
                _ => self.at += 1,
            }
        }
    }

    /// The string at the cursor, unescaped.
    fn string(&mut self) -> String {
        let start = self.at;
        self.string_end();
        let raw = &self.text[start..self.at.min(self.text.len())];
        serde_json::from_slice::<String>(raw).unwrap_or_else(|_| {
            String::from_utf8_lossy(raw.get(1..raw.len().saturating_sub(1)).unwrap_or_default())
                .into_owned()
        })
    }
}

// ---- YAML

struct YamlFrame {
    is_map: bool,
    expecting_key: bool,
    count: usize,
    /// The key whose value comes next, and where it began.
    key: Option<(String, Location)>,
}

fn walk_yaml(text: &str, found: &mut Found<'_>) {
    let mut stack: Vec<YamlFrame> = Vec::new();
    let mut path: Vec<String> = Vec::new();
    // The text of each anchored scalar, so that an alias used as a key is placed under
    // the name it stands for (anchor id 0 means no anchor).
    let mut anchored: std::collections::HashMap<usize, String> = std::collections::HashMap::new();
    let mut parser = Parser::new_from_str(text);
    // The parser places what it finds at the end of the text (the empty value after
    // `---` or `a:`) past it, on a line of its own: such a place is the text's end.
    let end = end_of(text);
    while let Some(Ok((event, span))) = parser.next_event() {
        let here = Location {
            line: u32::try_from(span.start.line()).unwrap_or(u32::MAX),
            column: u32::try_from(span.start.col() + 1).unwrap_or(u32::MAX),
        };
        let here = if (here.line, here.column) > (end.line, end.column) {
            end
        } else {
            here
        };
        match event {
            Event::Scalar(value, _, anchor, _) => {
                if anchor != 0 {
                    anchored.insert(anchor, value.to_string());
                }
                if let Some(frame) = stack.last_mut() {
                    if frame.is_map && frame.expecting_key {
                        frame.key = Some((value.to_string(), here));
                        frame.expecting_key = false;
                        continue;
                    }
                }
                enter(&mut stack, &mut path, found, here);
                leave(&mut stack, &mut path);
            }
            Event::Alias(anchor) => {
                if let Some(frame) = stack.last_mut() {
                    if frame.is_map && frame.expecting_key {
                        let name = anchored.get(&anchor).cloned().unwrap_or_default();
                        frame.key = Some((name, here));
                        frame.expecting_key = false;
                        continue;
                    }
                }
                enter(&mut stack, &mut path, found, here);
                leave(&mut stack, &mut path);
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let is_map = matches!(event, Event::MappingStart(..));
                if stack.last().is_some_and(|f| f.is_map && f.expecting_key) {
                    // A collection as a key: refused by the check; nothing to place under it.
                    return;
                }
                enter(&mut stack, &mut path, found, here);
                stack.push(YamlFrame {
                    is_map,
                    expecting_key: is_map,
                    count: 0,
                    key: None,
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
                leave(&mut stack, &mut path);
            }
            // One document is read (a second is refused): what follows it is no place
            // of the document's.
            Event::DocumentEnd => return,
            _ => {}
        }
    }
}

/// Where the text ends: after its last character, lines ended as YAML ends them (`\n`,
/// `\r\n` or a lone `\r`).
fn end_of(text: &str) -> Location {
    let (mut line, mut column) = (1usize, 1usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' || (c == '\r' && chars.peek() != Some(&'\n')) {
            (line, column) = (line + 1, 1);
        } else if c != '\r' {
            column += 1;
        }
    }
    Location {
        line: u32::try_from(line).unwrap_or(u32::MAX),
        column: u32::try_from(column).unwrap_or(u32::MAX),
    }
}

/// A node begins: its path is pushed and offered to the targets.
fn enter(stack: &mut [YamlFrame], path: &mut Vec<String>, found: &mut Found<'_>, here: Location) {
    let mut key_at = None;
    if let Some(frame) = stack.last_mut() {
        if frame.is_map {
            let (name, at) = frame.key.take().unwrap_or_default_key();
            key_at = Some(at);
            path.push(name);
        } else {
            path.push(frame.count.to_string());
        }
    }
    if found.leads_somewhere(path) {
        found.node(path, here, key_at);
    }
}

/// A node ended: its path is popped and its parent moves on.
fn leave(stack: &mut [YamlFrame], path: &mut Vec<String>) {
    if let Some(frame) = stack.last_mut() {
        path.pop();
        frame.count += 1;
        if frame.is_map {
            frame.expecting_key = true;
        }
    }
}

trait KeyOrDefault {
    fn unwrap_or_default_key(self) -> (String, Location);
}

impl KeyOrDefault for Option<(String, Location)> {
    fn unwrap_or_default_key(self) -> (String, Location) {
        self.unwrap_or((String::new(), START))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(source: &str, pointer: &str, key: bool) -> (u32, u32) {
        let l = locate(source.as_bytes(), &[Target { pointer, key }])[0];
        (l.line, l.column)
    }

    const JSON: &str = "{\n  \"spec\": {\n    \"a.b\": 1,\n    \"list\": [10, {\"x\": \"é\", \"y\": true}]\n  },\n  \"s/t\": null\n}\n";

    #[test]
    fn json_values_keys_and_escaped_tokens() {
        assert_eq!(at(JSON, "", false), (1, 1));
        assert_eq!(at(JSON, "/spec", false), (2, 11));
        assert_eq!(at(JSON, "/spec/a.b", false), (3, 12));
        assert_eq!(at(JSON, "/spec/a.b", true), (3, 5));
        assert_eq!(at(JSON, "/spec/list/1/y", false), (4, 34)); // after a two-byte é
        assert_eq!(at(JSON, "/s~1t", true), (6, 3));
    }

    #[test]
    fn a_missing_node_is_placed_at_its_deepest_ancestor() {
        assert_eq!(at(JSON, "/spec/list/7/z", false), (4, 13));
        assert_eq!(at(JSON, "/spec/missing", false), (2, 11));
        assert_eq!(at(JSON, "/nothing", false), (1, 1));
    }

    #[test]
    fn every_target_in_one_pass() {
        let targets = [
            Target {
                pointer: "/spec/list/0",
                key: false,
            },
            Target {
                pointer: "/spec/a.b",
                key: true,
            },
        ];
        let found = locate(JSON.as_bytes(), &targets);
        assert_eq!(
            found,
            vec![
                Location {
                    line: 4,
                    column: 14
                },
                Location { line: 3, column: 5 }
            ]
        );
    }

    #[test]
    fn many_targets_at_once_are_placed_as_each_alone() {
        let pointers = [
            "/s~1t",
            "/spec/list/1/y",
            "",
            "/spec/a.b",
            "/spec",
            "/spec/list/0",
            "/nothing",
        ];
        let targets: Vec<Target<'_>> = pointers
            .iter()
            .enumerate()
            .map(|(i, p)| Target {
                pointer: p,
                key: i % 2 == 0,
            })
            .collect();
        let together = locate(JSON.as_bytes(), &targets);
        for (t, place) in targets.iter().zip(together) {
            assert_eq!(locate(JSON.as_bytes(), &[*t])[0], place, "{}", t.pointer);
        }
    }

    const YAML: &str = "apiVersion: forge/v2\nspec:\n  a.b: 1\n  list:\n    - 10\n    - x: é\n      y: true\nname: &n job\nalias: *n\n";

    #[test]
    fn yaml_values_keys_and_sequences() {
        assert_eq!(at(YAML, "/apiVersion", false), (1, 13));
        assert_eq!(at(YAML, "/spec/a.b", true), (3, 3));
        assert_eq!(at(YAML, "/spec/a.b", false), (3, 8));
        assert_eq!(at(YAML, "/spec/list/0", false), (5, 7));
        assert_eq!(at(YAML, "/spec/list/1/y", false), (7, 10));
        assert_eq!(at(YAML, "/alias", false), (9, 8));
        assert_eq!(at(YAML, "/spec/list/1/missing", false), (6, 7));
    }

    #[test]
    fn an_alias_used_as_a_key_is_placed_under_the_name_it_stands_for() {
        let yaml = "command: &c run\nspec:\n  x: 1\n*c : here\n";
        assert_eq!(at(yaml, "/run", true), (4, 1));
        assert_eq!(at(yaml, "/run", false), (4, 6));
    }

    #[test]
    fn text_no_parser_reads_is_placed_at_the_start() {
        assert_eq!(at("{\"a\": ", "/a/b", false), (1, 7));
        assert_eq!(at("\u{0}\u{1}", "/a", false), (1, 1));
    }

    /// Found by fuzzing (`rust/fuzz`, target `documents`): the refusal of a stream of
    /// two documents was placed in the second one, past the end of the text.
    #[test]
    fn places_nothing_past_the_first_yaml_document() {
        let at = |text: &str, pointer: &str| {
            locate(
                text.as_bytes(),
                &[Target {
                    pointer,
                    key: false,
                }],
            )[0]
        };
        assert_eq!(at("x1F 1F !\n---", ""), Location { line: 1, column: 1 });
        assert_eq!(at("a: 1\n---\nb: 2\n", ""), Location { line: 1, column: 1 });
        assert_eq!(
            at("a: 1\n---\nb: 2\n", "/a"),
            Location { line: 1, column: 4 }
        );
    }

    /// Found by fuzzing (`rust/fuzz`, target `locate`): the empty value the parser finds
    /// at the end of the text (`---`, `a:`) was placed on a line past it.
    #[test]
    fn places_nothing_past_the_end_of_the_text() {
        for (text, pointer) in [
            ("---", ""),
            ("a:", "/a"),
            ("a:\r", "/a"),
            ("- ", "/0"),
            ("a: [", "/a/0"),
        ] {
            let at = locate(
                text.as_bytes(),
                &[Target {
                    pointer,
                    key: false,
                }],
            )[0];
            let end = end_of(text);
            assert!(
                (at.line, at.column) <= (end.line, end.column),
                "{text:?} {pointer:?}: {at:?} past {end:?}"
            );
        }
        assert_eq!(end_of("---"), Location { line: 1, column: 4 });
        assert_eq!(end_of("a\r\nb\rc\n"), Location { line: 4, column: 1 });
    }
}
