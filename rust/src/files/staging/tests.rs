use super::*;
use crate::files::hashing::sha256_bytes;
use crate::rules::Rule;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;

fn entry(destination: &str, data: &[u8]) -> ManifestEntry {
    ManifestEntry {
        destination: destination.into(),
        source: format!("src/{destination}"),
        sha256: sha256_bytes(data),
        size: data.len() as u64,
    }
}

fn dir(path: &Path) -> OwnedFd {
    rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
}

#[test]
fn remove_tree_never_follows_a_symlink() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("keep.txt"), b"keep").unwrap();
    let tree = tmp.path().join("inputs").join("t");
    fs::create_dir_all(tree.join("a/b/c")).unwrap();
    fs::write(tree.join("a/b/c/f"), b"x").unwrap();
    symlink(&outside, tree.join("a/link")).unwrap();
    symlink(&outside, tree.join("a/b/c/link")).unwrap();
    let odd = tree.join(std::ffi::OsStr::from_bytes(b"a/\xff"));
    fs::create_dir(&odd).unwrap(); // not UTF-8
    fs::write(odd.join("f"), b"x").unwrap();
    let inputs = dir(&tmp.path().join("inputs"));
    remove_tree_at(inputs.as_fd(), "t").unwrap();
    assert!(!tree.exists());
    assert_eq!(fs::read(outside.join("keep.txt")).unwrap(), b"keep");
    // A symlink in the temporary's place is unlinked, not entered.
    symlink(&outside, tmp.path().join("inputs/t")).unwrap();
    remove_tree_at(inputs.as_fd(), "t").unwrap();
    assert!(outside.join("keep.txt").exists());
    assert!(remove_tree_at(inputs.as_fd(), "t").is_ok()); // already gone
}

#[test]
fn remove_tree_of_any_depth() {
    let tmp = tempfile::tempdir().unwrap();
    let top = dir(tmp.path());
    fs::create_dir(tmp.path().join("deep")).unwrap();
    let mut fd = dir(&tmp.path().join("deep"));
    for _ in 0..2000 {
        mkdirat(&fd, "d", Mode::from_bits_truncate(0o755)).unwrap();
        fd = open_dir(fd.as_fd(), "d").unwrap();
    }
    drop(fd);
    remove_tree_at(top.as_fd(), "deep").unwrap();
    assert!(!tmp.path().join("deep").exists());
}

#[test]
fn a_kept_staging_is_hashed_again() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("action-helpers");
    fs::create_dir_all(target.join("sub")).unwrap();
    let entries = vec![entry("a.py", b"print(1)\n"), entry("sub/b.txt", b"b\n")];
    fs::write(target.join("a.py"), b"print(1)\n").unwrap();
    fs::write(target.join("sub/b.txt"), b"b\n").unwrap();
    fs::write(target.join(MANIFEST), manifest_json(&entries)).unwrap();
    let fd = dir(&target);
    assert!(keep(fd.as_fd(), &target, entries.clone()).unwrap().reused);

    fs::write(target.join("a.py"), b"print(2)\n").unwrap(); // same size, other bytes
    let v = keep(fd.as_fd(), &target, entries.clone()).unwrap_err();
    assert_eq!(v.rule, Rule::TaoStagingConflict);
    assert!(v.message.contains("a.py which hashes to"), "{}", v.message);

    fs::write(target.join("a.py"), b"print(1)\n# more\n").unwrap();
    let v = keep(fd.as_fd(), &target, entries.clone()).unwrap_err();
    assert!(
        v.message
            .contains("a.py which is 16 bytes where its manifest says 9"),
        "{}",
        v.message
    );

    fs::remove_file(target.join("a.py")).unwrap();
    symlink(tmp.path().join("elsewhere"), target.join("a.py")).unwrap();
    let v = keep(fd.as_fd(), &target, entries.clone()).unwrap_err();
    assert!(v.message.contains("symbolic link at a.py"), "{}", v.message);

    fs::remove_file(target.join("a.py")).unwrap();
    rustix::fs::mknodat(
        &fd,
        "a.py",
        rustix::fs::FileType::Fifo,
        Mode::from_bits_truncate(0o644),
        0,
    )
    .unwrap();
    let v = keep(fd.as_fd(), &target, entries.clone()).unwrap_err();
    assert!(
        v.message
            .contains("a.py which is a FIFO, not a regular file"),
        "{}",
        v.message
    );
}

#[test]
fn a_manifest_is_read_bounded_and_never_through_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("action-helpers");
    fs::create_dir_all(&target).unwrap();
    let entries = vec![entry("a.py", b"x")];
    fs::write(target.join("a.py"), b"x").unwrap();
    let real = tmp.path().join("manifest.json");
    fs::write(&real, manifest_json(&entries)).unwrap();
    symlink(&real, target.join(MANIFEST)).unwrap();
    let fd = dir(&target);
    let v = keep(fd.as_fd(), &target, entries.clone()).unwrap_err();
    assert!(
        v.message
            .contains("manifest that is reached through a symbolic link"),
        "{}",
        v.message
    );

    fs::remove_file(target.join(MANIFEST)).unwrap();
    let big = File::create(target.join(MANIFEST)).unwrap();
    big.set_len(1 << 30).unwrap();
    let v = keep(fd.as_fd(), &target, entries).unwrap_err();
    assert!(
        v.message.contains("staging manifest of 1073741824 bytes"),
        "{}",
        v.message
    );
}
