//! A read-only view of one value inside a parsed document.
//!
//! Documents are parsed into simd-json's flat tape (written by `tape`, or by simd-json
//! itself for what `tape` leaves to it); a `Value` is a slice of that tape
//! starting at the value's node. Navigation allocates nothing, which is what keeps a
//! full check cheaper than building Python objects for the same bytes.

use simd_json::{Node, StaticNode};

#[derive(Clone, Copy)]
pub struct Value<'t, 'i> {
    tape: &'t [Node<'i>],
}

/// What a value is, with scalars unpacked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Type<'i> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(&'i str),
    Array(usize),
    Object(usize),
}

impl<'t, 'i> Value<'t, 'i> {
    /// The root value of a parsed tape.
    pub fn root(tape: &'t [Node<'i>]) -> Self {
        Value { tape }
    }

    #[inline]
    pub fn ty(&self) -> Type<'i> {
        match self.tape[0] {
            Node::String(s) => Type::Str(s),
            Node::Object { len, .. } => Type::Object(len),
            Node::Array { len, .. } => Type::Array(len),
            Node::Static(StaticNode::Null) => Type::Null,
            Node::Static(StaticNode::Bool(b)) => Type::Bool(b),
            Node::Static(StaticNode::I64(i)) => Type::Int(i),
            Node::Static(StaticNode::U64(u)) => Type::UInt(u),
            Node::Static(StaticNode::F64(f)) => Type::Float(f),
        }
    }

    /// How many tape nodes this value covers.
    #[inline]
    fn span(&self) -> usize {
        match self.tape[0] {
            Node::Object { count, .. } | Node::Array { count, .. } => count + 1,
            _ => 1,
        }
    }

    #[inline]
    pub fn as_str(&self) -> Option<&'i str> {
        match self.tape[0] {
            Node::String(s) => Some(s),
            _ => None,
        }
    }

    #[inline]
    pub fn is_null(&self) -> bool {
        matches!(self.tape[0], Node::Static(StaticNode::Null))
    }

    #[inline]
    pub fn is_object(&self) -> bool {
        matches!(self.tape[0], Node::Object { .. })
    }

    #[inline]
    pub fn as_bool(&self) -> Option<bool> {
        match self.tape[0] {
            Node::Static(StaticNode::Bool(b)) => Some(b),
            _ => None,
        }
    }

    /// Any JSON number, as f64 (booleans are not numbers).
    pub fn as_f64(&self) -> Option<f64> {
        match self.ty() {
            Type::Int(i) => Some(i as f64),
            Type::UInt(u) => Some(u as f64),
            Type::Float(f) => Some(f),
            _ => None,
        }
    }

    /// An integer written as one (`8`, not `8.0`), the way Python's `int` sees it.
    pub fn as_lexical_int(&self) -> Option<i128> {
        match self.ty() {
            Type::Int(i) => Some(i as i128),
            Type::UInt(u) => Some(u as i128),
            _ => None,
        }
    }

    /// An integer in the JSON Schema sense: `8` and `8.0` both are.
    pub fn as_schema_int(&self) -> Option<i128> {
        match self.ty() {
            // `as` saturates: integers past i128 stay ordered for minimum checks.
            Type::Float(f) if f.is_finite() && f.fract() == 0.0 => Some(f as i128),
            _ => self.as_lexical_int(),
        }
    }

    pub fn entries(&self) -> Entries<'t, 'i> {
        match self.tape[0] {
            Node::Object { count, .. } => Entries {
                rest: &self.tape[1..=count],
            },
            _ => Entries { rest: &[] },
        }
    }

    /// Every object of this value's subtree, itself included, in document order: one
    /// linear pass over the tape, without recursion or a path.
    pub fn objects(&self) -> impl Iterator<Item = Value<'t, 'i>> {
        let tape = &self.tape[..self.span()];
        (0..tape.len())
            .filter(move |&j| matches!(tape[j], Node::Object { .. }))
            .map(move |j| Value { tape: &tape[j..] })
    }

    pub fn items(&self) -> Items<'t, 'i> {
        match self.tape[0] {
            Node::Array { count, .. } => Items {
                rest: &self.tape[1..=count],
            },
            _ => Items { rest: &[] },
        }
    }

    /// The value of `key`. With duplicate keys (always a `json.duplicate_key` error),
    /// the first; the rules only need one of them.
    ///
    /// Always inlined: the rules look keys up by literal names, and with the name known
    /// at the call, each compare is a length test and a word or two.
    #[inline(always)]
    pub fn get(&self, key: &str) -> Option<Value<'t, 'i>> {
        self.find(|k| crate::text::same(k, key))
    }

    /// The values of several keys, found in one pass over the object: for each key, what
    /// `get` would return. For the rules that read many fields of one object.
    #[inline(always)]
    pub fn get_each<const N: usize>(&self, keys: [&str; N]) -> [Option<Value<'t, 'i>>; N] {
        let mut found = [None; N];
        let mut missing = N;
        for (k, v) in self.entries() {
            for (slot, key) in found.iter_mut().zip(keys) {
                if slot.is_none() && crate::text::same(k, key) {
                    *slot = Some(v);
                    missing -= 1;
                }
            }
            if missing == 0 {
                break;
            }
        }
        found
    }

    /// The value of the first entry whose key passes `is_key`: a plain loop over the
    /// tape, cheaper than the `entries` iterator's bookkeeping.
    #[inline(always)]
    fn find(&self, is_key: impl Fn(&str) -> bool) -> Option<Value<'t, 'i>> {
        let Node::Object { count, .. } = self.tape[0] else {
            return None;
        };
        // The object's entries fill its `count` nodes exactly: key, value, key, ...
        let mut rest = &self.tape[1..=count];
        while let [key, tail @ ..] = rest {
            let value = Value { tape: tail };
            if is_key(key_of(key)) {
                return Some(value);
            }
            rest = &tail[value.span()..];
        }
        None
    }

    #[inline(always)]
    pub fn get_str(&self, key: &str) -> Option<&'i str> {
        self.get(key).and_then(|v| v.as_str())
    }

    pub fn item(&self, index: usize) -> Option<Value<'t, 'i>> {
        self.items().nth(index)
    }

    /// Follows literal keys; `None` as soon as one is missing or not an object.
    #[inline(always)]
    pub fn at(&self, keys: &[&str]) -> Option<Value<'t, 'i>> {
        let mut v = *self;
        for key in keys {
            v = v.get(key)?;
        }
        Some(v)
    }

    /// Numeric equality across int and float, string and other scalar equality.
    pub fn same_scalar(&self, other: &Value<'_, '_>) -> bool {
        match (self.ty(), other.ty()) {
            (Type::Str(a), Type::Str(b)) => a == b,
            (Type::Null, Type::Null) => true,
            (Type::Bool(a), Type::Bool(b)) => a == b,
            _ => match (self.as_f64(), other.as_f64()) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            },
        }
    }

    /// Deep equality in the JSON Schema sense (`uniqueItems`): 1 == 1.0, objects unordered.
    pub fn deep_eq(&self, other: &Value<'_, '_>) -> bool {
        match (self.ty(), other.ty()) {
            (Type::Array(n), Type::Array(m)) => {
                n == m && self.items().zip(other.items()).all(|(a, b)| a.deep_eq(&b))
            }
            (Type::Object(n), Type::Object(m)) => {
                n == m
                    && self
                        .entries()
                        .all(|(k, v)| other.get(k).is_some_and(|w| v.deep_eq(&w)))
            }
            (Type::Array(_), _)
            | (_, Type::Array(_))
            | (Type::Object(_), _)
            | (_, Type::Object(_)) => false,
            _ => self.same_scalar(other),
        }
    }

    /// A short rendering for messages: strings quoted and cut, containers summarised.
    pub fn describe(&self) -> String {
        match self.ty() {
            Type::Null => "null".into(),
            Type::Bool(b) => b.to_string(),
            Type::Int(i) => i.to_string(),
            Type::UInt(u) => u.to_string(),
            Type::Float(f) => {
                serde_json::Number::from_f64(f).map_or_else(|| f.to_string(), |n| n.to_string())
            }
            Type::Str(s) => quote(s),
            Type::Array(n) => format!("an array of {n} item{}", if n == 1 { "" } else { "s" }),
            Type::Object(n) => format!("an object of {n} key{}", if n == 1 { "" } else { "s" }),
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self.ty() {
            Type::Null => "null",
            Type::Bool(_) => "boolean",
            Type::Int(_) | Type::UInt(_) => "integer",
            Type::Float(_) => "number",
            Type::Str(_) => "string",
            Type::Array(_) => "array",
            Type::Object(_) => "object",
        }
    }
}

