//! The core alone on the benchmark documents, without Python, for timing and for
//! counting instructions per document:
//!
//!     python -m benchmarks.documents /tmp/docs        # writes the documents
//!     cargo run --release --example profile /tmp/docs/*.json
//!     scripts/instructions                             # instructions per document
//!     N=1000 valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!         rust/target/release/examples/profile /tmp/docs/jobspec.2048.json "full check"
//!
//! Each document is checked `N * 2048 / its size` times (at least 10). Instructions
//! per document: run callgrind at two values of `N` and divide the difference of the
//! `I refs` totals by the difference of the runs, so start-up cancels out. The last
//! argument, when it is not a file, keeps only the steps whose name starts with it.
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (paths, only): (Vec<&String>, Vec<&String>) =
        args.iter().partition(|a| std::path::Path::new(a).is_file());
    let only = only.first().map(|s| s.as_str());
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let v = jobgate_core::Validator::default();
    let admission = jobgate_core::AdmissionContext::default();
    let limits = v.config.limits;
    for path in paths {
        let data = std::fs::read(path).expect("readable document");
        let runs = (n * 2048 / data.len().max(1)).max(10);
        println!("{path} ({} bytes, {runs} runs)", data.len());
        for (name, f) in [
            (
                "parse only",
                &(|| {
                    let _ = jobgate_core::document::with_document(&data, &limits, |d| {
                        d.root.is_object()
                    });
                }) as &dyn Fn(),
            ),
            // What the one-pass reader (`tape`) saves: simd-json alone on the same bytes,
            // as `document` reads what `tape` does not vouch for (the fuzzing section of
            // BENCHMARKS.md weighs it against what fuzzing found in the reader).
            ("simd-json parse only", &|| {
                let mut input = data.clone();
                input.resize(data.len() + simd_json::INPUT_PADDING, 0);
                let mut buffers = simd_json::Buffers::with_max_depth(data.len(), limits.max_depth);
                let mut tape = simd_json::Tape::null();
                let _ =
                    simd_json::fill_tape_padded(&mut input, data.len(), &mut buffers, &mut tape);
            }),
            ("parse + duplicate scan", &|| {
                let _ = jobgate_core::document::with_document(&data, &limits, |d| {
                    let mut ctx = jobgate_core::collect::Ctx::new();
                    jobgate_core::document::duplicate_keys(d, &mut ctx);
                    ctx.out.kept.len()
                });
            }),
            ("full check", &|| {
                let _ = v.check(&data, None, &admission);
            }),
        ] {
            if only.is_some_and(|o| !name.starts_with(o)) {
                continue;
            }
            f();
            let t = Instant::now();
            for _ in 0..runs {
                f();
            }
            println!(
                "  {name:<24} {:10.3} us",
                t.elapsed().as_secs_f64() * 1e6 / runs as f64
            );
        }
    }
}
