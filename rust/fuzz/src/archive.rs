//! Packages built member by member, so the fuzzer spends its time on archives the
//! readers get far into rather than on checksums and signatures: a tar (ustar, GNU
//! long names or pax records), tar.gz (one or several members), tar.zst (one or several
//! frames, skippable frames between) or zip (stored or deflated, with or without data
//! descriptors), then a few edits at header fields and bytes where readers part ways.

use std::io::Write;

use arbitrary::Arbitrary;

#[derive(Arbitrary, Debug)]
pub struct Package {
    pub format: Format,
    pub members: Vec<Member>,
    pub edits: Vec<Edit>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Format {
    Tar(TarFlavor),
    /// Cut into gzip members at these fractions of the tar (per 65536).
    TarGz(TarFlavor, u16, u16),
    /// Cut into zstd frames at this fraction, with a skippable frame between or not.
    TarZst(TarFlavor, u16, bool),
    Zip {
        deflate: bool,
        descriptor: bool,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq)]
pub enum TarFlavor {
    Ustar,
    Gnu,
    Pax,
}

#[derive(Arbitrary, Debug)]
pub struct Member {
    pub kind: Kind,
    pub name: Name,
    pub data: Data,
    pub mode: u16,
}

#[derive(Arbitrary, Debug, Clone)]
pub enum Kind {
    File,
    Directory,
    Symlink(Name),
    Hardlink(Name),
    CharDevice,
    Fifo,
    /// Any typeflag byte (tar) or mode bits (zip).
    Raw(u8),
}

/// Segments from the names readers treat differently, or any text.
#[derive(Arbitrary, Debug, Clone)]
pub enum Name {
    Path(Vec<Segment>),
    Text(String),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Segment {
    Scripts,
    Lib,
    Helper,
    Util,
    Bundle,
    BundleYaml,
    Dot,
    DotDot,
    Empty,
    Long(u8),
    NonAscii,
}

#[derive(Arbitrary, Debug)]
pub enum Data {
    Empty,
    Helper,
    Bundle,
    Bytes(Vec<u8>),
}

/// A change after the archive is laid out: where readers part ways is in these bytes.
#[derive(Arbitrary, Debug)]
pub enum Edit {
    /// A tar header field (by `FIELDS` index) of the header at this block, set to one
    /// of `VALUES` or to the given bytes.
    TarField(u8, u8, u8, Option<Vec<u8>>),
    /// A byte at this fraction of the archive (per 65536), xor'ed.
    Flip(u16, u8),
    /// Bytes appended after the archive.
    Append(Tail),
    /// The archive cut at this fraction.
    Truncate(u16),
    /// A zip field: 0..=3 pick the local header, central header, end record or data
    /// descriptor of the member, then the offset in it and the value.
    ZipField(u8, u8, u8, u8),
}

#[derive(Arbitrary, Debug)]
pub enum Tail {
    Zeros(u16),
    Junk(Vec<u8>),
    SecondTar,
    Zip,
    GzipMember,
    ZstdFrame,
}

pub const HELPER: &[u8] = b"import json\nfrom util import load\nfrom . import sibling\n\ndef main():\n    return load()\n";
pub const BUNDLE: &[u8] = br#"{"schema_version": 1, "mode": "args", "command": "python scripts/helper.py", "args": [], "network_arch": "x", "image": "nvcr.io/nvidia/tao:1", "execution": {"supporting_files": [{"source": "scripts/helper.py", "destination": "scripts/helper.py", "sha256": "0000000000000000000000000000000000000000000000000000000000000000"}]}}"#;

/// (offset, length) of the tar header fields an edit rewrites.
const FIELDS: [(usize, usize); 12] = [
    (0, 100),
    (100, 8),
    (108, 8),
    (124, 12),
    (136, 12),
    (148, 8),
    (156, 1),
    (157, 100),
    (257, 8),
    (329, 8),
    (345, 155),
    (0, 512),
];
/// Values where tar readers disagree (see docs/strictness.md, "Tar headers").
const VALUES: [&[u8]; 24] = [
    b"",
    b"0000644\0",
    b" 644 \0",
    b"0o644\0",
    b"1_0\0",
    b"00 12\0",
    b"\x80\0\0\0\0\0\0\0\0\0\0\x05",
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    b"ustar  \0",
    b"ustar\x0000",
    b"scripts",
    b"evil.sh\0",
    b"x/",
    b"0",
    b"\0",
    b"5",
    b"2",
    b"g",
    b"x",
    b"L",
    b"K",
    b"S",
    b"7",
    b"+12\0",
];

impl Segment {
    fn text(self) -> String {
        match self {
            Segment::Scripts => "scripts".into(),
            Segment::Lib => "lib".into(),
            Segment::Helper => "helper.py".into(),
            Segment::Util => "util.py".into(),
            Segment::Bundle => "bundle.json".into(),
            Segment::BundleYaml => "bundle.yaml".into(),
            Segment::Dot => ".".into(),
            Segment::DotDot => "..".into(),
            Segment::Empty => String::new(),
            Segment::Long(n) => "n".repeat(90 + usize::from(n)),
            Segment::NonAscii => "h\u{e9}lper\u{2028}.py".into(),
        }
    }
}

impl Name {
    pub fn text(&self) -> String {
        match self {
            Name::Path(segments) if segments.is_empty() => "helper.py".into(),
            Name::Path(segments) => segments
                .iter()
                .take(6)
                .map(|s| s.text())
                .collect::<Vec<_>>()
                .join("/"),
            Name::Text(t) => t.clone(),
        }
    }
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Empty => b"",
            Data::Helper => HELPER,
            Data::Bundle => BUNDLE,
            Data::Bytes(b) => b,
        }
    }
}

