//! How a client's `recipe.lock.json` stands against the catalog, in the words
//! `sf recipe status --server` uses (the service's `RecipeStatus`), judged by the
//! handshake's terms: the same catalog entries and the same PEP 440 matching of
//! `requires.core` that `forge.handshake.*` and `forge.core_version.unsupported` apply
//! to a JobSpec.
//!
//! - malformed: not a lock (no recipe name, version, digest or runtime id);
//! - runtime_removed: the catalog no longer serves the recipe;
//! - sdk_incompatible: the client's core version is outside the recipe's requires.core;
//! - current: version, digest and runtime id are the catalog's: admission accepts it;
//! - incompatible: another framework, or a lock newer than the catalog's recipe;
//! - compatible: the same version with other digests or runtime (a rebuilt release);
//! - upgrade_advised: an older version of the recipe.
//!
//! A lock is read as any document is (within the default limits), then as Python's
//! `json` module reads it: the lock's fields are named in messages the way the
//! service has always named them (Python's `str()` of the value), so clients that
//! match on the messages see no difference.

use std::collections::HashMap;
use std::str::FromStr;

use pep440_rs::Version;

use crate::config::{core_version_allowed, CatalogEntry};
use crate::document;
use crate::limits::Limits;
use crate::rules::Rule;

/// The status of a lock, one of the words of `RecipeStatusResponse.status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Current,
    Compatible,
    UpgradeAdvised,
    Incompatible,
    SdkIncompatible,
    RuntimeRemoved,
    Malformed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Current => "current",
            Status::Compatible => "compatible",
            Status::UpgradeAdvised => "upgrade_advised",
            Status::Incompatible => "incompatible",
            Status::SdkIncompatible => "sdk_incompatible",
            Status::RuntimeRemoved => "runtime_removed",
            Status::Malformed => "malformed",
        }
    }
}

/// How a lock stands, what it means, and the catalog's terms for its recipe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecipeStatus {
    pub status: Status,
    /// What it means and what to do, naming both versions.
    pub message: String,
    /// The catalog's recipe version, digest and runtime id, when it serves the recipe.
    pub catalog: Option<Served>,
}

/// The catalog's terms for one recipe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    pub version: String,
    pub digest: String,
    pub runtime_id: String,
}

/// A lock past the document limits (`limits.size`, `limits.depth`): a request that
/// cannot be handled, not a lock to judge. The message says which limit.
#[derive(Debug, PartialEq, Eq)]
pub struct LockUnreadable(pub String);

/// The status of the lock `lock` against `catalog` (`None`: no catalog is configured),
/// for a client of core version `core_version` (empty: the lock's
/// `created_by.core_version`). Each step answers or hands on to the next: the lock
/// read, its fields found, the recipe served, the client's core allowed, then the
/// locked terms compared with the catalog's.
pub fn recipe_status(
    catalog: Option<&HashMap<String, CatalogEntry>>,
    lock: &[u8],
    core_version: &str,
) -> Result<RecipeStatus, LockUnreadable> {
    let lock = match read_lock(lock)? {
        Ok(lock) => lock,
        Err(malformed) => return Ok(malformed),
    };
    let locked = match Locked::of(&lock) {
        Ok(locked) => locked,
        Err(why) => return Ok(malformed(&why)),
    };
    let Some(entry) = catalog.and_then(|c| c.get(&locked.name)) else {
        return Ok(not_served(&locked.name, catalog));
    };
    let core = if core_version.is_empty() {
        lock_core_version(&lock)
    } else {
        core_version.to_string()
    };
    let (status, message) =
        core_outside(&locked.name, entry, &core).unwrap_or_else(|| compare(&locked, entry));
    Ok(RecipeStatus {
        status,
        message,
        catalog: Some(Served {
            version: entry.version.clone(),
            digest: entry.digest.clone(),
            runtime_id: entry.runtime_id.clone(),
        }),
    })
}

fn malformed(why: &str) -> RecipeStatus {
    RecipeStatus {
        status: Status::Malformed,
        message: format!("the lock is not a recipe.lock.json: {why}"),
        catalog: None,
    }
}

