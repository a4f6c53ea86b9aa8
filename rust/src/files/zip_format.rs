//! The zip format, checked whole before one byte is inflated.
//!
//! Zip readers disagree on archives that are not laid out exactly: `zipfile` and
//! `unzip` trust the central directory and forgive data before it, streaming readers
//! trust the local headers, `unzip` obeys the Info-ZIP Unicode Path field that
//! `zipfile` ignores, and a name map keeps only the last of two equal names. This
//! module admits only archives on which they all agree: local headers tiling the file
//! from byte 0 to the central directory, each matching its central entry, the central
//! directory ending where the end record begins, and the end record ending the file.
//! Owns the zip layout and inflation; must not decide what a member may be.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::archive::{clipped, refusal, refused, MemberKind, PackageError, Visitor};
use super::budget::{Meter, Metered};
use super::streams::read_up_to;
use crate::limits::PackageLimits;

const LOCAL: &[u8] = b"PK\x03\x04";
const CENTRAL: &[u8] = b"PK\x01\x02";
const END: &[u8] = b"PK\x05\x06";
const ZIP64_LOCATOR: &[u8] = b"PK\x06\x07";
const DESCRIPTOR: &[u8] = b"PK\x07\x08";
const END_LEN: u64 = 22;
const CENTRAL_LEN: usize = 46;
const LOCAL_LEN: u64 = 30;
/// `zipfile` and `unzip` look for the end record in the last 64 KiB and the record.
const END_WINDOW: u64 = (1 << 16) + END_LEN;

const FLAG_ENCRYPTED: u16 = 1;
const FLAG_DESCRIPTOR: u16 = 1 << 3;
const FLAG_STRONG_ENCRYPTION: u16 = 1 << 6;
const FLAG_UTF8: u16 = 1 << 11;
/// The flags read: deflate options (bits 1-2), data descriptor, UTF-8 names.
const FLAGS_READ: u16 = 0b110 | FLAG_DESCRIPTOR | FLAG_UTF8;
/// The highest "version needed to extract" every extractor opens: Info-ZIP's UnZip 6.0
/// refuses above 4.6 (exit 81), `zipfile` above 6.3.
const MAX_VERSION: u16 = 46;

const ZIP64_WHY: &str = "which jobgate does not read: a package stays far below 4 GiB (limits.max_package_bytes is 1 GiB by default), so rebuild it as a plain zip";

