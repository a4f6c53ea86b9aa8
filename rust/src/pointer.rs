//! JSON Pointers (RFC 6901): the one way a violation's place is written. A `Place`
//! says where a violation is (`Here`, a `Child` key of the value being walked, or a
//! pointer from the root written `ptr!["spec", "pools", i, "name"]`) and is rendered
//! to a string only when the violation is kept. `Path` is the walk's current
//! position, pushed segment by segment as the collector descends (`Ctx::within`).

#[derive(Clone, Copy, Debug)]
pub enum Segment<'a> {
    Key(&'a str),
    Index(usize),
    /// Several keys in a row, e.g. `["train", "dataset"]` from a table of places.
    Keys(&'a [&'a str]),
}

impl<'a> From<&'a str> for Segment<'a> {
    #[inline]
    fn from(key: &'a str) -> Self {
        Segment::Key(key)
    }
}

impl<'a> From<&'a String> for Segment<'a> {
    #[inline]
    fn from(key: &'a String) -> Self {
        Segment::Key(key)
    }
}

impl From<usize> for Segment<'_> {
    #[inline]
    fn from(index: usize) -> Self {
        Segment::Index(index)
    }
}

impl<'a> From<&'a [&'a str]> for Segment<'a> {
    #[inline]
    fn from(keys: &'a [&'a str]) -> Self {
        Segment::Keys(keys)
    }
}

/// The path from the document root to the value being checked.
#[derive(Default, Debug)]
pub struct Path<'a> {
    segments: Vec<Segment<'a>>,
}

impl<'a> Path<'a> {
    pub fn new() -> Self {
        Path {
            segments: Vec::with_capacity(16),
        }
    }

    #[inline]
    pub fn push(&mut self, segment: Segment<'a>) {
        self.segments.push(segment);
    }

    #[inline]
    pub fn pop(&mut self) {
        self.segments.pop();
    }

    pub fn render(&self) -> String {
        render(&self.segments)
    }
}

/// Where a violation is, rendered to its pointer only when the violation is kept.
pub trait Place {
    fn render(self, here: &Path<'_>) -> String;
}

/// The value being walked.
#[derive(Clone, Copy, Debug)]
pub struct Here;

impl Place for Here {
    #[inline]
    fn render(self, here: &Path<'_>) -> String {
        here.render()
    }
}

/// A key of the value being walked (a missing field, an unknown one), not pushed.
#[derive(Clone, Copy, Debug)]
pub struct Child<'a>(pub &'a str);

impl Place for Child<'_> {
    fn render(self, here: &Path<'_>) -> String {
        child(here, Segment::Key(self.0))
    }
}

/// The pointer of `segment` below the value being walked, without pushing it.
pub fn child(here: &Path<'_>, segment: Segment<'_>) -> String {
    let mut out = here.render();
    push_segment(&mut out, segment);
    out
}

/// A pointer from the document root; written with `ptr!`.
#[derive(Clone, Copy, Debug)]
pub struct Pointer<'a, const N: usize>(pub [Segment<'a>; N]);

/// The pointer as text, e.g. `/spec/resources/pools/0/name`.
impl<const N: usize> std::fmt::Display for Pointer<'_, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&render(&self.0))
    }
}

impl<const N: usize> Place for Pointer<'_, N> {
    #[inline]
    fn render(self, _: &Path<'_>) -> String {
        render(&self.0)
    }
}

/// A pointer rendered earlier, where the place was found (`gpus::Unusable`).
impl Place for String {
    #[inline]
    fn render(self, _: &Path<'_>) -> String {
        self
    }
}

/// A pointer from the document root: `ptr!["spec", "pools", i, "name"]` (keys are
/// `&str`, indexes `usize`, a run of keys `&[&str]`); `ptr![]` is the root.
macro_rules! ptr {
    ($($segment:expr),* $(,)?) => {
        $crate::pointer::Pointer([$($crate::pointer::Segment::from($segment)),*])
    };
}
pub(crate) use ptr;

pub fn render(segments: &[Segment<'_>]) -> String {
    let mut out = String::with_capacity(segments.len() * 12);
    for segment in segments {
        push_segment(&mut out, *segment);
    }
    out
}

fn push_segment(out: &mut String, segment: Segment<'_>) {
    match segment {
        Segment::Key(key) => {
            out.push('/');
            escape_into(out, key);
        }
        Segment::Index(i) => {
            out.push('/');
            out.push_str(&i.to_string());
        }
        Segment::Keys(keys) => {
            for key in keys {
                out.push('/');
                escape_into(out, key);
            }
        }
    }
}

fn escape_into(out: &mut String, key: &str) {
    if !key.contains(['~', '/']) {
        out.push_str(key);
        return;
    }
    for c in key.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_tilde_and_slash() {
        let mut p = Path::new();
        p.push(Segment::Key("spec"));
        p.push(Segment::Key("a/b~c"));
        p.push(Segment::Index(3));
        assert_eq!(p.render(), "/spec/a~1b~0c/3");
        assert_eq!(Child("x/y").render(&p), "/spec/a~1b~0c/3/x~1y");
        assert_eq!(Here.render(&p), "/spec/a~1b~0c/3");
        assert_eq!(ptr![].to_string(), "");
        let run: &[&str] = &["train", "dataset"];
        assert_eq!(
            ptr!["spec", "data", run, 2usize, "a~"].to_string(),
            "/spec/data/train/dataset/2/a~0"
        );
    }
}
