//! The compressed streams a tar package travels in: every gzip member and every zstd
//! frame, one after another, as `gzip -d`, `zstd -d`, GNU tar and Python read them.
//!
//! Owns the boundaries between members and frames; must not interpret what they hold
//! (`tar_format` does). A decoder that stopped at the first member would leave the
//! rest for the extractor alone to see, and bytes after the last member that do not
//! start another one are refused, never skipped. Every member or frame after the first
//! is charged to the package's meter as it starts (`budget`).

use std::io::{self, BufRead, Read};

use super::archive::refusal;
use super::budget::{Meter, STREAM_START_COST};

const ZSTD_MAGIC: u8 = 0x28; // first byte of 0xFD2FB528, little-endian
const SKIPPABLE_FIRST: std::ops::RangeInclusive<u8> = 0x50..=0x5f; // 0x184D2A50..=0x184D2A5F

/// Every gzip member of a stream, decompressed back to back.
pub struct GzipMembers<'m, R: BufRead> {
    current: Option<flate2::bufread::GzDecoder<R>>,
    members: u64,
    meter: &'m Meter,
}

impl<'m, R: BufRead> GzipMembers<'m, R> {
    pub fn new(reader: R, meter: &'m Meter) -> Self {
        GzipMembers {
            current: Some(flate2::bufread::GzDecoder::new(reader)),
            members: 1,
            meter,
        }
    }
}

impl<R: BufRead> Read for GzipMembers<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(decoder) = self.current.as_mut() else {
                return Ok(0);
            };
            let n = decoder.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            let Some(decoder) = self.current.take() else {
                return Ok(0);
            };
            // The member's trailer is checked; whatever follows must be another member.
            let mut inner = decoder.into_inner();
            let rest = inner.fill_buf()?;
            if rest.is_empty() {
                return Ok(0);
            }
            let not_a_member = || {
                refusal(format!(
                    "has data after gzip member {} that is not another gzip member (something was appended to it); rebuild it so that nothing follows the compressed archive",
                    self.members
                ))
            };
            if rest[0] != 0x1f {
                return Err(not_a_member());
            }
            self.meter.charge(STREAM_START_COST)?;
            let next = flate2::bufread::GzDecoder::new(inner);
            if next.header().is_none() {
                return Err(not_a_member());
            }
            self.members += 1;
            self.current = Some(next);
        }
    }
}

/// Every zstd frame of a stream (skippable frames included), decompressed back to back.
pub struct ZstdFrames<'m, R: BufRead> {
    current: Option<zstd::stream::read::Decoder<'static, R>>,
    frames: u64,
    /// The current frame has produced nothing yet.
    fresh: bool,
    meter: &'m Meter,
}

impl<'m, R: BufRead> ZstdFrames<'m, R> {
    pub fn new(reader: R, meter: &'m Meter) -> io::Result<Self> {
        Ok(ZstdFrames {
            current: Some(zstd::stream::read::Decoder::with_buffer(reader)?.single_frame()),
            frames: 1,
            fresh: true,
            meter,
        })
    }
}

impl<R: BufRead> Read for ZstdFrames<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(decoder) = self.current.as_mut() else {
                return Ok(0);
            };
            let n = match decoder.read(buf) {
                Ok(n) => n,
                // What follows a frame and does not decode is not another frame.
                Err(e) if self.fresh && self.frames > 1 => {
                    return Err(refusal(format!(
                        "has data after zstd frame {} that is not another zstd frame ({e}); rebuild it so that nothing follows the compressed archive",
                        self.frames - 1
                    )))
                }
                Err(e) => return Err(e),
            };
            if n > 0 || buf.is_empty() {
                self.fresh = false;
                return Ok(n);
            }
            let Some(decoder) = self.current.take() else {
                return Ok(0);
            };
            // One frame at a time, so that what follows the last one is seen and judged.
            let mut inner = decoder.finish();
            let rest = inner.fill_buf()?;
            if rest.is_empty() {
                return Ok(0);
            }
            if rest[0] != ZSTD_MAGIC && !SKIPPABLE_FIRST.contains(&rest[0]) {
                return Err(refusal(format!(
                    "has data after zstd frame {} that is not another zstd frame (something was appended to it); rebuild it so that nothing follows the compressed archive",
                    self.frames
                )));
            }
            self.meter.charge(STREAM_START_COST)?;
            self.frames += 1;
            self.fresh = true;
            self.current = Some(zstd::stream::read::Decoder::with_buffer(inner)?.single_frame());
        }
    }
}