/// One member, as its central directory and local header both describe it.
#[derive(Debug)]
struct Entry {
    name: String,
    flags: u16,
    method: u16,
    crc: u32,
    compressed: u64,
    size: u64,
    offset: u64,
    /// Where its data starts, once its local header is read.
    data: u64,
    mode: u32,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Up to `len` bytes at `at` (fewer only at the end of the file).
fn read_at(file: &File, at: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    Ok(buf)
}

fn read_exact_at(file: &File, at: u64, len: u64, what: &str) -> io::Result<Vec<u8>> {
    let buf = read_at(file, at, len)?;
    if (buf.len() as u64) < len {
        return Err(refusal(format!("ends inside {what}; it is truncated")));
    }
    Ok(buf)
}

/// The end record `zipfile` would take (the last signature with a whole record after
/// it, in the last 64 KiB): its offset and bytes.
fn end_record(file: &File, len: u64) -> io::Result<Option<(u64, Vec<u8>)>> {
    let window = len.min(END_WINDOW);
    let tail = read_at(file, len - window, window)?;
    let last = (0..tail.len().saturating_sub(END_LEN as usize - 1))
        .rev()
        .find(|&i| tail[i..].starts_with(END));
    Ok(last.map(|i| {
        (
            len - window + i as u64,
            tail[i..i + END_LEN as usize].to_vec(),
        )
    }))
}

/// Where a zip reader would find a zip archive in a file that is not meant to be one
/// (a tar with a zip appended, or holding one last): the end record's offset.
pub fn zip_inside(file: &File, len: u64) -> io::Result<Option<u64>> {
    let Some((at, end)) = end_record(file, len)? else {
        return Ok(None);
    };
    let cd_size = u64::from(u32_at(&end, 12));
    if at >= 20 && read_at(file, at - 20, 4)? == ZIP64_LOCATOR {
        return Ok(Some(at));
    }
    if cd_size > at {
        return Ok(None);
    }
    // zipfile opens it when its central directory starts where the end record says.
    let opens = cd_size == 0 || read_at(file, at - cd_size, 4)? == CENTRAL;
    Ok(opens.then_some(at))
}

/// Checks the whole layout and what it declares against the inflate budget, then
/// streams every member through `visit` in central directory order, charged to `meter`
/// as it inflates.
pub fn visit(
    path: &Path,
    file: &File,
    limits: &PackageLimits,
    meter: &Meter,
    visit: &mut Visitor<'_>,
) -> Result<(), PackageError> {
    let io_error = |e| super::archive::read_error(path, e);
    let len = file.metadata().map_err(io_error)?.len();
    if super::tar_format::is_header(&read_at(file, 0, 512).map_err(io_error)?) {
        return Err(refused(path, "is both a zip and a tar archive (its first block is a valid tar header); rebuild it as one archive"));
    }
    let entries = layout(file, len, limits).map_err(|e| match e {
        Fault::Refused(why) => refused(path, why),
        Fault::Size(m) => PackageError::Size(m),
        Fault::Io(e) => io_error(e),
    })?;
    // No member inflates past its declared size (`EntryReader`): a deflate bomb is
    // refused from its central directory, before one byte inflates.
    let declared = entries.iter().fold(0u64, |n, e| n.saturating_add(e.size));
    if let Some(why) = meter.refuse_declared(declared) {
        return Err(PackageError::Size(format!(
            "the package {} {why}",
            path.display()
        )));
    }
    for e in &entries {
        if e.name.ends_with('/') {
            visit(&e.name, MemberKind::Directory, 0, &mut io::empty())?;
            continue;
        }
        let kind = match e.mode & 0o170000 {
            0 | 0o100000 => MemberKind::Regular,
            0o120000 => MemberKind::Link,
            0o020000 | 0o060000 | 0o010000 => MemberKind::Device,
            _ => MemberKind::Other,
        };
        let mut reader = Metered::new(EntryReader::new(file, e), meter);
        visit(&e.name, kind, e.size, &mut reader)?;
    }
    Ok(())
}

enum Fault {
    Refused(String),
    Size(String),
    Io(io::Error),
}

impl From<io::Error> for Fault {
    fn from(e: io::Error) -> Self {
        Fault::Io(e)
    }
}

impl From<String> for Fault {
    fn from(why: String) -> Self {
        Fault::Refused(why)
    }
}

/// Where each member is, from the central directory, checked in three steps: the end
/// record (`end_of_archive`), the central entries (`central_entries`), and the local
/// headers and data tiling the file up to the central directory (`tile_members`).
fn layout(file: &File, len: u64, limits: &PackageLimits) -> Result<Vec<Entry>, Fault> {
    let directory = end_of_archive(file, len, limits)?;
    let entries = central_entries(file, &directory, limits)?;
    tile_members(file, entries, directory.offset)
}

/// The central directory as the end record places it.
struct CentralDirectory {
    /// Its entries, as the end record counts them.
    count: u16,
    offset: u64,
    end: u64,
}

/// The one end record that ends the file, with nothing appended, no ZIP64, one disk,
/// at most `max_members` entries, and a central directory ending where it begins.
fn end_of_archive(
    file: &File,
    len: u64,
    limits: &PackageLimits,
) -> Result<CentralDirectory, Fault> {
    let Some((at, end)) = end_record(file, len)? else {
        return Err("has no zip end-of-central-directory record, so it is not a whole zip archive; it may be truncated".to_string().into());
    };
    let comment = u64::from(u16_at(&end, 20));
    // Readers search for the end record from either side: exactly one may end the file.
    let window = len.min(END_WINDOW);
    let tail = read_at(file, len - window, window)?;
    let ending = (0..tail.len().saturating_sub(END_LEN as usize - 1))
        .filter(|&i| {
            tail[i..].starts_with(END)
                && i + END_LEN as usize + usize::from(u16_at(&tail, i + 20)) == tail.len()
        })
        .count();
    if ending > 1 || (ending == 1 && at + END_LEN + comment != len) {
        return Err("hides a zip end-of-central-directory signature in its archive comment, so zip readers disagree on where the archive ends; rebuild it without that comment".to_string().into());
    }
    if at + END_LEN + comment < len {
        return Err(format!("has {} bytes after its zip end-of-central-directory record (something was appended); rebuild it so that nothing follows the archive", len - at - END_LEN - comment).into());
    }
    if at + END_LEN + comment > len {
        return Err(
            "has a zip archive comment that runs past the end of the file; it is truncated"
                .to_string()
                .into(),
        );
    }
    let (disk, cd_disk) = (u16_at(&end, 4), u16_at(&end, 6));
    let (on_disk, count) = (u16_at(&end, 8), u16_at(&end, 10));
    let cd_size = u64::from(u32_at(&end, 12));
    let cd_offset = u64::from(u32_at(&end, 16));
    let zip64_locator = at >= 20 && read_at(file, at - 20, 4)? == ZIP64_LOCATOR;
    if zip64_locator || count == 0xffff || cd_size == 0xffff_ffff || cd_offset == 0xffff_ffff {
        return Err(format!("uses ZIP64 end records, {ZIP64_WHY}").into());
    }
    if disk != 0 || cd_disk != 0 || on_disk != count {
        return Err("is a multi-disk zip archive; rebuild it as one file"
            .to_string()
            .into());
    }
    if usize::from(count) > limits.max_members {
        return Err(Fault::Size(format!(
            "the package holds more than {} members",
            limits.max_members
        )));
    }
    let cd_end = cd_offset + cd_size;
    if cd_end < at {
        return Err(format!("has {} bytes that its zip central directory does not account for, before its end record (data prepended to the zip or hidden before its end); rebuild it as one archive", at - cd_end).into());
    }
    if cd_end > at {
        return Err(
            "has a zip central directory that runs past its end record; it is malformed"
                .to_string()
                .into(),
        );
    }
    Ok(CentralDirectory {
        count,
        offset: cd_offset,
        end: cd_end,
    })
}

/// Every entry of the central directory, each checked on its own (`central_entry`),
/// exactly as many as the end record counts, declaring at most `max_bytes` in all.
fn central_entries(
    file: &File,
    directory: &CentralDirectory,
    limits: &PackageLimits,
) -> Result<Vec<Entry>, Fault> {
    let count = directory.count;
    let mut cd = BufReader::new(At {
        file,
        pos: directory.offset,
        end: directory.end,
    });
    let mut entries: Vec<Entry> = Vec::with_capacity(usize::from(count));
    let mut declared = 0u64;
    for i in 0..count {
        let entry = central_entry(&mut cd, i, count)?;
        declared = declared.saturating_add(entry.size);
        entries.push(entry);
    }
    if !cd.fill_buf()?.is_empty() {
        return Err(format!("has a zip central directory holding more than the {count} entries its end record counts; zip readers disagree on such archives").into());
    }
    // The central directory states every size: a bomb is refused before one byte inflates.
    if declared > limits.max_bytes {
        return Err(Fault::Size(format!("the package declares {declared} bytes of members, over the limit of {}; refused before inflating it", limits.max_bytes)));
    }
    Ok(entries)
}

/// The `i`th central entry (of `count`): a plain, unencrypted, stored or deflated
/// member that zip readers agree on.
fn central_entry(cd: &mut impl Read, i: u16, count: u16) -> Result<Entry, Fault> {
    let mut fixed = [0u8; CENTRAL_LEN];
    if read_up_to(cd, &mut fixed)? < CENTRAL_LEN {
        return Err(format!("has a zip central directory holding fewer entries than the {count} its end record counts").into());
    }
    if !fixed.starts_with(CENTRAL) {
        return Err(format!(
            "has a malformed zip central directory (entry {} has no signature)",
            i + 1
        )
        .into());
    }
    let needed = u16_at(&fixed, 6);
    let flags = u16_at(&fixed, 8);
    let method = u16_at(&fixed, 10);
    let crc = u32_at(&fixed, 16);
    let compressed = u32_at(&fixed, 20);
    let size = u32_at(&fixed, 24);
    let (name_len, extra_len, comment_len) = (
        u64::from(u16_at(&fixed, 28)),
        u64::from(u16_at(&fixed, 30)),
        u64::from(u16_at(&fixed, 32)),
    );
    let start_disk = u16_at(&fixed, 34);
    let external = u32_at(&fixed, 38);
    let offset = u32_at(&fixed, 42);
    let mut raw = vec![0u8; name_len as usize];
    let mut extra = vec![0u8; extra_len as usize];
    let mut comment = vec![0u8; comment_len as usize];
    if read_up_to(cd, &mut raw)? < raw.len()
        || read_up_to(cd, &mut extra)? < extra.len()
        || read_up_to(cd, &mut comment)? < comment.len()
    {
        return Err(format!("has a zip central directory holding fewer entries than the {count} its end record counts").into());
    }
    let name = name(raw, flags)?;
    let shown = clipped(&name);
    if flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION) != 0 || method == 99 {
        return Err(format!("holds {shown} encrypted; a package is never encrypted").into());
    }
    if flags & !FLAGS_READ != 0 {
        return Err(format!("sets zip flags {:#06x} on {shown}, which zip readers treat differently; rebuild it with a plain zip writer", flags & !FLAGS_READ).into());
    }
    if method != 0 && method != 8 {
        return Err(format!(
            "compresses {shown} with zip method {method}; only stored (0) and deflate (8) are read"
        )
        .into());
    }
    if compressed == 0xffff_ffff || size == 0xffff_ffff || offset == 0xffff_ffff {
        return Err(format!("uses ZIP64 sizes for {shown}, {ZIP64_WHY}").into());
    }
    if start_disk != 0 {
        return Err("is a multi-disk zip archive; rebuild it as one file"
            .to_string()
            .into());
    }
    if needed & 0xff > MAX_VERSION {
        return Err(format!("needs zip version {}.{} to extract {shown}, newer than zip readers open; rebuild it with a plain zip writer", (needed & 0xff) / 10, (needed & 0xff) % 10).into());
    }
    extra_fields(&extra, &shown)?;
    if method == 0 && compressed != size {
        return Err(format!("stores {shown} uncompressed with a compressed size ({compressed}) other than its size ({size})").into());
    }
    if method == 0 && flags & FLAG_DESCRIPTOR != 0 {
        return Err(format!("stores {shown} uncompressed with its sizes after the data, where streaming zip readers cannot find its end; rebuild it with a seekable zip writer").into());
    }
    if name.ends_with('/') && size != 0 {
        return Err(format!(
            "holds the directory {shown} with {size} bytes of data, which extractors drop"
        )
        .into());
    }
    Ok(Entry {
        name,
        flags,
        method,
        crc,
        compressed: u64::from(compressed),
        size: u64::from(size),
        offset: u64::from(offset),
        data: 0,
        mode: external >> 16,
    })
}