/// The lock as Python's `json` reads it; `Ok(Err(…))` when it is no lock at all, and
/// `Err` when it is past the document limits.
fn read_lock(lock: &[u8]) -> Result<Result<PyValue, RecipeStatus>, LockUnreadable> {
    let text = match document::reading(lock, &Limits::default()) {
        Ok(text) => text,
        Err(v) if matches!(v.rule, Rule::LimitsSize | Rule::LimitsDepth) => {
            return Err(LockUnreadable(v.message))
        }
        Err(v) => return Ok(Err(malformed(&v.message))),
    };
    Ok(PyValue::parse(&text).ok_or_else(|| malformed("it cannot be read as JSON")))
}

/// What a lock pins, each field as Python's `str()` gives it.
struct Locked {
    name: String,
    version: String,
    digest: String,
    runtime_id: String,
    /// `framework.kind`; empty when the lock does not say.
    kind: String,
}

impl Locked {
    /// The pinned fields; `Err` says which is missing, as Python's `KeyError` or
    /// `TypeError` would.
    fn of(lock: &PyValue) -> Result<Locked, String> {
        let recipe = lock.subscript("recipe")?;
        let framework = lock.subscript("framework")?;
        Ok(Locked {
            name: recipe.subscript("name")?.py_str(),
            version: recipe.subscript("version")?.py_str(),
            digest: recipe.subscript("digest")?.py_str(),
            runtime_id: framework.subscript("runtime_id")?.py_str(),
            kind: framework
                .get("kind")
                .map_or_else(String::new, PyValue::py_str),
        })
    }
}

/// `runtime_removed`: the catalog does not serve `name`, and what it serves.
fn not_served(name: &str, catalog: Option<&HashMap<String, CatalogEntry>>) -> RecipeStatus {
    let mut served: Vec<&str> = catalog
        .map(|c| c.keys().map(String::as_str).collect())
        .unwrap_or_default();
    served.sort_unstable();
    let served = if served.is_empty() {
        "none".to_string()
    } else {
        served.join(", ")
    };
    RecipeStatus {
        status: Status::RuntimeRemoved,
        message: format!("the catalog no longer serves {name} (served: {served}); choose another recipe and `sf recipe upgrade`"),
        catalog: None,
    }
}

/// `sdk_incompatible` when the client's core version `core` (if known) is outside the
/// recipe's `requires.core`.
fn core_outside(name: &str, entry: &CatalogEntry, core: &str) -> Option<(Status, String)> {
    let (raw, specifiers) = entry.requires_core.as_ref()?;
    if core.is_empty() || core_version_allowed(specifiers, core) == Ok(true) {
        return None;
    }
    Some((
        Status::SdkIncompatible,
        format!(
            "client core {core} is outside {raw}, which {name} {} requires; upgrade the client",
            entry.version
        ),
    ))
}

/// The locked terms against the catalog's: `current`, `incompatible` (another
/// framework, a newer or incomparable version), `compatible` (the same version
/// rebuilt) or `upgrade_advised` (an older version).
fn compare(locked: &Locked, entry: &CatalogEntry) -> (Status, String) {
    let Locked {
        name,
        version,
        digest,
        runtime_id,
        kind,
    } = locked;
    if (version, digest, runtime_id) == (&entry.version, &entry.digest, &entry.runtime_id) {
        return (
            Status::Current,
            format!("{name} {version} is the catalog's; admission accepts it"),
        );
    }
    let order = match (pep440(version), pep440(&entry.version)) {
        (Some(locked), Some(served)) => Some(locked.cmp(&served)),
        _ => None,
    };
    let older = order == Some(std::cmp::Ordering::Less);
    let newer = order == Some(std::cmp::Ordering::Greater);
    let other_framework =
        !kind.is_empty() && !entry.framework_kind.is_empty() && *kind != entry.framework_kind;
    if other_framework || newer {
        let locked_kind = if kind.is_empty() {
            "unknown framework"
        } else {
            kind
        };
        return (
            Status::Incompatible,
            format!(
                "the lock pins {name} {version} ({locked_kind}) but the catalog serves {} ({}); re-lock with `sf recipe upgrade`",
                entry.version, entry.framework_kind
            ),
        );
    }
    if *version == entry.version {
        return (
            Status::Compatible,
            format!("{name} {version} was rebuilt: digest or runtime differ from the catalog's; `sf recipe upgrade` refreshes the lock"),
        );
    }
    if older {
        return (
            Status::UpgradeAdvised,
            format!(
                "the lock pins {name} {version}; the catalog serves {}; run `sf recipe upgrade`",
                entry.version
            ),
        );
    }
    (
        Status::Incompatible,
        format!(
            "the lock pins {name} {version}, which cannot be compared with the catalog's {}",
            entry.version
        ),
    )
}

