//! JSON Pointer paths (RFC 6901), pushed segment by segment while walking and
//! rendered to a string only when a violation needs one.

#[derive(Clone, Copy, Debug)]
pub enum Segment<'a> {
    Key(&'a str),
    Index(usize),
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
    pub fn push_key(&mut self, key: &'a str) {
        self.segments.push(Segment::Key(key));
    }

    #[inline]
    pub fn push_index(&mut self, index: usize) {
        self.segments.push(Segment::Index(index));
    }

    #[inline]
    pub fn pop(&mut self) {
        self.segments.pop();
    }

    pub fn render(&self) -> String {
        render(&self.segments)
    }

    /// The pointer of a child of the current value, without pushing it.
    pub fn child(&self, key: &str) -> String {
        let mut out = self.render();
        out.push('/');
        escape_into(&mut out, key);
        out
    }
}

pub fn render(segments: &[Segment<'_>]) -> String {
    let mut out = String::with_capacity(segments.len() * 12);
    for segment in segments {
        out.push('/');
        match segment {
            Segment::Key(key) => escape_into(&mut out, key),
            Segment::Index(i) => out.push_str(&i.to_string()),
        }
    }
    out
}

/// Builds a pointer from literal keys, e.g. `pointer(&["spec", "recipe", "name"])`.
pub fn pointer(keys: &[&str]) -> String {
    let mut out = String::new();
    for key in keys {
        out.push('/');
        escape_into(&mut out, key);
    }
    out
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
        p.push_key("spec");
        p.push_key("a/b~c");
        p.push_index(3);
        assert_eq!(p.render(), "/spec/a~1b~0c/3");
        assert_eq!(pointer(&[]), "");
    }
}