/// The local headers, their data and descriptors tile `[0, cd_offset)` exactly: nothing
/// prepended, hidden between members or overlapping; each local header agrees with its
/// central entry (`local`).
fn tile_members(file: &File, mut entries: Vec<Entry>, cd_offset: u64) -> Result<Vec<Entry>, Fault> {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| entries[i].offset);
    let mut expected = 0u64;
    let mut previous: Option<usize> = None;
    for i in order {
        let e = &entries[i];
        if e.offset != expected {
            return Err(match previous {
                None => format!("has {} bytes before its first zip member (data prepended to the zip); a package is one archive from its first byte", e.offset),
                Some(p) if e.offset > expected => format!("has {} bytes between zip members {} and {} that no member accounts for", e.offset - expected, entries[p].name, e.name),
                Some(p) => format!("has zip members {} and {} overlapping each other", entries[p].name, e.name),
            }
            .into());
        }
        expected = local(file, &mut entries[i])?;
        previous = Some(i);
    }
    if expected != cd_offset {
        return Err(match previous {
            _ if expected > cd_offset => "has a zip member overlapping its central directory".to_string(),
            None => format!("has {cd_offset} bytes before its zip central directory that no member accounts for"),
            Some(p) => format!("has {} bytes between its last zip member {} and its central directory that no member accounts for", cd_offset - expected, entries[p].name),
        }
        .into());
    }
    Ok(entries)
}

