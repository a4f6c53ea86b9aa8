//! SHA-256 at hardware speed: the `sha2` crate picks the CPU's SHA extensions at run
//! time, large files are hashed from a mapping where the kernel maps them in large
//! pieces (`mapped`, guarded against a producer truncating them), other bytes are read
//! in pieces sized to stay in cache, and many files are hashed in parallel by the
//! callers.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

use sha2::{Digest, Sha256};

use super::mapped::{self, Mapped};

/// 256 KiB reads: a quarter of a core's L2 on the machines measured, so the hash still
/// reads what the copy just wrote, with a quarter of the system calls of 64 KiB
/// (BENCHMARKS.md).
pub const READ_SIZE: usize = 256 << 10;

/// Reads land at the start of a page: the kernel copies the page cache a page at a
/// time, and into a buffer as malloc places it (16 bytes into a page) that copy costs
/// measurably more.
const PAGE: usize = 4096;

thread_local! {
    static BUFFER: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_SIZE + PAGE]);
}

/// Hashes everything `reader` yields, up to `limit` bytes; returns lowercase hex and
/// the size. `Err(InvalidData)` when there is more than `limit`.
pub fn sha256_reader(
    reader: &mut dyn Read,
    limit: u64,
    sink: Option<&mut dyn io::Write>,
) -> io::Result<(String, u64)> {
    hash_reads(reader, Sha256::new(), 0, limit, sink)
}

/// Hashes what `reader` yields into `hasher`, which has had `size` bytes already;
/// `limit` and the answer count those too.
fn hash_reads(
    reader: &mut dyn Read,
    mut hasher: Sha256,
    mut size: u64,
    limit: u64,
    mut sink: Option<&mut dyn io::Write>,
) -> io::Result<(String, u64)> {
    BUFFER.with(|buffer| {
        let mut buffer = buffer.borrow_mut();
        let start = buffer.as_ptr().align_offset(PAGE).min(PAGE);
        let buffer = &mut buffer[start..start + READ_SIZE];
        loop {
            let n = match reader.read(buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            size += n as u64;
            if size > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("more than {limit} bytes"),
                ));
            }
            hasher.update(&buffer[..n]);
            if let Some(w) = sink.as_mut() {
                w.write_all(&buffer[..n])?;
            }
        }
        Ok((hex(&hasher.finalize()), size))
    })
}

/// The SHA-256 and size of an open regular file, up to `limit` bytes (`Err(InvalidData)`
/// beyond, as `sha256_reader`), with every byte also given to the sink `new_sink`
/// makes; returns the sink. A large file is hashed from a mapping, or from one until
/// the mapping proves fine-grained and then read on; one that changed meanwhile
/// (truncated, written, grown) is read instead from its start with a fresh sink, so it
/// is reported exactly as reading it would report it.
pub fn sha256_file<S: io::Write>(
    file: &mut File,
    limit: u64,
    new_sink: impl Fn() -> Option<S>,
) -> io::Result<(String, u64, Option<S>)> {
    let size = rustix::fs::fstat(&*file).map_or(0, |s| s.st_size as u64);
    if size >= mapped::THRESHOLD {
        let mut sink = new_sink();
        let sha256 = mapped::sha256(file, limit, sink.as_mut().map(|s| s as &mut dyn io::Write));
        if let Some(Mapped {
            hasher,
            hashed,
            read_on,
        }) = sha256
        {
            let Some(before) = read_on else {
                return Ok((hex(&hasher.finalize()), hashed, sink));
            };
            file.seek(SeekFrom::Start(hashed))?;
            let sink_dyn = sink.as_mut().map(|s| s as &mut dyn io::Write);
            let (sha256, size) = hash_reads(file, hasher, hashed, limit, sink_dyn)?;
            if !mapped::moved(&before, file) {
                return Ok((sha256, size, sink));
            }
            file.seek(SeekFrom::Start(0))?;
        }
        // Not mapped (the mapping never moved the file's offset), or changed while read
        // on: read from the start.
    }
    let mut sink = new_sink();
    let (sha256, size) =
        sha256_reader(file, limit, sink.as_mut().map(|s| s as &mut dyn io::Write))?;
    Ok((sha256, size, sink))
}

pub fn sha256_bytes(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        assert_eq!(
            sha256_bytes(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let (digest, size) = sha256_reader(&mut &b"abc"[..], 10, None).unwrap();
        assert_eq!(
            digest,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(size, 3);
        assert!(sha256_reader(&mut &b"abcd"[..], 3, None).is_err());
    }
}
