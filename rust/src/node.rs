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
            Node::Object { len, count } => Entries {
                rest: &self.tape[1..=count],
                left: len,
            },
            _ => Entries { rest: &[], left: 0 },
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
            Node::Array { len, count } => Items {
                rest: &self.tape[1..=count],
                left: len,
            },
            _ => Items { rest: &[], left: 0 },
        }
    }

    /// The value of `key`. With duplicate keys (always a `json.duplicate_key` error),
    /// the first; the rules only need one of them.
    #[inline]
    pub fn get(&self, key: &str) -> Option<Value<'t, 'i>> {
        self.entries()
            .find(|(k, _)| crate::text::same(k, key))
            .map(|(_, v)| v)
    }

    pub fn get_str(&self, key: &str) -> Option<&'i str> {
        self.get(key).and_then(|v| v.as_str())
    }

    pub fn item(&self, index: usize) -> Option<Value<'t, 'i>> {
        self.items().nth(index)
    }

    /// Follows literal keys; `None` as soon as one is missing or not an object.
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
    const SHOWN: usize = 5;
    if items.is_empty() {
        return "none".into();
    }
    let shown: Vec<String> = items
        .iter()
        .take(SHOWN)
        .map(|s| quote(s.as_ref()))
        .collect();
    match items.len().saturating_sub(SHOWN) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

pub fn quote(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        return serde_json::to_string(s).unwrap_or_default();
    }
    let cut: String = s.chars().take(MAX).collect();
    let quoted = serde_json::to_string(&cut).unwrap_or_default();
    format!("{}...\"", &quoted[..quoted.len() - 1])
}

pub struct Entries<'t, 'i> {
    rest: &'t [Node<'i>],
    left: usize,
}

impl<'t, 'i> Iterator for Entries<'t, 'i> {
    type Item = (&'i str, Value<'t, 'i>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let key = match self.rest[0] {
            Node::String(s) => s,
            _ => "",
        };
        let value = Value {
            tape: &self.rest[1..],
        };
        self.rest = &self.rest[1 + value.span()..];
        Some((key, value))
    }
}

pub struct Items<'t, 'i> {
    rest: &'t [Node<'i>],
    left: usize,
}

impl<'t, 'i> Iterator for Items<'t, 'i> {
    type Item = Value<'t, 'i>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let value = Value { tape: self.rest };
        self.rest = &self.rest[value.span()..];
        Some(value)
    }
}