/// Checks a member's local header against its central entry; returns where the member
/// ends (after its data and data descriptor).
fn local(file: &File, e: &mut Entry) -> Result<u64, Fault> {
    let what = format!("the local header of {}", e.name);
    let h = read_exact_at(file, e.offset, LOCAL_LEN, &what)?;
    if !h.starts_with(LOCAL) {
        return Err(format!(
            "has no zip local header where its central directory puts {}",
            e.name
        )
        .into());
    }
    let (flags, method) = (u16_at(&h, 6), u16_at(&h, 8));
    let (crc, compressed, size) = (u32_at(&h, 14), u32_at(&h, 18), u32_at(&h, 22));
    let (name_len, extra_len) = (u64::from(u16_at(&h, 26)), u64::from(u16_at(&h, 28)));
    let name = read_exact_at(file, e.offset + LOCAL_LEN, name_len, &what)?;
    if name != e.name.as_bytes() {
        return Err(format!("names a zip member {:?} in its local header and {:?} in its central directory; zip readers disagree on such archives", String::from_utf8_lossy(&name), e.name).into());
    }
    if flags != e.flags || method != e.method {
        return Err(format!("gives {} other flags or another method in its local header than in its central directory; zip readers disagree on such archives", e.name).into());
    }
    let extra = read_exact_at(file, e.offset + LOCAL_LEN + name_len, extra_len, &what)?;
    extra_fields(&extra, &e.name)?;
    if compressed == 0xffff_ffff || size == 0xffff_ffff {
        return Err(format!("uses ZIP64 sizes for {}, {ZIP64_WHY}", e.name).into());
    }
    let descriptor = flags & FLAG_DESCRIPTOR != 0;
    let agrees =
        |local: u32, central: u64| u64::from(local) == central || (descriptor && local == 0);
    if !agrees(crc, u64::from(e.crc)) || !agrees(compressed, e.compressed) || !agrees(size, e.size)
    {
        return Err(format!("gives {} another CRC-32 or size in its local header than in its central directory; zip readers disagree on such archives", e.name).into());
    }
    e.data = e.offset + LOCAL_LEN + name_len + extra_len;
    let mut end = e.data + e.compressed;
    if descriptor {
        let d = read_at(file, end, 16)?;
        let same = |b: &[u8]| {
            b.len() >= 12
                && u32_at(b, 0) == e.crc
                && u64::from(u32_at(b, 4)) == e.compressed
                && u64::from(u32_at(b, 8)) == e.size
        };
        if d.starts_with(DESCRIPTOR) && same(&d[4..]) {
            end += 16;
        } else if same(&d) {
            end += 12;
        } else {
            return Err(format!("has a data descriptor for {} that differs from its central directory; zip readers disagree on such archives", e.name).into());
        }
    }
    Ok(end)
}