/// A PEP 440 version, surrounding whitespace aside as PEP 440 allows.
fn pep440(text: &str) -> Option<Version> {
    Version::from_str(text.trim()).ok()
}

/// `created_by.core_version` as Python's `str()` gives it; empty when missing or falsy.
/// A `created_by` that is not an object says nothing about the core.
fn lock_core_version(lock: &PyValue) -> String {
    match lock.get("created_by") {
        Some(created_by @ PyValue::Dict(_)) => created_by
            .get("core_version")
            .filter(|v| v.truthy())
            .map_or_else(String::new, PyValue::py_str),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------- the lock as Python reads it

/// A JSON value as Python's `json.loads` gives it: integers exact, objects keeping the
/// first position and the last value of a repeated key.
#[derive(Clone, Debug, PartialEq)]
enum PyValue {
    Null,
    Bool(bool),
    /// The decimal digits of an integer, as Python's `int` prints it.
    Int(String),
    Float(f64),
    Str(String),
    List(Vec<PyValue>),
    Dict(Vec<(String, PyValue)>),
}

impl PyValue {
    /// Parses JSON text that the document reader has already accepted; `None` if it is
    /// not JSON after all.
    fn parse(text: &[u8]) -> Option<PyValue> {
        let text = std::str::from_utf8(text).ok()?;
        let mut reader = JsonReader { text, at: 0 };
        let value = reader.value()?;
        reader.skip_space();
        (reader.at == text.len()).then_some(value)
    }

    fn type_name(&self) -> &'static str {
        match self {
            PyValue::Null => "NoneType",
            PyValue::Bool(_) => "bool",
            PyValue::Int(_) => "int",
            PyValue::Float(_) => "float",
            PyValue::Str(_) => "str",
            PyValue::List(_) => "list",
            PyValue::Dict(_) => "dict",
        }
    }

    /// `dict.get(key)`, or `None` for anything else.
    fn get(&self, key: &str) -> Option<&PyValue> {
        match self {
            PyValue::Dict(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// `value[key]`: `Err` is the text of the `KeyError` or `TypeError` Python raises.
    fn subscript(&self, key: &str) -> Result<&PyValue, String> {
        match self {
            PyValue::Dict(_) => self.get(key).ok_or_else(|| py_repr_str(key)),
            PyValue::List(_) => Err("list indices must be integers or slices, not str".into()),
            PyValue::Str(_) => Err("string indices must be integers, not 'str'".into()),
            other => Err(format!(
                "'{}' object is not subscriptable",
                other.type_name()
            )),
        }
    }

    fn truthy(&self) -> bool {
        match self {
            PyValue::Null => false,
            PyValue::Bool(b) => *b,
            PyValue::Int(digits) => digits != "0",
            PyValue::Float(f) => *f != 0.0,
            PyValue::Str(s) => !s.is_empty(),
            PyValue::List(items) => !items.is_empty(),
            PyValue::Dict(entries) => !entries.is_empty(),
        }
    }

    /// Python's `str(value)`.
    fn py_str(&self) -> String {
        match self {
            PyValue::Str(s) => s.clone(),
            other => other.py_repr(),
        }
    }

    /// Python's `repr(value)`.
    fn py_repr(&self) -> String {
        match self {
            PyValue::Null => "None".into(),
            PyValue::Bool(true) => "True".into(),
            PyValue::Bool(false) => "False".into(),
            PyValue::Int(digits) => digits.clone(),
            PyValue::Float(f) => py_repr_float(*f),
            PyValue::Str(s) => py_repr_str(s),
            PyValue::List(items) => {
                let items: Vec<String> = items.iter().map(PyValue::py_repr).collect();
                format!("[{}]", items.join(", "))
            }
            PyValue::Dict(entries) => {
                let entries: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| format!("{}: {}", py_repr_str(k), v.py_repr()))
                    .collect();
                format!("{{{}}}", entries.join(", "))
            }
        }
    }
}

/// Python's `repr(float)`: the shortest text that reads back, in positional notation
/// from 1e-4 up to 1e16 and in scientific notation outside it.
fn py_repr_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7", "1e16", "0e0".
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exponent) {
        let point = exponent + 1;
        let text = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{text}")
    } else {
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exponent_sign}{:02}", exponent.abs())
    }
}