impl Package {
    /// The archive's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let members = &self.members[..self.members.len().min(12)];
        let mut out = match self.format {
            Format::Tar(f) | Format::TarGz(f, ..) | Format::TarZst(f, ..) => {
                let mut tar = Vec::new();
                for m in members {
                    tar_member(&mut tar, m, f);
                }
                tar.extend_from_slice(&[0; 1024]);
                for e in &self.edits {
                    if let Edit::TarField(block, field, value, raw) = e {
                        tar_field(&mut tar, *block, *field, *value, raw.as_deref());
                    }
                }
                match self.format {
                    Format::TarGz(_, a, b) => {
                        let mut cuts = [cut(&tar, a), cut(&tar, b)];
                        cuts.sort();
                        let mut out = gzip(&tar[..cuts[0]]);
                        out.extend(gzip(&tar[cuts[0]..cuts[1]]));
                        out.extend(gzip(&tar[cuts[1]..]));
                        out
                    }
                    Format::TarZst(_, a, skippable) => {
                        let at = cut(&tar, a);
                        let mut out = zstd(&tar[..at]);
                        if skippable {
                            out.extend_from_slice(&[
                                0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, b'a', b'b', b'c',
                            ]);
                        }
                        out.extend(zstd(&tar[at..]));
                        out
                    }
                    _ => tar,
                }
            }
            Format::Zip {
                deflate,
                descriptor,
            } => zip(members, deflate, descriptor, &self.edits),
        };
        for e in &self.edits {
            match e {
                Edit::Flip(at, x) if !out.is_empty() => {
                    let i = cut(&out, *at).min(out.len() - 1);
                    out[i] ^= x;
                }
                Edit::Append(tail) => out.extend(tail.bytes()),
                Edit::Truncate(at) => out.truncate(cut(&out, *at)),
                _ => {}
            }
        }
        out
    }
}

impl Tail {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Tail::Zeros(n) => vec![0; usize::from(*n) % 12000],
            Tail::Junk(b) => b.clone(),
            Tail::SecondTar => {
                let mut t = Vec::new();
                let m = Member {
                    kind: Kind::File,
                    name: Name::Text("evil.sh".into()),
                    data: Data::Bytes(b"echo pwned\n".to_vec()),
                    mode: 0o755,
                };
                tar_member(&mut t, &m, TarFlavor::Ustar);
                t.extend_from_slice(&[0; 1024]);
                t
            }
            Tail::Zip => {
                let m = Member {
                    kind: Kind::File,
                    name: Name::Text("evil.sh".into()),
                    data: Data::Bytes(b"echo pwned\n".to_vec()),
                    mode: 0o755,
                };
                zip(&[m], false, false, &[])
            }
            Tail::GzipMember => gzip(b"junk"),
            Tail::ZstdFrame => zstd(b"junk"),
        }
    }
}