/// A member name as every zip reader decodes it: ASCII, or UTF-8 with the UTF-8 flag.
fn name(raw: Vec<u8>, flags: u16) -> Result<String, String> {
    if flags & FLAG_UTF8 == 0 && !raw.is_ascii() {
        return Err(format!("names a zip member {:?} with non-ASCII bytes and no UTF-8 flag, which zipfile decodes as cp437 and others as UTF-8; rebuild it with UTF-8 names", String::from_utf8_lossy(&raw)));
    }
    String::from_utf8(raw).map_err(|e| {
        format!(
            "names a zip member {:?} with bytes that are not UTF-8 although its UTF-8 flag is set",
            String::from_utf8_lossy(e.as_bytes())
        )
    })
}

/// Extra fields tile their block; neither ZIP64 nor the Info-ZIP Unicode Path field.
/// `name` is the member's as messages show it.
fn extra_fields(extra: &[u8], name: &str) -> Result<(), String> {
    let mut pos = 0;
    while pos < extra.len() {
        if extra.len() - pos < 4 {
            return Err(format!("has a malformed extra field on zip member {name}"));
        }
        let (id, len) = (u16_at(extra, pos), usize::from(u16_at(extra, pos + 2)));
        if pos + 4 + len > extra.len() {
            return Err(format!("has a malformed extra field on zip member {name}"));
        }
        match id {
            0x0001 => return Err(format!("uses ZIP64 fields for {name}, {ZIP64_WHY}")),
            0x7075 => return Err(format!("carries an Info-ZIP Unicode Path field on {name}, which unzip obeys and zipfile ignores, so they extract different names; rebuild it without that field")),
            _ => {}
        }
        pos += 4 + len;
    }
    Ok(())
}

/// A byte range of the file, read by position.
struct At<'f> {
    file: &'f File,
    pos: u64,
    end: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let max = buf
            .len()
            .min(usize::try_from(self.end - self.pos).unwrap_or(usize::MAX));
        if max == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..max], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

enum Body<'f> {
    Stored(At<'f>),
    Deflated(Box<flate2::bufread::DeflateDecoder<BufReader<At<'f>>>>),
}

/// A member's content, checked as it ends: its size, its CRC-32, and compressed data
/// that ends exactly where its entry does.
struct EntryReader<'f> {
    body: Body<'f>,
    name: &'f str,
    crc: flate2::Crc,
    expected_crc: u32,
    size: u64,
    compressed: u64,
    produced: u64,
}

impl<'f> EntryReader<'f> {
    fn new(file: &'f File, e: &'f Entry) -> Self {
        let range = At {
            file,
            pos: e.data,
            end: e.data + e.compressed,
        };
        let body = if e.method == 8 {
            Body::Deflated(Box::new(flate2::bufread::DeflateDecoder::new(
                BufReader::with_capacity(64 << 10, range),
            )))
        } else {
            Body::Stored(range)
        };
        EntryReader {
            body,
            name: &e.name,
            crc: flate2::Crc::new(),
            expected_crc: e.crc,
            size: e.size,
            compressed: e.compressed,
            produced: 0,
        }
    }

    fn finish(&self) -> io::Result<()> {
        if self.produced != self.size {
            return Err(refusal(format!(
                "holds {}, which inflates to {} bytes where its central directory declares {}; it is torn",
                self.name, self.produced, self.size
            )));
        }
        if let Body::Deflated(d) = &self.body {
            if d.total_in() != self.compressed {
                return Err(refusal(format!(
                    "holds {}, whose compressed data ends {} bytes before its entry does (hidden data)",
                    self.name,
                    self.compressed.saturating_sub(d.total_in())
                )));
            }
        }
        if self.crc.sum() != self.expected_crc {
            return Err(refusal(format!(
                "holds {}, which fails its CRC-32 check; it is torn or was altered",
                self.name
            )));
        }
        Ok(())
    }
}

