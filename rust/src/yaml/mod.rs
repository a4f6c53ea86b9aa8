//! YAML documents, turned into JSON text so that one parser and one walker serve both.
//!
//! Scalars are resolved with the YAML 1.2 core schema. Duplicate keys are kept (the
//! JSON walker reports them with their pointer), aliases are expanded within a size
//! budget (a "billion laughs" document is refused, not inflated), and nesting is
//! bounded while events stream in, so no input can exhaust the stack or memory.

use saphyr_parser::{Event, Parser, ScalarStyle, Tag};
use std::collections::{HashMap, HashSet};

use crate::limits::Limits;
use crate::refusal::DecodeError;

mod yaml11;

use yaml11::Reading;

struct Frame {
    is_map: bool,
    /// Inside `[...]` or `{...}`, where YAML 1.1 and 1.2 split plain scalars differently.
    flow: bool,
    count: usize,
    expecting_key: bool,
    anchor: usize,
    start: usize,
}

/// Where an anchored node sits in the output, and whether it is a string (only a
/// string may be repeated as a mapping key).
#[derive(Clone, Copy)]
struct Anchored {
    start: usize,
    end: usize,
    string: bool,
}

pub fn to_json(text: &str, limits: &Limits) -> Result<Vec<u8>, DecodeError> {
    printable(text)?;
    let budget = limits.max_bytes.saturating_mul(4).max(64 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(text.len() + 16);
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Anchored> = HashMap::new();
    let mut documents = 0usize;
    let mut parser = Parser::new_from_str(text);
    let mut cursor = Cursor::new(text);
    let mut defined: HashSet<&str> = HashSet::new();
    // Whether the last scalar was a block one (`|`, `>`), which the end of the text
    // may cut short.
    let mut last_block = false;
    // Where scalars lie (character offsets), for the tabs check; kept only when the
    // text holds a tab.
    let mut scalars: Option<Vec<Lying>> = text.contains('\t').then(Vec::new);
    // Whether a node was read yet: text before the first one is checked once.
    let mut read_a_node = false;
    // Where the event before the one at hand ended, in characters.
    let mut previous_end = 0usize;

    while let Some(event) = parser.next_event() {
        let (event, span) = event.map_err(|e| {
            // The YAML scanner bounds flow nesting itself; that is a depth limit too.
            if e.to_string().contains("recursion limit") {
                DecodeError::Depth(limits.max_depth)
            } else {
                DecodeError::Syntax(format!("not valid YAML: {e}"))
            }
        })?;
        let node = matches!(
            event,
            Event::Scalar(..)
                | Event::SequenceStart(..)
                | Event::MappingStart(..)
                | Event::Alias(..)
        );
        // Where the event before the next one ended (a block scalar's header follows it).
        let event_end = span.end.index();
        if node && !read_a_node {
            read_a_node = true;
            let rest = cursor.from(span.start.index());
            end_marker_first(&text[..text.len() - rest.len()])?;
        }
        match event {
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(DecodeError::Syntax(
                        "the YAML stream holds more than one document; send one document per check"
                            .into(),
                    ));
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                last_block = matches!(style, ScalarStyle::Literal | ScalarStyle::Folded);
                if let Some(scalars) = scalars.as_mut() {
                    scalars.push(Lying::of(
                        &mut cursor,
                        span.start.index(),
                        span.end.index(),
                        style,
                        previous_end,
                    ));
                }
                let is_key = begin(&mut stack, &mut out)?;
                let start = out.len();
                if style == ScalarStyle::Plain {
                    plain_start(value.as_ref())?;
                    if stack.last().is_some_and(|f| f.flow) {
                        flow_plain(value.as_ref())?;
                    }
                }
                let string = if is_key {
                    write_key(&mut out, value.as_ref(), style, tag.as_deref())?;
                    true
                } else {
                    write_scalar(&mut out, value.as_ref(), style, tag.as_deref())?
                };
                if anchor != 0 {
                    define(&mut defined, cursor.from(span.start.index()))?;
                    let end = out.len();
                    anchors.insert(anchor, Anchored { start, end, string });
                }
                finish(&mut stack, &mut out, is_key);
            }
            Event::SequenceStart(anchor, ref tag) | Event::MappingStart(anchor, ref tag) => {
                let is_map = matches!(event, Event::MappingStart(..));
                if let Some(tag) = tag {
                    collection_tag(tag, is_map)?;
                }
                if begin(&mut stack, &mut out)? {
                    return Err(DecodeError::Syntax(
                        "a YAML mapping key must be a string, not a collection".into(),
                    ));
                }
                if stack.len() >= limits.max_depth {
                    return Err(DecodeError::Depth(limits.max_depth));
                }
                if anchor != 0 {
                    define(&mut defined, cursor.from(span.start.index()))?;
                }
                let flow = stack.last().is_some_and(|f| f.flow)
                    || starts_flow(cursor.from(span.start.index()));
                stack.push(Frame {
                    is_map,
                    flow,
                    count: 0,
                    expecting_key: true,
                    anchor,
                    start: out.len(),
                });
                out.push(if is_map { b'{' } else { b'[' });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let frame = stack
                    .pop()
                    .ok_or_else(|| DecodeError::Syntax("unbalanced YAML collection".into()))?;
                out.push(if frame.is_map { b'}' } else { b']' });
                if frame.anchor != 0 {
                    let (start, end) = (frame.start, out.len());
                    let string = false;
                    anchors.insert(frame.anchor, Anchored { start, end, string });
                }
                finish(&mut stack, &mut out, false);
            }
            Event::Alias(id) => {
                anchor_name(cursor.from(span.start.index()), '*')?;
                let anchored = *anchors.get(&id).ok_or_else(|| {
                    DecodeError::Syntax(
                        "a YAML alias refers to an anchor that is not complete yet (a node cannot contain itself)".into(),
                    )
                })?;
                let is_key = begin(&mut stack, &mut out)?;
                if is_key && !anchored.string {
                    return Err(DecodeError::Syntax(
                        "a YAML alias used as a mapping key must name a string".into(),
                    ));
                }
                if out.len() + (anchored.end - anchored.start) > budget {
                    return Err(DecodeError::Size(format!(
                        "YAML aliases expand the document past {budget} bytes"
                    )));
                }
                out.extend_from_within(anchored.start..anchored.end);
                finish(&mut stack, &mut out, is_key);
            }
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
        }
        if out.len() > budget {
            return Err(DecodeError::Size(format!(
                "the YAML document expands past {budget} bytes"
            )));
        }
        previous_end = event_end;
    }
    if documents == 0 || out.is_empty() {
        return Err(DecodeError::Syntax("the document is empty".into()));
    }
    if let Some(scalars) = scalars {
        tabs(text, &scalars)?;
    }
    if last_block && !text.ends_with(['\n', '\r']) {
        return Err(DecodeError::Syntax(
            "the document ends inside a block scalar (| or >) without a final line break, where YAML readers disagree on its last line; end the document with a line break".into(),
        ));
    }
    Ok(out)
}