/// A string for a message: JSON-quoted, cut to a readable length.
/// A list for a message: the first few items, then how many more, so a message stays
/// short however long the list in the document is.
pub fn few<S: AsRef<str>>(items: &[S]) -> String {
    few_of(items.iter().map(AsRef::as_ref), items.len())
}

/// `few` of a list of `len` items given by its first ones (at least the `SHOWN` that
/// `few` names, when there are as many), for a list that is not kept whole.
pub fn few_of<'a>(first: impl Iterator<Item = &'a str>, len: usize) -> String {
    if len == 0 {
        return "none".into();
    }
    let shown: Vec<String> = first.take(SHOWN).map(quote).collect();
    match len.saturating_sub(SHOWN) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// How many items of a list a message names.
pub const SHOWN: usize = 5;

pub fn quote(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        return serde_json::to_string(s).unwrap_or_default();
    }
    let cut: String = s.chars().take(MAX).collect();
    let quoted = serde_json::to_string(&cut).unwrap_or_default();
    format!("{}...\"", &quoted[..quoted.len() - 1])
}

/// The key at a key node of an object (always a string on the tape).
#[inline]
fn key_of<'i>(node: &Node<'i>) -> &'i str {
    match *node {
        Node::String(s) => s,
        _ => "",
    }
}