impl Read for EntryReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = match &mut self.body {
            Body::Stored(r) => r.read(buf)?,
            Body::Deflated(d) => d.read(buf)?,
        };
        if n == 0 {
            self.finish()?;
            return Ok(0);
        }
        self.produced += n as u64;
        if self.produced > self.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} inflates past its declared size", self.name),
            ));
        }
        self.crc.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A member to write: name, data, deflated or stored.
    struct Spec<'a> {
        name: &'a str,
        data: &'a [u8],
        deflate: bool,
    }

    fn deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn crc(data: &[u8]) -> u32 {
        let mut c = flate2::Crc::new();
        c.update(data);
        c.sum()
    }

    /// The parts of a zip, laid out by hand, to be edited before `bytes()`.
    struct Zip {
        locals: Vec<Vec<u8>>,
        centrals: Vec<Vec<u8>>,
        comment: Vec<u8>,
    }

    impl Zip {
        fn new(members: &[Spec<'_>]) -> Zip {
            let mut zip = Zip {
                locals: Vec::new(),
                centrals: Vec::new(),
                comment: Vec::new(),
            };
            for m in members {
                let body = if m.deflate {
                    deflate(m.data)
                } else {
                    m.data.to_vec()
                };
                let method: u16 = if m.deflate { 8 } else { 0 };
                let mut fields = Vec::new();
                fields.extend_from_slice(&20u16.to_le_bytes()); // version needed
                fields.extend_from_slice(&0u16.to_le_bytes()); // flags
                fields.extend_from_slice(&method.to_le_bytes());
                fields.extend_from_slice(&[0; 4]); // time, date
                fields.extend_from_slice(&crc(m.data).to_le_bytes());
                fields.extend_from_slice(&(body.len() as u32).to_le_bytes());
                fields.extend_from_slice(&(m.data.len() as u32).to_le_bytes());
                fields.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
                fields.extend_from_slice(&0u16.to_le_bytes()); // extra
                let mut local = LOCAL.to_vec();
                local.extend_from_slice(&fields);
                local.extend_from_slice(m.name.as_bytes());
                local.extend_from_slice(&body);
                let mut central = CENTRAL.to_vec();
                central.extend_from_slice(&(0x0300u16 | 20).to_le_bytes()); // made by unix
                central.extend_from_slice(&fields);
                central.extend_from_slice(&[0; 6]); // comment len, disk, internal attr
                central.extend_from_slice(&(0o100644u32 << 16).to_le_bytes());
                central.extend_from_slice(&[0; 4]); // offset, set by bytes()
                central.extend_from_slice(m.name.as_bytes());
                zip.locals.push(local);
                zip.centrals.push(central);
            }
            zip
        }

        fn bytes(&self) -> Vec<u8> {
            let mut out = Vec::new();
            let mut offsets = Vec::new();
            for l in &self.locals {
                offsets.push(out.len() as u32);
                out.extend_from_slice(l);
            }
            let cd_offset = out.len() as u32;
            for (c, off) in self.centrals.iter().zip(offsets) {
                let mut c = c.clone();
                c[42..46].copy_from_slice(&off.to_le_bytes());
                out.extend_from_slice(&c);
            }
            let cd_size = out.len() as u32 - cd_offset;
            out.extend_from_slice(END);
            out.extend_from_slice(&[0; 4]);
            let n = self.centrals.len() as u16;
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&cd_size.to_le_bytes());
            out.extend_from_slice(&cd_offset.to_le_bytes());
            out.extend_from_slice(&(self.comment.len() as u16).to_le_bytes());
            out.extend_from_slice(&self.comment);
            out
        }
    }

    fn read(bytes: &[u8]) -> Result<Vec<(String, MemberKind, Vec<u8>)>, String> {
        let limits = PackageLimits {
            max_bytes: 1 << 20,
            max_members: 100,
            ..PackageLimits::default()
        };
        read_with(bytes, &limits)
    }

    fn read_with(
        bytes: &[u8],
        limits: &PackageLimits,
    ) -> Result<Vec<(String, MemberKind, Vec<u8>)>, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.zip");
        std::fs::write(&path, bytes).unwrap();
        let file = File::open(&path).unwrap();
        let mut out = Vec::new();
        let meter = Meter::new(limits, bytes.len() as u64, None);
        super::visit(&path, &file, limits, &meter, &mut |name, kind, _, r| {
            let mut data = Vec::new();
            r.read_to_end(&mut data)
                .map_err(|e| super::super::archive::read_error(Path::new("p.zip"), e))?;
            out.push((name.to_string(), kind, data));
            Ok(())
        })
        .map_err(|e| e.into_violation().message)?;
        Ok(out)
    }

    fn refusal_of(bytes: &[u8]) -> String {
        match read(bytes) {
            Ok(m) => panic!("read, not refused: {m:?}"),
            Err(why) => why,
        }
    }

    fn good() -> Zip {
        Zip::new(&[
            Spec {
                name: "bundle.json",
                data: b"{}",
                deflate: false,
            },
            Spec {
                name: "scripts/helper.py",
                data: b"print('helper')\n",
                deflate: true,
            },
        ])
    }

    #[test]
    fn a_plain_zip_is_read_in_central_directory_order() {
        let m = read(&good().bytes()).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].0, "scripts/helper.py");
        assert_eq!(m[1].2, b"print('helper')\n");
        assert_eq!(m[1].1, MemberKind::Regular);
    }

    #[test]
    fn duplicate_names_are_all_visited() {
        // A name map would keep only the last; the visitor sees both and refuses them.
        let zip = Zip::new(&[
            Spec {
                name: "a.py",
                data: b"evil",
                deflate: true,
            },
            Spec {
                name: "a.py",
                data: b"good",
                deflate: true,
            },
        ]);
        let m = read(&zip.bytes()).unwrap();
        assert_eq!(
            m.iter().map(|m| m.2.as_slice()).collect::<Vec<_>>(),
            [b"evil", b"good"]
        );
    }

    #[test]
    fn data_before_between_or_after_is_refused() {
        let bytes = good().bytes();
        let mut prefixed = b"#!/bin/sh\n".to_vec();
        prefixed.extend_from_slice(&bytes);
        // a prefix shifts everything: the end record no longer meets the central directory
        assert!(refusal_of(&prefixed).contains("central directory does not account for"));

        let mut appended = bytes.clone();
        appended.extend_from_slice(b"tail");
        assert!(refusal_of(&appended).contains("after its zip end-of-central-directory"));

        // a gap between two members
        let mut zip = good();
        zip.locals[0].extend_from_slice(b"hidden");
        assert!(refusal_of(&zip.bytes()).contains("between zip members"));

        // offsets rewritten so that the first member starts after hidden bytes
        let base = good();
        let mut raw = b"hidden!".to_vec();
        let mut offsets = Vec::new();
        for l in &base.locals {
            offsets.push(raw.len() as u32);
            raw.extend_from_slice(l);
        }
        let cd_offset = raw.len() as u32;
        for (c, off) in base.centrals.iter().zip(offsets) {
            let mut c = c.clone();
            c[42..46].copy_from_slice(&off.to_le_bytes());
            raw.extend_from_slice(&c);
        }
        let cd_size = raw.len() as u32 - cd_offset;
        raw.extend_from_slice(END);
        raw.extend_from_slice(&[0, 0, 0, 0, 2, 0, 2, 0]);
        raw.extend_from_slice(&cd_size.to_le_bytes());
        raw.extend_from_slice(&cd_offset.to_le_bytes());
        raw.extend_from_slice(&[0, 0]);
        raw[..4].copy_from_slice(LOCAL); // so that it is sniffed as a zip
        assert!(refusal_of(&raw).contains("before its first zip member"));
    }

    #[test]
    fn a_signature_in_the_comment_is_refused() {
        let mut zip = good();
        let mut fake = END.to_vec();
        fake.extend_from_slice(&[0; 18]);
        zip.comment = fake;
        assert!(refusal_of(&zip.bytes()).contains("comment"));
    }

    #[test]
    fn local_and_central_headers_must_agree() {
        let mut zip = good();
        let at = 30 + "scripts/".len();
        zip.locals[1][at..at + 6].copy_from_slice(b"evil.s");
        assert!(refusal_of(&zip.bytes()).contains("in its local header and"));

        let mut zip = good();
        zip.locals[1][14] ^= 1; // crc
        assert!(refusal_of(&zip.bytes()).contains("CRC-32 or size"));

        let mut zip = good();
        zip.centrals[1][24] ^= 1; // size in the central directory only
        let why = refusal_of(&zip.bytes());
        assert!(why.contains("CRC-32 or size"), "{why}");
    }

    #[test]
    fn a_data_descriptor_is_compared_with_the_central_directory() {
        let data = b"print('helper')\n";
        let mut zip = Zip::new(&[Spec {
            name: "h.py",
            data,
            deflate: true,
        }]);
        // set bit 3, zero the local crc and sizes, append a signed descriptor
        for part in [&mut zip.locals[0][6..8], &mut zip.centrals[0][8..10]] {
            part[0] |= FLAG_DESCRIPTOR as u8;
        }
        zip.locals[0][14..26].fill(0);
        let compressed = deflate(data).len() as u32;
        let mut descriptor = DESCRIPTOR.to_vec();
        descriptor.extend_from_slice(&crc(data).to_le_bytes());
        descriptor.extend_from_slice(&compressed.to_le_bytes());
        descriptor.extend_from_slice(&(data.len() as u32).to_le_bytes());
        let mut ok = zip.locals[0].clone();
        ok.extend_from_slice(&descriptor);
        let mut with = Zip {
            locals: vec![ok],
            centrals: zip.centrals.clone(),
            comment: Vec::new(),
        };
        assert_eq!(read(&with.bytes()).unwrap()[0].2, data);
        // unsigned descriptors too
        with.locals[0] = [zip.locals[0].clone(), descriptor[4..].to_vec()].concat();
        assert_eq!(read(&with.bytes()).unwrap()[0].2, data);
        // a descriptor that lies
        descriptor[4] ^= 1;
        with.locals[0] = [zip.locals[0].clone(), descriptor].concat();
        assert!(refusal_of(&with.bytes()).contains("data descriptor"));
    }

    #[test]
    fn unsupported_features_are_refused() {
        type Edit = fn(&mut Zip);
        let cases: [(Edit, &str); 7] = [
            (|z| z.centrals[1][8] |= 1, "encrypted"),
            (
                |z| {
                    z.centrals[1][10] = 12;
                    z.locals[1][8] = 12;
                },
                "method 12",
            ),
            (
                |z| {
                    z.centrals[1][24..28].fill(0xff);
                },
                "ZIP64",
            ),
            (
                |z| {
                    // non-ASCII name without the UTF-8 flag
                    let at = z.centrals[1].len() - 1;
                    z.centrals[1][at] = 0xe9;
                    let at = z.locals[1].len() - deflate(b"print('helper')\n").len() - 1;
                    z.locals[1][at] = 0xe9;
                },
                "no UTF-8 flag",
            ),
            (
                |z| {
                    // the Info-ZIP Unicode Path field, in the central directory
                    let extra = [0x75, 0x70, 5, 0, 1, 0, 0, 0, 0];
                    z.centrals[1][30] = extra.len() as u8;
                    z.centrals[1].extend_from_slice(&extra);
                },
                "Unicode Path",
            ),
            (
                |z| {
                    let extra = [0x01, 0x00, 0, 0];
                    z.centrals[1][30] = extra.len() as u8;
                    z.centrals[1].extend_from_slice(&extra);
                },
                "ZIP64",
            ),
            (
                |z| {
                    z.centrals[1][30] = 3;
                    z.centrals[1].extend_from_slice(&[1, 2, 3]);
                },
                "malformed extra",
            ),
        ];
        for (edit, expected) in cases {
            let mut zip = good();
            edit(&mut zip);
            let why = refusal_of(&zip.bytes());
            assert!(why.contains(expected), "{expected}: {why}");
        }
    }

    #[test]
    fn entry_count_must_match_the_end_record() {
        let mut bytes = good().bytes();
        let at = bytes.len() - 22;
        bytes[at + 8] = 1;
        bytes[at + 10] = 1;
        assert!(refusal_of(&bytes).contains("more than the 1 entries"));
        bytes[at + 8] = 3;
        bytes[at + 10] = 3;
        assert!(refusal_of(&bytes).contains("fewer entries"));
    }

    #[test]
    fn torn_and_altered_data_is_refused_as_it_is_read() {
        let mut zip = good();
        let last = zip.locals[0].len() - 1;
        zip.locals[0][last] ^= 1; // stored data of bundle.json, crc unchanged
        assert!(refusal_of(&zip.bytes()).contains("CRC-32 check"));
    }

    #[test]
    fn bombs_are_refused_from_the_central_directory() {
        let zeros = vec![0u8; 2 << 20];
        let zip = Zip::new(&[Spec {
            name: "zeros.bin",
            data: &zeros,
            deflate: true,
        }]);
        let bytes = zip.bytes();
        assert!(bytes.len() < 10_000);
        assert!(refusal_of(&bytes).contains("refused before inflating"));
    }

    #[test]
    fn a_member_declared_past_the_inflate_budget_is_refused_before_inflating() {
        // 20 MiB declared, under limits.max_package_bytes: refused from the central
        // directory, whether the size is a deflate bomb's or a lie.
        let mut zip = Zip::new(&[Spec {
            name: "zeros.bin",
            data: b"\0\0\0\0",
            deflate: true,
        }]);
        let size = (20u32 << 20).to_le_bytes();
        zip.locals[0][22..26].copy_from_slice(&size);
        zip.centrals[0][24..28].copy_from_slice(&size);
        let bytes = zip.bytes();
        let why = read_with(&bytes, &PackageLimits::default()).unwrap_err();
        assert!(
            why.contains(&format!(" declares 20971520 bytes of members, more than limits.max_package_ratio = 100 times its {} bytes allows", bytes.len()))
                && why.ends_with("refused before inflating them"),
            "{why}"
        );
        // A size that lies is still found out when the ratio lets it be read.
        let raised = PackageLimits {
            max_ratio: 1 << 20,
            ..PackageLimits::default()
        };
        let why = read_with(&bytes, &raised).unwrap_err();
        assert!(
            why.contains("inflates to 4 bytes where its central directory declares 20971520"),
            "{why}"
        );
    }

    #[test]
    fn a_tar_appended_zip_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.tar");
        let mut tar = super::super::tar_format::tests::entry(b"a", b'0', b"a");
        tar.extend(super::super::tar_format::tests::end());
        std::fs::write(&path, &tar).unwrap();
        let len = tar.len() as u64;
        assert_eq!(zip_inside(&File::open(&path).unwrap(), len).unwrap(), None);
        tar.extend(good().bytes());
        std::fs::write(&path, &tar).unwrap();
        let len = tar.len() as u64;
        assert!(zip_inside(&File::open(&path).unwrap(), len)
            .unwrap()
            .is_some());
    }
}
