//! Times the core on one document, without Python: `cargo run --release --example profile FILE`.
use std::time::Instant;

fn main() {
    let path = std::env::args().nth(1).expect("a document path");
    let data = std::fs::read(&path).expect("readable document");
    let v = jobgate_core::Validator::default();
    let admission = jobgate_core::Admission::default();
    let limits = v.config.limits;
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000);
    let only = std::env::args().nth(2);
    for (name, f) in [
        (
            "parse only",
            &(|| {
                let _ = jobgate_core::document::with_document(&data, &limits, |r| r.is_object());
            }) as &dyn Fn(),
        ),
        ("parse + duplicate scan", &|| {
            let _ = jobgate_core::document::with_document(&data, &limits, |r| {
                let mut out = jobgate_core::report::Collected::default();
                jobgate_core::document::duplicate_keys(r, &mut out);
                out.kept.len()
            });
        }),
        ("full check", &|| {
            let _ = v.check(&data, None, &admission);
        }),
    ] {
        if only.as_deref().is_some_and(|o| !name.starts_with(o)) {
            continue;
        }
        f();
        let t = Instant::now();
        for _ in 0..n {
            f();
        }
        println!(
            "{name:<24} {:8.3} us",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        );
    }
}