/// A comment of a YAML text, as the reader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    /// Where its `#` is (from 1; the column counts characters).
    pub line: u32,
    pub column: u32,
    /// Whether only blanks precede it on its line.
    pub alone: bool,
    /// What follows the `#`, to the end of its line.
    pub text: String,
}

/// The comments of `text`: a `#` at the start of a line or after a blank, outside every
/// scalar the parser reads (a quoted string, a block scalar's content lines, a plain
/// scalar such as `a#b`), to the end of its line. A `#` inside a string is data, not a
/// comment. Empty when the parser does not read the text as YAML: nothing it says can
/// then be trusted to be a comment.
pub fn comments(text: &str) -> Vec<Comment> {
    let mut parser = Parser::new_from_str(text);
    let mut cursor = Cursor::new(text);
    let mut scalars: Vec<Lying> = Vec::new();
    let mut previous_end = 0usize;
    while let Some(event) = parser.next_event() {
        let Ok((event, span)) = event else {
            return Vec::new();
        };
        if let Event::Scalar(_, style, ..) = event {
            // A block scalar's header line (`| # note`) may hold a comment; its
            // content lines hold none.
            scalars.push(Lying::of(
                &mut cursor,
                span.start.index(),
                span.end.index(),
                style,
                previous_end,
            ));
        }
        previous_end = span.end.index();
    }
    let mut found = Vec::new();
    let mut next = 0; // the first scalar that does not end before the character at hand
    let (mut line, mut line_start) = (1u32, 0usize);
    let mut blank = true; // only blanks so far on this line
    let mut previous = '\n';
    let mut chars = text.chars().enumerate().peekable();
    while let Some((at, c)) = chars.next() {
        while next < scalars.len() && scalars[next].end <= at {
            next += 1;
        }
        let inside = scalars.get(next).is_some_and(|s| {
            let from = match s.style {
                ScalarStyle::Literal | ScalarStyle::Folded => s.content,
                _ => s.start,
            };
            from <= at && at < s.end
        });
        match c {
            '\n' | '\r' => {
                if !(c == '\r' && chars.peek().is_some_and(|&(_, n)| n == '\n')) {
                    (line, line_start, blank) = (line + 1, at + 1, true);
                }
            }
            '#' if !inside && matches!(previous, ' ' | '\t' | '\n' | '\r') => {
                let mut body = String::new();
                while let Some((_, n)) = chars.next_if(|&(_, n)| n != '\n' && n != '\r') {
                    body.push(n);
                }
                found.push(Comment {
                    line,
                    column: u32::try_from(at - line_start + 1).unwrap_or(u32::MAX),
                    alone: blank,
                    text: body,
                });
                previous = '#';
                continue;
            }
            ' ' | '\t' => {}
            _ => blank = false,
        }
        previous = c;
    }
    found
}

/// A document end marker (`...`) before the document's first node: PyYAML refuses the
/// stream (it expects the node), YAML 1.2 readers skip the marker and read what follows.
fn end_marker_first(before: &str) -> Result<(), DecodeError> {
    let marker = before.split(['\n', '\r']).any(|line| {
        line.strip_prefix("...")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    });
    if marker {
        return Err(DecodeError::Syntax(
            "the YAML stream holds a document end marker (...) before the document's first value, where YAML 1.1 readers such as PyYAML expect the value and refuse the stream; remove the marker".into(),
        ));
    }
    Ok(())
}

/// Where a scalar lies in the text, in characters (`end` exclusive), and how it is written.
struct Lying {
    start: usize,
    end: usize,
    style: ScalarStyle,
    /// Where a block scalar's content lines start, past its header line.
    content: usize,
}

impl Lying {
    /// The scalar whose event spans from `start` to `span_end` (in characters), the
    /// event before it ending at `previous_end`.
    fn of(
        cursor: &mut Cursor<'_>,
        start: usize,
        span_end: usize,
        style: ScalarStyle,
        previous_end: usize,
    ) -> Self {
        // A quoted scalar's span runs on over the blanks after its closing quote: it
        // ends at the quote.
        let end = quoted_len(cursor.from(start), style).map_or(span_end, |n| start + n);
        // A block scalar's content starts on the line after its header, which follows
        // the previous event (its span may start at the content, at its anchor, or past
        // the end when it has none).
        let content = match style {
            ScalarStyle::Literal | ScalarStyle::Folded => {
                previous_end + block_header_len(cursor.from(previous_end))
            }
            _ => start,
        };
        Lying {
            start,
            end,
            style,
            content,
        }
    }
}

/// The characters from the end of the event before a block scalar through the end of
/// the block scalar's header line: up to its indicator (`|` or `>`, comments skipped),
/// then to the line break that ends that line, included.
fn block_header_len(from: &str) -> usize {
    let mut chars = from.chars().enumerate().peekable();
    let mut previous = ' ';
    let mut indicator = false;
    while let Some((i, c)) = chars.next() {
        match c {
            '\n' | '\r' if indicator => {
                let crlf = c == '\r' && chars.next_if(|&(_, n)| n == '\n').is_some();
                return i + 1 + usize::from(crlf);
            }
            '#' if matches!(previous, ' ' | '\t' | '\n' | '\r') => {
                // A comment, to the end of its line.
                while chars.next_if(|&(_, n)| n != '\n' && n != '\r').is_some() {}
            }
            '|' | '>' => indicator = true,
            _ => {}
        }
        previous = c;
    }
    from.chars().count()
}