fn cut(b: &[u8], fraction: u16) -> usize {
    b.len() * usize::from(fraction) / 65536
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 1).expect("in memory")
}

fn octal(field: &mut [u8], n: u64) {
    let digits = format!("{n:0width$o}", width = field.len() - 1);
    let digits = &digits.as_bytes()[digits.len() - (field.len() - 1)..];
    let last = field.len() - 1;
    field[..last].copy_from_slice(digits);
    field[last] = 0;
}

/// Sets the checksum of a header block, as every writer does.
pub fn seal(block: &mut [u8]) {
    block[148..156].fill(b' ');
    let sum: u64 = block[..512].iter().map(|b| u64::from(*b)).sum();
    octal(&mut block[148..155], sum);
    block[155] = b' ';
}

fn header(
    name: &[u8],
    typeflag: u8,
    size: u64,
    link: &[u8],
    mode: u16,
    flavor: TarFlavor,
) -> [u8; 512] {
    let mut b = [0u8; 512];
    let n = name.len().min(100);
    b[..n].copy_from_slice(&name[..n]);
    octal(&mut b[100..108], u64::from(mode) & 0o7777);
    octal(&mut b[108..116], 0);
    octal(&mut b[116..124], 0);
    octal(&mut b[124..136], size);
    octal(&mut b[136..148], 1_700_000_000);
    b[156] = typeflag;
    let l = link.len().min(100);
    b[157..157 + l].copy_from_slice(&link[..l]);
    if flavor == TarFlavor::Gnu {
        b[257..265].copy_from_slice(b"ustar  \0");
    } else {
        b[257..263].copy_from_slice(b"ustar\0");
        b[263..265].copy_from_slice(b"00");
    }
    seal(&mut b);
    b
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fn tar_member(out: &mut Vec<u8>, m: &Member, flavor: TarFlavor) {
    let name = m.name.text();
    let (typeflag, link, data): (u8, String, &[u8]) = match &m.kind {
        Kind::File => (b'0', String::new(), m.data.bytes()),
        Kind::Directory => (b'5', String::new(), b""),
        Kind::Symlink(t) => (b'2', t.text(), b""),
        Kind::Hardlink(t) => (b'1', t.text(), b""),
        Kind::CharDevice => (b'3', String::new(), b""),
        Kind::Fifo => (b'6', String::new(), b""),
        Kind::Raw(flag) => (*flag, String::new(), m.data.bytes()),
    };
    let name = if typeflag == b'5' && !name.ends_with('/') {
        format!("{name}/")
    } else {
        name
    };
    let long = name.len() > 100 || link.len() > 100;
    match (flavor, long) {
        (TarFlavor::Gnu, true) => {
            for (flag, text) in [(b'L', &name), (b'K', &link)] {
                if text.len() > 100 {
                    let mut data = text.as_bytes().to_vec();
                    data.push(0);
                    out.extend_from_slice(&header(
                        b"././@LongLink",
                        flag,
                        data.len() as u64,
                        b"",
                        0o644,
                        flavor,
                    ));
                    out.extend_from_slice(&data);
                    pad(out);
                }
            }
        }
        (TarFlavor::Pax, true) | (TarFlavor::Ustar, true) => {
            let mut records = Vec::new();
            for (key, text) in [("path", &name), ("linkpath", &link)] {
                if text.len() > 100 {
                    records.extend(pax_record(key, text));
                }
            }
            out.extend_from_slice(&header(
                b"PaxHeader/x",
                b'x',
                records.len() as u64,
                b"",
                0o644,
                flavor,
            ));
            out.extend_from_slice(&records);
            pad(out);
        }
        _ => {}
    }
    out.extend_from_slice(&header(
        name.as_bytes(),
        typeflag,
        data.len() as u64,
        link.as_bytes(),
        m.mode,
        flavor,
    ));
    out.extend_from_slice(data);
    pad(out);
}

fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    while format!("{len}{body}").len() != len {
        len += 1;
    }
    format!("{len}{body}").into_bytes()
}