/// The entries of an object: its `count` nodes hold exactly its keys and values, in
/// turn, so the iteration ends where they end.
pub struct Entries<'t, 'i> {
    rest: &'t [Node<'i>],
}

impl<'t, 'i> Iterator for Entries<'t, 'i> {
    type Item = (&'i str, Value<'t, 'i>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let [key, tail @ ..] = self.rest else {
            return None;
        };
        let value = Value { tape: tail };
        self.rest = &tail[value.span()..];
        Some((key_of(key), value))
    }
}

/// The items of an array: its `count` nodes hold exactly its items.
pub struct Items<'t, 'i> {
    rest: &'t [Node<'i>],
}

impl<'t, 'i> Iterator for Items<'t, 'i> {
    type Item = Value<'t, 'i>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let value = Value { tape: self.rest };
        self.rest = &self.rest[value.span()..];
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::with_document;
    use crate::limits::Limits;

    /// Where a found value starts on the tape: the same node, the same value.
    fn at<'i>(v: Option<Value<'_, 'i>>) -> Option<*const Node<'i>> {
        v.map(|v| v.tape.as_ptr())
    }

    /// Every object and array of `doc`: its entries and items are exactly `len`, and
    /// `get` and `get_each` find the first entry of each key, as a search of the
    /// entries does, for keys present, repeated, empty, non-ASCII and absent.
    fn check_lookups(doc: &str) {
        with_document(doc.as_bytes(), &Limits::default(), |d| {
            for (j, node) in d.root.tape.iter().enumerate() {
                let v = Value {
                    tape: &d.root.tape[j..],
                };
                match *node {
                    Node::Array { len, .. } => assert_eq!(v.items().count(), len, "{doc}"),
                    Node::Object { len, .. } => {
                        assert_eq!(v.entries().count(), len, "{doc}");
                        let mut keys: Vec<&str> = v.entries().map(|(k, _)| k).collect();
                        keys.extend(["", "absent", "a", "é", "a-longer-key-than-sixteen"]);
                        for &k in &keys {
                            let first = v.entries().find(|(key, _)| *key == k).map(|(_, v)| v);
                            assert_eq!(at(v.get(k)), at(first), "{doc} {k:?}");
                            let [a, b, c] = v.get_each([k, "a", k]);
                            assert_eq!(at(a), at(first), "{doc} {k:?}");
                            assert_eq!(at(c), at(first), "{doc} {k:?}");
                            assert_eq!(at(b), at(v.get("a")), "{doc} {k:?}");
                        }
                    }
                    _ => {}
                }
            }
        })
        .unwrap();
    }

    #[test]
    fn lookups_find_the_first_entry() {
        for doc in [
            r#"{}"#,
            r#"{"a": 1}"#,
            r#"{"a": 1, "a": {"a": [1, {"b": 2}], "": 3}, "é": null, "a": 4}"#,
            r#"{"x": [[], {}, [1, [2, [3]]]], "a-longer-key-than-sixteen": {"a": {}}, "b": "a"}"#,
            r#"{"": "", "a": [{"a": 1, "a": 2}, {"é": [], "é": {}}], "absent2": true}"#,
        ] {
            check_lookups(doc);
        }
    }
}