/// Python's `repr(str)`: single quotes unless the text holds one and no double quote,
/// and escapes for what is not printable.
fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_ascii() || py_printable(c) => out.push(c),
            c if (c as u32) <= 0xff => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable` for a character beyond ASCII: not a control, format,
/// separator, private-use or noncharacter code point. (Code points Unicode has not
/// assigned yet count as printable here.)
fn py_printable(c: char) -> bool {
    let n = c as u32;
    !matches!(n,
        0x80..=0xa0 // C1 controls, no-break space
        | 0xad // soft hyphen
        | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x890..=0x891 | 0x8e2
        | 0x1680 | 0x180e
        | 0x2000..=0x200f // spaces, zero-width and direction marks
        | 0x2028..=0x202f // line and paragraph separators, embeddings, narrow space
        | 0x205f..=0x206f
        | 0x3000 | 0xe000..=0xf8ff | 0xfdd0..=0xfdef | 0xfeff | 0xfff9..=0xfffb
        | 0x110bd | 0x110cd | 0x13430..=0x1343f | 0x1bca0..=0x1bca3 | 0x1d173..=0x1d17a
        | 0xe0001 | 0xe0020..=0xe007f | 0xf0000..=0x10ffff
    ) && (n & 0xfffe) != 0xfffe
}

/// A reader of JSON text already known to be well formed (nesting within the
/// document limits).
struct JsonReader<'t> {
    text: &'t str,
    at: usize,
}

impl JsonReader<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &str, value: PyValue) -> Option<PyValue> {
        self.text[self.at..].starts_with(word).then(|| {
            self.at += word.len();
            value
        })
    }

    fn value(&mut self) -> Option<PyValue> {
        self.skip_space();
        match self.peek()? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => self.string().map(PyValue::Str),
            b't' => self.literal("true", PyValue::Bool(true)),
            b'f' => self.literal("false", PyValue::Bool(false)),
            b'n' => self.literal("null", PyValue::Null),
            _ => self.number(),
        }
    }

    fn object(&mut self) -> Option<PyValue> {
        self.at += 1;
        let mut entries: Vec<(String, PyValue)> = Vec::new();
        self.skip_space();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(PyValue::Dict(entries));
        }
        loop {
            self.skip_space();
            let key = self.string()?;
            self.skip_space();
            (self.peek()? == b':').then_some(())?;
            self.at += 1;
            let value = self.value()?;
            // A repeated key keeps its first place and takes the last value, as in a dict.
            match entries.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = value,
                None => entries.push((key, value)),
            }
            self.skip_space();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(PyValue::Dict(entries));
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self) -> Option<PyValue> {
        self.at += 1;
        let mut items = Vec::new();
        self.skip_space();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(PyValue::List(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_space();
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(PyValue::List(items));
                }
                _ => return None,
            }
        }
    }

    fn string(&mut self) -> Option<String> {
        (self.peek()? == b'"').then_some(())?;
        self.at += 1;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.at..];
            let stop = rest.find(['"', '\\'])?;
            out.push_str(&rest[..stop]);
            self.at += stop;
            if self.peek()? == b'"' {
                self.at += 1;
                return Some(out);
            }
            self.at += 1;
            let escape = self.peek()?;
            self.at += 1;
            match escape {
                b'"' => out.push('"'),
                b'\\' => out.push('\\'),
                b'/' => out.push('/'),
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                b'u' => {
                    let high = self.hex4()?;
                    let code = if (0xd800..0xdc00).contains(&high)
                        && self.text[self.at..].starts_with("\\u")
                    {
                        let save = self.at;
                        self.at += 2;
                        let low = self.hex4()?;
                        if (0xdc00..0xe000).contains(&low) {
                            0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00)
                        } else {
                            self.at = save;
                            high
                        }
                    } else {
                        high
                    };
                    // A lone surrogate has no place in text; it reads as the replacement.
                    out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                }
                _ => return None,
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.text.get(self.at..self.at + 4)?;
        let code = u32::from_str_radix(digits, 16).ok()?;
        self.at += 4;
        Some(code)
    }

    fn number(&mut self) -> Option<PyValue> {
        let start = self.at;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.at += 1;
        }
        let lexeme = &self.text[start..self.at];
        if lexeme.is_empty() {
            return None;
        }
        if lexeme.contains(['.', 'e', 'E']) {
            return lexeme.parse::<f64>().ok().map(PyValue::Float);
        }
        // JSON integers have no leading zeros; only "-0" needs writing as Python does.
        let digits = if lexeme == "-0" { "0" } else { lexeme };
        Some(PyValue::Int(digits.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> HashMap<String, CatalogEntry> {
        let mut entry = CatalogEntry::new("nemo-rl/grpo", "0.7.0", "sha256:d", "nemo-rl-0.7.0")
            .with_requires_core(">=0.1,<1")
            .unwrap();
        entry.framework_kind = "nemo-rl".into();
        HashMap::from([(entry.name.clone(), entry)])
    }

    fn status_of(lock: &str, core: &str) -> (Status, String) {
        let s = recipe_status(Some(&catalog()), lock.as_bytes(), core).unwrap();
        (s.status, s.message)
    }

    const LOCK: &str = r#"{"recipe": {"name": "nemo-rl/grpo", "version": "0.7.0", "digest": "sha256:d"}, "framework": {"kind": "nemo-rl", "runtime_id": "nemo-rl-0.7.0"}, "created_by": {"core_version": "0.3.0"}}"#;

    #[test]
    fn statuses_by_the_handshake() {
        assert_eq!(status_of(LOCK, "").0, Status::Current);
        assert_eq!(status_of(LOCK, "2.0.0").0, Status::SdkIncompatible);
        let older = LOCK.replace("\"0.7.0\"", "\"0.6.0\"");
        assert_eq!(status_of(&older, "").0, Status::UpgradeAdvised);
        let newer = LOCK.replace("\"0.7.0\"", "\"0.8.0\"");
        assert_eq!(status_of(&newer, "").0, Status::Incompatible);
        let rebuilt = LOCK.replace("sha256:d", "sha256:e");
        assert_eq!(status_of(&rebuilt, "").0, Status::Compatible);
        let other = LOCK.replace("nemo-rl/grpo", "trl/grpo");
        assert_eq!(
            status_of(&other, ""),
            (
                Status::RuntimeRemoved,
                "the catalog no longer serves trl/grpo (served: nemo-rl/grpo); choose another recipe and `sf recipe upgrade`".into()
            )
        );
    }

    #[test]
    fn malformed_locks_say_what_python_would() {
        assert_eq!(
            status_of("{}", ""),
            (
                Status::Malformed,
                "the lock is not a recipe.lock.json: 'recipe'".into()
            )
        );
        assert_eq!(
            status_of(r#"{"recipe": [], "framework": {}}"#, "").1,
            "the lock is not a recipe.lock.json: list indices must be integers or slices, not str"
        );
        assert_eq!(
            status_of("[1]", "").1,
            "the lock is not a recipe.lock.json: the top level must be an object, got an array of 1 item"
        );
        assert!(matches!(
            recipe_status(None, "[".repeat(100_000).as_bytes(), ""),
            Err(LockUnreadable(_))
        ));
    }

    #[test]
    fn values_are_named_as_python_prints_them() {
        let value = |json: &str| PyValue::parse(json.as_bytes()).unwrap().py_str();
        assert_eq!(value("1.0"), "1.0");
        assert_eq!(value("1e16"), "1e+16");
        assert_eq!(value("1.5e-5"), "1.5e-05");
        assert_eq!(value("0.0001"), "0.0001");
        assert_eq!(value("123456789012345678.0"), "1.2345678901234568e+17");
        assert_eq!(value("-0.0"), "-0.0");
        assert_eq!(value("1e400"), "inf");
        assert_eq!(value("-0"), "0");
        assert_eq!(value("12345678901234567890123"), "12345678901234567890123");
        assert_eq!(value("[true, null, \"a'b\"]"), "[True, None, \"a'b\"]");
        assert_eq!(
            value(r#"{"k": 1, "j": [], "k": "x\u0001\u00a0é"}"#),
            r#"{'k': 'x\x01\xa0é', 'j': []}"#
        );
    }
}
