//! `qm whatif` end to end: the trace excerpts shipped with the tests, the
//! report it writes, and that report rendered by headless Chromium (the
//! DOM holds every plot; a screenshot is taken). A malformed line is
//! reported with its file and line, skipped or fatal as asked.

use std::path::{Path, PathBuf};
use std::process::Command;

use qm_integration_tests::stack::bin;

fn excerpts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../libs/qm-eval/tests/data")
}

fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if let Some(p) = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.exists())
        }) {
            return p;
        }
    }
    panic!("headless Chromium is needed to check the report (Debian: apt-get install chromium; `make test` installs it)");
}

fn whatif(args: &[&str], out: &Path) -> std::process::Output {
    Command::new(bin("qm"))
        .arg("whatif")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("qm runs")
}

#[test]
fn the_report_on_the_trace_excerpts_renders_in_chromium_with_every_plot() {
    let dir = std::env::temp_dir().join(format!("qm-whatif-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let trace = excerpts().join("itp-2021");
    let quota = excerpts().join("helios-venus-quota/cluster_gpu_number.csv");
    let out = whatif(
        &[
            "--trace",
            &trace.display().to_string(),
            "--mapping",
            "teams",
            "--quota",
            &quota.display().to_string(),
            "--gpus-per-instance",
            "8",
            "--seed",
            "7",
        ],
        &dir,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("200 jobs"), "{stderr}");
    assert!(
        stderr.contains("100% of the trace simulated"),
        "progress: {stderr}"
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.starts_with("| policy |"), "{summary}");
    for p in [
        "partitions",
        "pool",
        "borrow-100",
        "borrow-100+checkpoint-then-preempt",
    ] {
        assert!(summary.contains(&format!("| {p} |")), "{p}: {summary}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).expect("json"))
            .expect("JSON");
    assert_eq!(json["mapping"]["seed"], 7);
    assert_eq!(json["mapping"]["grouping"], "teams");
    assert_eq!(json["mapping"]["gpusPerInstance"], 8);
    assert!(json["citation"]
        .as_str()
        .unwrap_or_default()
        .contains("S-Lab-System-Group/HeliosData"));

    // Chromium parses it: every plot is an SVG in the DOM.
    let html = dir.join("report.html");
    let url = format!("file://{}", html.display());
    let dom = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            &url,
        ])
        .output()
        .expect("chromium runs");
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    for id in [
        "completion",
        "reclaim",
        "recomputed",
        "usage-partitions",
        "usage-borrow-100",
    ] {
        assert!(
            dom.contains(&format!("<figure id=\"{id}\"><svg")),
            "{id} is not in the DOM"
        );
    }
    assert!(!dom.contains("plot failed"));
    let shot = dir.join("report.png");
    let r = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1200,3000",
        ])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_malformed_line_is_named_and_skipped_or_fatal() {
    let dir = std::env::temp_dir().join(format!("qm-whatif-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut text =
        std::fs::read_to_string(excerpts().join("itp-2021/cluster02.csv")).expect("excerpt");
    text.push_str("broken-job,12,not-a-number,4\n");
    let file = dir.join("cluster02.csv");
    std::fs::write(&file, text).expect("written");
    let f = file.display().to_string();
    let out = whatif(
        &["--trace", &f, "--policies", "partitions,borrow-100"],
        &dir.join("skip"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "skipped {f}:22: duration \"not-a-number\" is not a number"
        )),
        "{stderr}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("skip/report.json")).expect("json"))
            .expect("JSON");
    assert_eq!(json["badLines"][0]["line"], 22);
    assert_eq!(json["mapping"]["jobs"], 20);
    let out = whatif(&["--trace", &f, "--on-bad-line", "fail"], &dir.join("fail"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("{f}:22: duration")), "{stderr}");
    assert!(!dir.join("fail/report.html").exists());
    let out = whatif(
        &["--trace", &f, "--policies", "borrow-1000"],
        &dir.join("x"),
    );
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("no policy \"borrow-1000\"; the policies are partitions"));
    let _ = std::fs::remove_dir_all(&dir);
}