fn tar_field(tar: &mut [u8], block: u8, field: u8, value: u8, raw: Option<&[u8]>) {
    let blocks = tar.len() / 512;
    if blocks == 0 {
        return;
    }
    let start = usize::from(block) % blocks * 512;
    let (offset, len) = FIELDS[usize::from(field) % FIELDS.len()];
    let value = raw.unwrap_or(VALUES[usize::from(value) % VALUES.len()]);
    let field = &mut tar[start + offset..start + offset + len];
    field.fill(0);
    let n = value.len().min(len);
    field[..n].copy_from_slice(&value[..n]);
    // Most edits keep the header valid, so readers look past its checksum.
    if offset != 148 {
        seal(&mut tar[start..start + 512]);
    }
}

fn crc32(data: &[u8]) -> u32 {
    let mut h = flate2::Crc::new();
    h.update(data);
    h.sum()
}

fn deflated(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

/// A zip archive as Info-ZIP and Python write one, then the zip edits applied.
fn zip(members: &[Member], deflate: bool, descriptor: bool, edits: &[Edit]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    // (local header, central header, descriptor) offsets of each member
    let mut at = Vec::new();
    for m in members {
        let mut name = m.name.text();
        let (mode, data): (u32, &[u8]) = match &m.kind {
            Kind::Directory => {
                if !name.ends_with('/') {
                    name.push('/');
                }
                (0o040755, b"")
            }
            Kind::Symlink(_) | Kind::Hardlink(_) => (0o120777, b"helper.py"),
            Kind::CharDevice => (0o020644, b""),
            Kind::Fifo => (0o010644, b""),
            Kind::Raw(bits) => (u32::from(*bits) << 12 | 0o644, m.data.bytes()),
            Kind::File => (0o100000 | u32::from(m.mode & 0o777), m.data.bytes()),
        };
        let compressed = if deflate {
            deflated(data)
        } else {
            data.to_vec()
        };
        let method: u16 = if deflate { 8 } else { 0 };
        let crc = crc32(data);
        let utf8 = if name.is_ascii() { 0 } else { 0x0800 };
        let flags: u16 = utf8 | if descriptor { 0x08 } else { 0 };
        let local = out.len();
        let (lcrc, lc, lu) = if descriptor {
            (0, 0, 0)
        } else {
            (crc, compressed.len() as u32, data.len() as u32)
        };
        out.extend_from_slice(b"PK\x03\x04");
        for v in [20u16, flags, method, 0, 0x21] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [lcrc, lc, lu] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&compressed);
        let desc = out.len();
        if descriptor {
            out.extend_from_slice(b"PK\x07\x08");
            for v in [crc, compressed.len() as u32, data.len() as u32] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        let cent = central.len();
        central.extend_from_slice(b"PK\x01\x02");
        for v in [0x031eu16, 20, flags, method, 0, 0x21] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        for v in [crc, compressed.len() as u32, data.len() as u32] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        for v in [name.len() as u16, 0, 0, 0, 0] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        central.extend_from_slice(&(mode << 16).to_le_bytes());
        central.extend_from_slice(&(local as u32).to_le_bytes());
        central.extend_from_slice(name.as_bytes());
        at.push((local, cent, descriptor.then_some(desc)));
    }
    let cd_start = out.len();
    out.extend_from_slice(&central);
    let end = out.len();
    out.extend_from_slice(b"PK\x05\x06");
    for v in [0u16, 0, members.len() as u16, members.len() as u16] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&(cd_start as u32).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    for e in edits {
        if let Edit::ZipField(which, member, offset, value) = e {
            let base = match (which % 4, at.get(usize::from(*member) % at.len().max(1))) {
                (0, Some(&(l, _, _))) => Some((l, 30)),
                (1, Some(&(_, c, _))) => Some((cd_start + c, 46)),
                (2, _) => Some((end, 22)),
                (3, Some(&(_, _, Some(d)))) => Some((d, 16)),
                _ => None,
            };
            if let Some((base, len)) = base {
                let i = base + usize::from(*offset) % len;
                if let Some(b) = out.get_mut(i) {
                    *b = *value;
                }
            }
        }
    }
    out
}