/// Reads until `buf` is full or the stream ends; how many bytes it holds.
pub(crate) fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::limits::PackageLimits;
    use std::io::Write;

    pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn meter() -> Meter {
        Meter::new(&PackageLimits::default(), 1 << 20, None)
    }

    fn read_all(r: &mut impl Read) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        r.read_to_end(&mut out)?;
        Ok(out)
    }

    fn refused(e: &io::Error) -> String {
        e.get_ref()
            .and_then(|i| i.downcast_ref::<super::super::archive::Refusal>())
            .map(|r| r.0.clone())
            .unwrap_or_default()
    }

    #[test]
    fn every_gzip_member_is_read() {
        let mut data = gzip(b"first ");
        data.extend(gzip(b"second "));
        data.extend(gzip(b""));
        data.extend(gzip(b"third"));
        let out = read_all(&mut GzipMembers::new(&data[..], &meter())).unwrap();
        assert_eq!(out, b"first second third");
    }

    #[test]
    fn bytes_after_the_last_gzip_member_are_refused() {
        for tail in [
            &b"garbage"[..],
            b"\0\0\0\0",
            b"\x1f",
            b"\x1f\x8bnot a header",
        ] {
            let mut data = gzip(b"tar bytes");
            data.extend_from_slice(tail);
            let e = read_all(&mut GzipMembers::new(&data[..], &meter())).unwrap_err();
            assert!(refused(&e).contains("after gzip member 1"), "{tail:?}: {e}");
        }
        // a torn second member is an error too, never a silent end
        let mut data = gzip(b"one");
        let second = gzip(b"two");
        data.extend_from_slice(&second[..second.len() - 4]);
        assert!(read_all(&mut GzipMembers::new(&data[..], &meter())).is_err());
    }

    #[test]
    fn every_zstd_frame_is_read_and_skippable_frames_are_skipped() {
        let mut data = zstd::encode_all(&b"first "[..], 3).unwrap();
        // a skippable frame: magic 0x184D2A53, length 5, five bytes
        data.extend_from_slice(&[0x53, 0x2a, 0x4d, 0x18, 5, 0, 0, 0, 1, 2, 3, 4, 5]);
        data.extend(zstd::encode_all(&b"second"[..], 3).unwrap());
        let out = read_all(&mut ZstdFrames::new(&data[..], &meter()).unwrap()).unwrap();
        assert_eq!(out, b"first second");
    }

    #[test]
    fn bytes_after_the_last_zstd_frame_are_refused() {
        let data = zstd::encode_all(&b"tar bytes"[..], 3).unwrap();
        for tail in [&b"PK\x05\x06 appended"[..], b"garbage", b"\x28\xb5\x2f"] {
            let mut data = data.clone();
            data.extend_from_slice(tail);
            let e = read_all(&mut ZstdFrames::new(&data[..], &meter()).unwrap()).unwrap_err();
            assert!(refused(&e).contains("after zstd frame 1"), "{tail:?}: {e}");
        }
        // a torn frame is an error
        let data = zstd::encode_all(&[7u8; 4096][..], 3).unwrap();
        assert!(
            read_all(&mut ZstdFrames::new(&data[..data.len() - 3], &meter()).unwrap()).is_err()
        );
    }
}