/// YAML 1.2 allows tabs as separation space between tokens; YAML 1.1 readers such as
/// PyYAML refuse a tab anywhere but inside a quoted scalar, in the content lines of a
/// block scalar (`|`, `>`) and in a comment (`a:\tb`, `a: b\t`, `- a\t` are errors to
/// PyYAML, data to jobgate's parser). A tab anywhere else is refused.
fn tabs(text: &str, scalars: &[Lying]) -> Result<(), DecodeError> {
    let mut next = 0; // the first scalar that does not end before the character at hand
    let (mut line, mut line_start) = (1usize, 0usize); // in characters
    let mut comment = false; // a `#` opened a comment on this line
    let mut previous = '\n';
    let mut chars = text.chars().enumerate().peekable();
    while let Some((at, c)) = chars.next() {
        while next < scalars.len() && scalars[next].end <= at {
            next += 1;
        }
        let inside = scalars.get(next).filter(|s| s.start <= at && at < s.end);
        match c {
            // `\r\n` and a lone `\r` end a line as `\n` does.
            '\n' | '\r' if !(c == '\r' && chars.peek().is_some_and(|&(_, n)| n == '\n')) => {
                (line, line_start) = (line + 1, at + 1);
                comment = false;
            }
            '#' if inside.is_none() && matches!(previous, ' ' | '\t' | '\n' | '\r') => {
                comment = true;
            }
            '\t' if !comment => {
                let allowed = inside.is_some_and(|s| match s.style {
                    ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => true,
                    // In the content, not on the header line (`|-`, `>2`).
                    ScalarStyle::Literal | ScalarStyle::Folded => at >= s.content,
                    ScalarStyle::Plain => false,
                });
                if !allowed {
                    return Err(DecodeError::Syntax(format!(
                        "the document holds a tab at line {line} column {}, outside a quoted string, a block scalar's content and a comment; YAML 1.1 readers such as PyYAML refuse tabs there, so write spaces",
                        at - line_start + 1
                    )));
                }
            }
            _ => {}
        }
        previous = c;
    }
    Ok(())
}

/// The length in characters of the quoted scalar at the start of `node`, closing quote
/// included; `None` for other styles.
fn quoted_len(node: &str, style: ScalarStyle) -> Option<usize> {
    let quote = match style {
        ScalarStyle::SingleQuoted => '\'',
        ScalarStyle::DoubleQuoted => '"',
        _ => return None,
    };
    let mut chars = node
        .chars()
        .enumerate()
        .skip_while(|&(_, c)| c != quote)
        .peekable();
    chars.next()?; // the opening quote
    while let Some((i, c)) = chars.next() {
        if c == '\\' && quote == '"' {
            chars.next();
        } else if c == quote {
            // `''` inside a single-quoted scalar is one quote.
            if quote == '\'' && chars.next_if(|&(_, n)| n == '\'').is_some() {
                continue;
            }
            return Some(i + 1);
        }
    }
    None
}

/// Finds characters by the parser's character offsets; events arrive in order, so the
/// cursor moves a short way each time and the whole pass stays linear.
struct Cursor<'t> {
    text: &'t str,
    ascii: bool,
    byte: usize,
    char: usize,
}

impl<'t> Cursor<'t> {
    fn new(text: &'t str) -> Self {
        Cursor {
            text,
            ascii: text.is_ascii(),
            byte: 0,
            char: 0,
        }
    }

    /// The text from the character at `index` on.
    fn from(&mut self, index: usize) -> &'t str {
        if self.ascii {
            return self.text.get(index..).unwrap_or("");
        }
        while self.char < index {
            let Some(c) = self.text[self.byte..].chars().next() else {
                break;
            };
            self.byte += c.len_utf8();
            self.char += 1;
        }
        while self.char > index {
            let Some(c) = self.text[..self.byte].chars().next_back() else {
                break;
            };
            self.byte -= c.len_utf8();
            self.char -= 1;
        }
        &self.text[self.byte..]
    }
}

/// Whether a collection written from here is a flow one (`[...]`, `{...}`), after
/// its anchor and tag if it has them.
fn starts_flow(node: &str) -> bool {
    let mut rest = node;
    for _ in 0..2 {
        if rest.starts_with(['&', '!']) {
            rest = rest
                .trim_start_matches(|c: char| !c.is_whitespace())
                .trim_start();
        }
    }
    rest.starts_with(['[', '{'])
}

/// Records an anchor's name; a name defined twice is refused, as PyYAML refuses it.
fn define<'t>(defined: &mut HashSet<&'t str>, node: &'t str) -> Result<(), DecodeError> {
    let name = anchor_name(node, '&')?;
    if !defined.insert(name) {
        return Err(DecodeError::Syntax(format!(
            "the YAML anchor &{name} is defined twice; YAML 1.1 readers such as PyYAML refuse that, so give each anchor its own name"
        )));
    }
    Ok(())
}

/// The anchor (`&name`) or alias (`*name`) written where a node starts, after its tag
/// if the tag comes first. PyYAML ends a name at the first character that is not an
/// ASCII letter or digit, `-` or `_` (`&x:y` is the anchor `x` before the text `:y`,
/// `&aé` an error), where
/// YAML 1.2 takes everything up to a space or flow indicator; a name the two read
/// differently is refused. So is an anchor defined twice, which PyYAML refuses.
fn anchor_name(node: &str, sigil: char) -> Result<&str, DecodeError> {
    let token = node
        .split_whitespace()
        .take(2)
        .find_map(|t| t.strip_prefix(sigil))
        .unwrap_or("");
    let name = token.split([',', '[', ']', '{', '}']).next().unwrap_or("");
    // PyYAML ends a name at a blank or one of `?:,]}%@` and a backtick, never at an
    // opening bracket (`&a{}` is an error to it, an anchor on `{}` to YAML 1.2).
    let what = if sigil == '&' { "anchor" } else { "alias" };
    if token[name.len()..].starts_with(['[', '{']) {
        return Err(DecodeError::Syntax(format!(
            "the YAML {what} {sigil}{name} is followed by a bracket with no blank between, which YAML 1.1 readers such as PyYAML refuse; put a space after the name"
        )));
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(DecodeError::Syntax(format!(
            "the YAML {what} {sigil}{name} is read differently by YAML 1.1 readers such as PyYAML, which end a name at its first character that is not an ASCII letter, digit, '-' or '_'; rename it"
        )));
    }
    Ok(name)
}

/// PyYAML starts no plain scalar with an indicator (`|`, `>`, `@`, `%`, a quote, a
/// bracket...), nor with `-`, `?` or `:` before a blank, where YAML 1.2 readers may
/// (`[|]` is the string "|" to one and an error to the other).
fn plain_start(text: &str) -> Result<(), DecodeError> {
    let mut chars = text.chars();
    let Some(first) = chars.next() else {
        return Ok(()); // an empty value: no text
    };
    let blank_after = chars
        .next()
        .is_none_or(|c| matches!(c, ' ' | '\t' | '\r' | '\n'));
    let indicator =
        ",[]{}#&*!|>'\"%@`".contains(first) || (matches!(first, '-' | '?' | ':') && blank_after);
    if indicator {
        return Err(DecodeError::Syntax(format!(
            "the plain YAML scalar {text:?} starts with {first:?}, where YAML 1.1 readers such as PyYAML read an indicator, not text; quote it"
        )));
    }
    Ok(())
}

/// In a flow collection, PyYAML ends a plain scalar at `?` and reads a leading `:` or
/// `?` as an indicator, where YAML 1.2 keeps them in the scalar (`[?b]` is the string
/// "?b" to one and the mapping {b: null} to the other).
fn flow_plain(text: &str) -> Result<(), DecodeError> {
    if text.contains('?') || text.starts_with(':') {
        return Err(DecodeError::Syntax(format!(
            "the plain YAML scalar {text:?} inside a flow collection ([...] or {{...}}) holds '?' or starts with ':', which YAML 1.1 readers such as PyYAML parse differently; quote it"
        )));
    }
    Ok(())
}

fn internal(e: serde_json::Error) -> DecodeError {
    DecodeError::Syntax(format!("could not re-encode YAML: {e}"))
}

/// Characters a YAML reader refuses, or reads differently by version, are refused
/// before parsing: C0/C1 controls and DEL are not allowed in a YAML stream, and
/// NEL, LINE SEPARATOR and PARAGRAPH SEPARATOR are line breaks to YAML 1.1 readers
/// (PyYAML) but ordinary characters to YAML 1.2 ones.
fn printable(text: &str) -> Result<(), DecodeError> {
    let bad = text.char_indices().find(|&(_, c)| {
        !matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}')
    });
    match bad {
        None => Ok(()),
        Some((at, c @ ('\u{85}' | '\u{2028}' | '\u{2029}'))) => Err(DecodeError::Syntax(format!(
            "the document holds U+{:04X} at byte {at}, a line break to YAML 1.1 readers such as PyYAML but not to YAML 1.2 ones; write it as the escape \"\\u{:04X}\" inside a double-quoted string",
            c as u32, c as u32
        ))),
        Some((at, '\u{FEFF}')) => Err(DecodeError::Syntax(format!(
            "the document holds U+FEFF (a byte order mark) at byte {at}, past its start, where YAML 1.2 readers skip it and YAML 1.1 readers such as PyYAML read it as text; remove it, or write it as the escape \"\\uFEFF\" inside a double-quoted string"
        ))),
        Some((at, c)) => Err(DecodeError::Syntax(format!(
            "the document holds the control character U+{:04X} at byte {at}, which YAML does not allow; write it as the escape \"\\u{:04X}\" inside a double-quoted string",
            c as u32, c as u32
        ))),
    }
}

/// Writes the separator before the next key or value; `true` when a key comes next.
fn begin(stack: &mut [Frame], out: &mut Vec<u8>) -> Result<bool, DecodeError> {
    let Some(frame) = stack.last_mut() else {
        return Ok(false);
    };
    if frame.count > 0 && (!frame.is_map || frame.expecting_key) {
        out.push(b',');
    }
    if frame.is_map && frame.expecting_key {
        frame.expecting_key = false;
        return Ok(true);
    }
    Ok(false)
}

/// Closes a key (with its `:`) or a value.
fn finish(stack: &mut [Frame], out: &mut Vec<u8>, was_key: bool) {
    if was_key {
        out.push(b':');
        return;
    }
    if let Some(frame) = stack.last_mut() {
        frame.count += 1;
        if frame.is_map {
            frame.expecting_key = true;
        }
    }
}

/// The tag's full name (`tag:yaml.org,2002:str`, `!local`, `!`).
fn tag_name(tag: &Tag) -> String {
    format!("{}{}", tag.handle, tag.suffix)
}

/// The core-schema type a tag names (`str`, `map`, ...), if it names one.
fn core_type(tag: &Tag) -> Option<String> {
    tag_name(tag)
        .strip_prefix("tag:yaml.org,2002:")
        .map(str::to_string)
}

/// How messages show a tag: `!!set` for the YAML types, as written otherwise.
fn shown(tag: &Tag) -> String {
    match core_type(tag) {
        Some(t) => format!("!!{t}"),
        None => tag_name(tag),
    }
}

fn unsupported_tag(tag: &Tag) -> DecodeError {
    DecodeError::Syntax(format!(
        "the YAML tag {} is not accepted: only the core schema's !!str, !!int, !!float, !!bool, !!null, !!map and !!seq are, because other tags build objects that a JSON reader never sees; remove the tag",
        shown(tag)
    ))
}

/// Only `!!map` on a mapping and `!!seq` on a sequence mean what the untagged node means.
fn collection_tag(tag: &Tag, is_map: bool) -> Result<(), DecodeError> {
    match core_type(tag).as_deref() {
        Some("map") if is_map => Ok(()),
        Some("seq") if !is_map => Ok(()),
        _ => Err(unsupported_tag(tag)),
    }
}

/// Writes a mapping key, which must be a string to every reader.
fn write_key(
    out: &mut Vec<u8>,
    text: &str,
    style: ScalarStyle,
    tag: Option<&Tag>,
) -> Result<(), DecodeError> {
    if let Some(tag) = tag {
        if core_type(tag).as_deref() != Some("str") {
            return Err(match core_type(tag).as_deref() {
                Some("null" | "bool" | "int" | "float") => DecodeError::Syntax(format!(
                    "the YAML key {text:?} is tagged {}; mapping keys must be strings",
                    shown(tag)
                )),
                _ => unsupported_tag(tag),
            });
        }
        return write_str(out, text);
    }
    if style == ScalarStyle::Plain {
        let pyyaml = yaml11::resolve(text);
        if pyyaml == Reading::Merge {
            return Err(DecodeError::Syntax(
                "YAML merge keys (<<) are not accepted: YAML 1.1 readers such as PyYAML merge the mapping in while YAML 1.2 readers keep a key named \"<<\"; write the keys out".into(),
            ));
        }
        let core = resolve_plain(text);
        if core.is_some() || pyyaml != Reading::Str {
            let read = match core {
                Some(_) if pyyaml == Reading::Str => "a non-string by YAML 1.2".to_string(),
                _ => pyyaml.describe(),
            };
            return Err(DecodeError::Syntax(format!(
                "the YAML key {text:?} is read as {read}, not a string; mapping keys must be strings, so quote it (\"{text}\")"
            )));
        }
    }
    write_str(out, text)
}

/// Writes a value; returns whether it was a string.
fn write_scalar(
    out: &mut Vec<u8>,
    text: &str,
    style: ScalarStyle,
    tag: Option<&Tag>,
) -> Result<bool, DecodeError> {
    if let Some(tag) = tag {
        return write_tagged(out, text, tag);
    }
    if style != ScalarStyle::Plain {
        write_str(out, text)?;
        return Ok(true);
    }
    let core = resolve_plain(text);
    if let Some(Plain::Float(f)) = &core {
        if !f.is_finite() {
            // Both readers build it (NaN, unequal to itself, would otherwise read as a
            // disagreement), but JSON cannot hold it.
            let number = match *f {
                f if f.is_nan() => "NaN",
                f if f > 0.0 => "infinity",
                _ => "minus infinity",
            };
            return Err(DecodeError::Syntax(format!(
                "the YAML value {text:?} is the number {number}, which is not a JSON number; quote it (\"{text}\") for a string, or write null"
            )));
        }
    }
    let pyyaml = yaml11::resolve(text);
    if !agree(core.as_ref(), &pyyaml) {
        let core_reading = match &core {
            None => "a string".to_string(),
            Some(p) => p.describe(),
        };
        return Err(DecodeError::Syntax(format!(
            "the YAML value {text:?} is read as {} by YAML 1.1 readers such as PyYAML but as {core_reading} by YAML 1.2 readers; quote it (\"{text}\") for a string, or write the value so both read it alike",
            pyyaml.describe()
        )));
    }
    match core {
        Some(plain) => write_plain(out, plain).map(|()| false),
        None => write_str(out, text).map(|()| true),
    }
}

/// Whether the YAML 1.2 core schema and PyYAML build the same value from a plain scalar.
fn agree(core: Option<&Plain>, pyyaml: &Reading) -> bool {
    match (core, pyyaml) {
        (None, Reading::Str) | (Some(Plain::Null), Reading::Null) => true,
        (Some(Plain::Bool(a)), Reading::Bool(b)) => a == b,
        (Some(Plain::Int(a)), Reading::Int(Some(b))) => a == b,
        (Some(Plain::Float(a)), Reading::Float(Some(b))) => a == b,
        _ => false,
    }
}

/// A scalar with an explicit core tag, accepted only where PyYAML's constructor for
/// that tag builds the same value.
fn write_tagged(out: &mut Vec<u8>, text: &str, tag: &Tag) -> Result<bool, DecodeError> {
    let Some(core) = core_type(tag) else {
        return Err(unsupported_tag(tag));
    };
    let invalid = || {
        DecodeError::Syntax(format!(
            "the YAML scalar {text:?} is not a valid !!{core} that YAML 1.1 and 1.2 readers read alike; remove the tag or fix the value"
        ))
    };
    match core.as_str() {
        "str" => write_str(out, text).map(|()| true),
        // PyYAML builds None from any !!null scalar, as YAML 1.2 does.
        "null" => {
            out.extend_from_slice(b"null");
            Ok(false)
        }
        "bool" => match (resolve_plain(text), yaml11::resolve(text)) {
            (Some(Plain::Bool(a)), Reading::Bool(b)) if a == b => {
                write_plain(out, Plain::Bool(a)).map(|()| false)
            }
            _ => Err(invalid()),
        },
        "int" => match (resolve_plain(text), yaml11::resolve(text)) {
            (Some(Plain::Int(a)), Reading::Int(Some(b))) if a == b => {
                write_plain(out, Plain::Int(a)).map(|()| false)
            }
            _ => Err(invalid()),
        },
        "float" => {
            // PyYAML's !!float is Python's float() of the text; YAML 1.2 resolves it as
            // a number. Both must agree, and the value is written as a float.
            let value = match resolve_plain(text) {
                Some(Plain::Float(f)) => f,
                Some(Plain::Int(i)) if !text.contains(['x', 'o']) => i as f64,
                _ => return Err(invalid()),
            };
            if text.contains(['_', ':']) || text.parse::<f64>().ok() != Some(value) {
                return Err(invalid());
            }
            write_float(out, value).map(|()| false)
        }
        _ => Err(unsupported_tag(tag)),
    }
}

fn write_str(out: &mut Vec<u8>, text: &str) -> Result<(), DecodeError> {
    serde_json::to_writer(out, text).map_err(internal)
}

enum Plain {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
}

impl Plain {
    fn describe(&self) -> String {
        match self {
            Plain::Null => "null".into(),
            Plain::Bool(b) => format!("the boolean {b}"),
            Plain::Int(i) => format!("the integer {i}"),
            Plain::Float(f) => format!("the number {f}"),
        }
    }
}

/// A float as JSON, keeping its decimal point (`1.0`, not `1`).
fn write_float(out: &mut Vec<u8>, f: f64) -> Result<(), DecodeError> {
    let n = serde_json::Number::from_f64(f)
        .ok_or_else(|| DecodeError::Syntax(format!("{f} is not a finite number; JSON has none")))?;
    let text = n.to_string();
    out.extend_from_slice(text.as_bytes());
    if !text.contains(['.', 'e', 'E']) {
        out.extend_from_slice(b".0");
    }
    Ok(())
}

fn write_plain(out: &mut Vec<u8>, plain: Plain) -> Result<(), DecodeError> {
    match plain {
        Plain::Null => out.extend_from_slice(b"null"),
        Plain::Bool(true) => out.extend_from_slice(b"true"),
        Plain::Bool(false) => out.extend_from_slice(b"false"),
        Plain::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Plain::Float(f) => write_float(out, f)?,
    }
    Ok(())
}

/// YAML 1.2 core schema resolution of a plain scalar; `None` means a string.
fn resolve_plain(text: &str) -> Option<Plain> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Some(Plain::Null),
        "true" | "True" | "TRUE" => return Some(Plain::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Plain::Bool(false)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Some(Plain::Float(f64::INFINITY))
        }
        "-.inf" | "-.Inf" | "-.INF" => return Some(Plain::Float(f64::NEG_INFINITY)),
        ".nan" | ".NaN" | ".NAN" => return Some(Plain::Float(f64::NAN)),
        _ => {}
    }
    let bytes = text.as_bytes();
    if let Some(hex) = text.strip_prefix("0x") {
        return i128::from_str_radix(hex, 16).ok().map(Plain::Int);
    }
    if let Some(oct) = text.strip_prefix("0o") {
        return i128::from_str_radix(oct, 8).ok().map(Plain::Int);
    }
    let digits = bytes
        .strip_prefix(b"-")
        .or_else(|| bytes.strip_prefix(b"+"))
        .unwrap_or(bytes);
    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        return match text.parse::<i128>() {
            Ok(i) => Some(Plain::Int(i)),
            Err(_) => text.parse::<f64>().ok().map(Plain::Float),
        };
    }
    if is_core_float(digits) {
        return text.parse::<f64>().ok().map(Plain::Float);
    }
    None
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`, sign already stripped.
fn is_core_float(b: &[u8]) -> bool {
    let mut i = 0;
    let int_digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac_digits;
    }
    if int_digits == 0 && frac_digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp == 0 {
            return false;
        }
        i += exp;
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(text: &str) -> Result<String, DecodeError> {
        to_json(text, &Limits::default()).map(|v| String::from_utf8(v).unwrap())
    }

    /// (line, column, alone, text) of each comment.
    fn comments_of(text: &str) -> Vec<(u32, u32, bool, String)> {
        comments(text)
            .into_iter()
            .map(|c| (c.line, c.column, c.alone, c.text))
            .collect()
    }

    #[test]
    fn comments_are_what_the_reader_skips() {
        let at = |line, column, alone, text: &str| (line, column, alone, text.to_string());
        assert_eq!(
            comments_of("# top\na: 1 # after\n"),
            vec![at(1, 1, true, " top"), at(2, 6, false, " after")]
        );
        // Inside quotes, a plain scalar (no blank before the `#`) and a block
        // scalar's content, a `#` is data.
        assert_eq!(
            comments_of("a: \"x # y\"\nb: 'p # q' # r\nc: d#e\n"),
            vec![at(2, 12, false, " r")]
        );
        assert_eq!(
            comments_of("a: | # head\n  one # no\n  # no\n\n# yes\nb: >-\n  # no\n  two\n"),
            vec![at(1, 6, false, " head"), at(5, 1, true, " yes")]
        );
        // Flow collections, on one line and over several.
        assert_eq!(
            comments_of("a: {b: 1, c: \"#no\"} # yes\nd: [1, # one\n  2]\n"),
            vec![at(1, 21, false, " yes"), at(2, 8, false, " one")]
        );
        // Windows line ends; and text the parser refuses holds no comment it can vouch for.
        assert_eq!(comments_of("a: 1\r\n# b\r\n"), vec![at(2, 1, true, " b")]);
        assert_eq!(comments_of("a: [1\n# b\n"), vec![]);
    }

    #[test]
    fn resolves_core_schema_scalars() {
        let json = conv("a: 1\nb: 2.5\nc: true\nd: ~\ne: '1'\nf: hello\ng: [x, 0x10]\n").unwrap();
        assert_eq!(
            json,
            r#"{"a":1,"b":2.5,"c":true,"d":null,"e":"1","f":"hello","g":["x",16]}"#
        );
    }

    #[test]
    fn keeps_duplicate_keys_for_the_walker() {
        assert_eq!(conv("a: 1\na: 2\n").unwrap(), r#"{"a":1,"a":2}"#);
    }

    #[test]
    fn expands_aliases_within_budget() {
        assert_eq!(
            conv("a: &x [1, 2]\nb: *x\n").unwrap(),
            r#"{"a":[1,2],"b":[1,2]}"#
        );
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            bomb.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
        }
        assert!(matches!(conv(&bomb), Err(DecodeError::Size(_))));
    }

    #[test]
    fn bounds_depth_without_recursion() {
        let deep = "[".repeat(100_000);
        assert!(matches!(conv(&deep), Err(DecodeError::Depth(_))));
    }

    #[test]
    fn refuses_several_documents_and_collection_keys() {
        assert!(matches!(
            conv("a: 1\n---\nb: 2\n"),
            Err(DecodeError::Syntax(_))
        ));
        assert!(matches!(conv("? [a]\n: 1\n"), Err(DecodeError::Syntax(_))));
        assert!(matches!(conv("a: .nan\n"), Err(DecodeError::Syntax(_))));
    }

    #[test]
    fn anchors_and_aliases_work_wherever_yaml_allows_them() {
        assert_eq!(
            conv("l: [a, &v b]\nm: *v\n").unwrap(),
            r#"{"l":["a","b"],"m":"b"}"#
        );
        assert_eq!(
            conv("&k key: 1\nb: *k\n").unwrap(),
            r#"{"key":1,"b":"key"}"#
        );
        assert_eq!(
            conv("a: &s name\n*s : 2\n").unwrap(),
            r#"{"a":"name","name":2}"#
        );
        assert_eq!(
            conv("x: &m {b: 1}\ny: [*m, *m]\n").unwrap(),
            r#"{"x":{"b":1},"y":[{"b":1},{"b":1}]}"#
        );
        // An alias of a collection or a number cannot be a key.
        assert!(matches!(
            conv("a: &m {b: 1}\n*m : 2\n"),
            Err(DecodeError::Syntax(_))
        ));
        assert!(matches!(
            conv("a: &n 1\n*n : 2\n"),
            Err(DecodeError::Syntax(_))
        ));
    }

    fn refused(text: &str) -> String {
        match conv(text) {
            Err(DecodeError::Syntax(m)) => m,
            other => panic!("{text:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn refuses_anchor_names_pyyaml_reads_otherwise_and_anchors_defined_twice() {
        for text in [
            "&x:y a: 1\n",
            "a: &x:y b\n",
            "a:\n- &x: b\n",
            "a: [&x:y 1]\n",
            "a: &x.y 1\nb: *x.y\n",
            "a: &x 1\nb: &x 2\nc: *x\n",
        ] {
            let m = refused(text);
            assert!(m.contains("anchor") || m.contains("alias"), "{text:?}: {m}");
        }
        assert_eq!(
            conv("a: &x-1_E [1]\nb: !!seq &y [2]\nc: *x-1_E\nd: &z {k: *y}\n").unwrap(),
            r#"{"a":[1],"b":[2],"c":[1],"d":{"k":[2]}}"#
        );
    }

    #[test]
    fn a_block_scalar_cut_by_the_end_of_the_text_is_refused() {
        for text in ["a: |\n  x", "a: >\n  x", "a: |\n  x\n  "] {
            assert!(refused(text).contains("block scalar"), "{text:?}");
        }
        assert_eq!(conv("a: |\n  x\n").unwrap(), r#"{"a":"x\n"}"#);
        assert_eq!(conv("a: |\n  x\nb: 1").unwrap(), r#"{"a":"x\n","b":1}"#);
    }

    #[test]
    fn refuses_tags_outside_the_core_schema_on_every_node() {
        for text in [
            "x: !!python/object/apply:os.system [\"touch /tmp/p\"]\n",
            "x: !foo {a: 1}\n",
            "x: !!set {a: null}\n",
            "x: !!omap [{a: 1}]\n",
            "x: !<tag:yaml.org,2002:python/object:os.system> {}\n",
            "x: !!binary aGk=\n",
            "x: ! text\n",
            "x: !!map [a]\n",
            "x: !!str {a: 1}\n",
        ] {
            assert!(refused(text).contains("YAML tag"), "{text:?}");
        }
        assert!(refused("x: !foo {a: 1}\n").contains("!foo"));
        assert!(refused("x: !!set {a: null}\n").contains("!!set"));
        assert_eq!(
            conv("x: !!map {a: !!str 1}\ny: !<tag:yaml.org,2002:seq> [!!int 2, !!float 3, !!null x, !!bool true]\n").unwrap(),
            r#"{"x":{"a":"1"},"y":[2,3.0,null,true]}"#
        );
    }

    #[test]
    fn refuses_scalars_yaml_11_reads_otherwise() {
        for text in [
            "a: yes\n",
            "a: Off\n",
            "a: 010\n",
            "a: 1_000\n",
            "a: 1:20\n",
            "a: 1e3\n",
            "a: 0o10\n",
            "a: 2001-12-14\n",
            "a: -0x1f\n",
            "a: 0b1\n",
            "a: =\n",
            "a: !!int 010\n",
            "a: !!bool yes\n",
            "a: !!float 1_0\n",
        ] {
            let m = refused(text);
            assert!(m.contains("PyYAML") || m.contains("!!"), "{text:?}: {m}");
        }
        assert!(refused("a: yes\n").contains("the boolean true"));
        // What both read alike passes.
        assert_eq!(
            conv("a: 1\nb: 1.5\nc: 0x1F\nd: -7\ne: 1.5e+3\nf: .5\ng: 'yes'\nh: y\ni: 00\n")
                .unwrap(),
            r#"{"a":1,"b":1.5,"c":31,"d":-7,"e":1500.0,"f":0.5,"g":"yes","h":"y","i":0}"#
        );
    }

    #[test]
    fn refuses_merge_keys_and_non_string_keys() {
        let m = refused("a: {<<: {image: evil}, b: 1}\n");
        assert!(m.contains("merge keys"), "{m}");
        for text in [
            "1: x\n",
            "true: x\n",
            "null: x\n",
            "yes: x\n",
            "!!int 1: x\n",
            "? \n: x\n",
        ] {
            assert!(refused(text).contains("key"), "{text:?}");
        }
        assert_eq!(
            conv("\"<<\": 1\n'1': 2\n!!str 3: 4\n").unwrap(),
            r#"{"<<":1,"1":2,"3":4}"#
        );
    }

    #[test]
    fn refuses_characters_yaml_readers_disagree_on() {
        for text in [
            "a: x\u{2028}y\n",
            "a: x\u{85}y\n",
            "a: \"x\u{1}\"\n",
            "a: x\u{7f}\n",
        ] {
            assert!(refused(text).contains("U+"), "{text:?}");
        }
        assert_eq!(
            conv("a: \"x\\u2028y\"\n").unwrap(),
            "{\"a\":\"x\u{2028}y\"}"
        );
    }

    /// Found by fuzzing against PyYAML (`rust/fuzz`, target `yaml`): `;\t$:` was read as
    /// the key ";\t$", where PyYAML refuses the tab.
    #[test]
    fn tabs_are_refused_where_pyyaml_refuses_them() {
        for text in [
            ";\t$:",
            "a: b\t\n",
            "a:\tb\n",
            "a\tb: c\n",
            "a: b\tc\n",
            "a: [b,\tc]\n",
            "a: 'b'\t\n",
            "\ta: b\n",
            "- a\t\n",
            "a: {b: c}\t\n",
            "a: b\t# c\n",
            "a: [\tb]\n",
            "a: b\n\t\n",
            "a: b\n  \t\n",
            "a: |\t\n  x\n",
            "a: &x |\t\n  x\n",
            "a: b\r\tc: d\n",
        ] {
            assert!(conv(text).is_err(), "{text:?} is read");
        }
        let e = conv(";\t$:").expect_err("a tab after a plain scalar");
        assert!(format!("{e:?}").contains("tab at line 1 column 2"), "{e:?}");
        // Where PyYAML reads them: quoted strings, a block scalar's content, comments.
        assert_eq!(conv("a: 'x\ty'\n").unwrap(), r#"{"a":"x\ty"}"#);
        assert_eq!(conv("a: \"x\ty\"\n").unwrap(), r#"{"a":"x\ty"}"#);
        assert_eq!(conv("a: |\n  x\ty\n").unwrap(), r#"{"a":"x\ty\n"}"#);
        assert_eq!(conv("a: &x |\n  x\ty\n").unwrap(), r#"{"a":"x\ty\n"}"#);
        assert_eq!(conv("a: b # c\td\n").unwrap(), r#"{"a":"b"}"#);
        assert_eq!(conv("# \t\na: b\n").unwrap(), r#"{"a":"b"}"#);
    }

    /// Found by fuzzing against PyYAML (`rust/fuzz`, target `yaml`): after a line break,
    /// `\u{feff}u:` was read as the key "u"; PyYAML reads "\u{feff}u".
    #[test]
    fn a_byte_order_mark_past_the_start_is_refused() {
        for text in [
            "\r\u{feff}u:",
            "a: 1\n\u{feff}b: 2\n",
            "a: \u{feff}b\n",
            "a: '\u{feff}'\n",
        ] {
            let e = conv(text).expect_err(text);
            assert!(format!("{e:?}").contains("U+FEFF"), "{text:?}: {e:?}");
        }
        assert_eq!(conv("a: \"\\uFEFF\"\n").unwrap(), "{\"a\":\"\u{feff}\"}");
    }

    /// Found by fuzzing against PyYAML (`rust/fuzz`, target `yaml`): PyYAML ends an
    /// anchor or alias name at its first character that is not an ASCII letter, digit,
    /// `-` or `_`; `&aé x: 1` was read with the anchor `aé`, PyYAML refuses it.
    #[test]
    fn anchor_names_are_ascii() {
        for text in ["&a\u{e9} x: 1\n", "a: &\u{fcff}b 1\n"] {
            let e = conv(text).expect_err(text);
            assert!(format!("{e:?}").contains("ASCII letter"), "{text:?}: {e:?}");
        }
        assert_eq!(
            conv("a: &b-1_X 1\nc: *b-1_X\n").unwrap(),
            r#"{"a":1,"c":1}"#
        );
    }

    /// Found by fuzzing against PyYAML (`rust/fuzz`, target `yaml`): `[|]` was read as
    /// the string "|"; PyYAML starts no plain scalar with an indicator.
    #[test]
    fn plain_scalars_start_where_pyyaml_starts_them() {
        for text in [
            "a: [|]\n",
            "a: [>]\n",
            "a: [@x]\n",
            "a: [`x]\n",
            "a: [%x]\n",
            "a: {x: |}\n",
        ] {
            assert!(conv(text).is_err(), "{text:?} is read");
        }
        let e = conv("all_recs: [|] \n").expect_err("[|]");
        assert!(format!("{e:?}").contains("starts with '|'"), "{e:?}");
        assert_eq!(
            conv("a: [-x, x-, '@']\n").unwrap(),
            r#"{"a":["-x","x-","@"]}"#
        );
    }

    /// Found by fuzzing against PyYAML (`rust/fuzz`, target `yaml`): `&_hc{}` was read as
    /// an anchor on `{}`; PyYAML refuses a bracket right after an anchor's name.
    #[test]
    fn an_anchor_name_ends_where_pyyaml_ends_it() {
        for text in [
            "&_hc{}",
            "a: &x[1]\n",
            "a: [&x{b: 1}]\n",
            "a: &x 1\nb: [*x[]]\n",
        ] {
            assert!(conv(text).is_err(), "{text:?} is read");
        }
        let e = conv("&_hc{}").expect_err("&_hc{}");
        assert!(format!("{e:?}").contains("anchor &_hc"), "{e:?}");
        assert_eq!(conv("a: [&x 1, *x]\n").unwrap(), r#"{"a":[1,1]}"#);
    }

    /// Found by fuzzing against PyYAML (`rust/fuzz`, target `yaml`): `...` before the
    /// first value was skipped and what follows read; PyYAML refuses the stream.
    #[test]
    fn a_document_end_marker_before_the_first_value_is_refused() {
        for text in [
            "...\r/:,2x :",
            "...\na: 1\n",
            "# c\n...\na: 1\n",
            "... \na: 1\n",
        ] {
            let e = conv(text).expect_err(text);
            assert!(
                format!("{e:?}").contains("document end marker"),
                "{text:?}: {e:?}"
            );
        }
        for text in [
            "a: 1\n...\n",
            "--- \na: 1\n...\n",
            "a: |\n  x\n...\n",
            "....: 1\n",
        ] {
            assert!(conv(text).is_ok(), "{text:?}");
        }
    }

    /// Found by fuzzing against PyYAML (`rust/fuzz`, target `yaml`): a tab on the header
    /// line of a block scalar with no content (`? >\t`) was read; PyYAML refuses it.
    #[test]
    fn a_tab_on_a_block_scalars_header_line_is_refused() {
        for text in [
            "? >\t",
            "a: >\t\n",
            "a: |\t\n  x\n",
            "a: &x |-\t\n  x\n",
            "- |\t\n  x\n",
        ] {
            let e = conv(text).expect_err(text);
            assert!(
                format!("{e:?}").contains("tab at line 1"),
                "{text:?}: {e:?}"
            );
        }
        assert_eq!(conv("a: | # c > d\n  x\ty\n").unwrap(), r#"{"a":"x\ty\n"}"#);
        assert_eq!(conv("- >\r\n  x\ty\r\n").unwrap(), r#"["x\ty\n"]"#);
    }
}
