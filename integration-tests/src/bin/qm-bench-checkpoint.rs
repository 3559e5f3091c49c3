//! `make bench-checkpoint`: the checkpoint data path side by side with
//! rclone, against the same S3 server (Garage in a container, or the server
//! `QM_S3_*` names), on the same data, interleaved.
//!
//! For each data set (`QM_BENCH_CKPT_MIB`, default 1,024 MiB, as 8 files
//! and as 1,000 files) and each round (`QM_BENCH_CKPT_ROUNDS`, default 2):
//! rclone uploads it (`rclone copy`, its defaults), Quartermaster commits
//! it (the checkpoint library the checkpoint service runs, with the
//! service's default part size and parallelism), Quartermaster commits it
//! again unchanged, rclone downloads it, Quartermaster restores it. Every
//! transfer goes to a fresh destination. Reported: MiB/s of each, the
//! ratio, and peak memory (rclone's VmHWM sampled every 20 ms;
//! Quartermaster's, this process's VmHWM reset before each transfer).
//! Also the CPU time each transfer took, in the client (rclone's process,
//! or this one) and in the S3 server's container (from its cgroup, when
//! the server is a local container): on one machine both compete for the
//! same cores. `QM_BENCH_CKPT_SETS` lists the sets by their number of
//! files (default `8,1000`; `1` is one file of the whole size);
//! `QM_BENCH_CKPT_PARALLEL`, `QM_BENCH_CKPT_PART_MIB` and
//! `QM_BENCH_CKPT_THRESHOLD_MIB` try other transfer settings.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qm_checkpoint::s3::S3Store;
use qm_checkpoint::{commit, restore, CommitInfo, Progress, Uploaded};
use qm_integration_tests::bench::env_or;

const MIB: f64 = 1048576.0;

#[derive(Default)]
struct Row {
    rclone_up: Vec<f64>,
    qm_up: Vec<f64>,
    recommit: Vec<f64>,
    rclone_down: Vec<f64>,
    qm_down: Vec<f64>,
    rclone_peak: u64,
    qm_peak_up: u64,
    qm_peak_down: u64,
    /// CPU seconds (client, server) of each transfer, in the table's order.
    cpu: [Vec<(f64, f64)>; 4],
}

#[tokio::main]
async fn main() {
    let mib = env_or("QM_BENCH_CKPT_MIB", 1024);
    let rounds = env_or("QM_BENCH_CKPT_ROUNDS", 2).max(1);
    let sets: Vec<usize> = std::env::var("QM_BENCH_CKPT_SETS")
        .unwrap_or_else(|_| "8,1000".into())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or_else(|| panic!("QM_BENCH_CKPT_SETS: {n:?} is not a number of files"))
        })
        .collect();
    if std::process::Command::new("rclone")
        .arg("version")
        .output()
        .is_err()
    {
        eprintln!("bench-checkpoint: needs rclone (Debian's package): apt-get install rclone");
        std::process::exit(2);
    }
    let s3 = qm_integration_tests::start_s3().await;
    let mut config = s3.config.clone();
    // The service's settings, to try others: transferParallelism,
    // partSizeMiB, multipartThresholdMiB.
    config.transfer.parallel = env_or("QM_BENCH_CKPT_PARALLEL", config.transfer.parallel);
    let part_mib = env_or(
        "QM_BENCH_CKPT_PART_MIB",
        (config.transfer.part_size >> 20) as usize,
    );
    config.transfer.part_size = (part_mib as u64) << 20;
    let threshold_mib = env_or(
        "QM_BENCH_CKPT_THRESHOLD_MIB",
        (config.transfer.multipart_threshold >> 20) as usize,
    );
    config.transfer.multipart_threshold = (threshold_mib as u64) << 20;
    let store = S3Store::new(&config);
    let server_cgroup = server_cpu_file(s3.container.id());
    let root = std::env::temp_dir().join(format!("qm-bench-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("bench directory");
    let rclone_env = [
        ("RCLONE_CONFIG_QM_TYPE", "s3".to_string()),
        ("RCLONE_CONFIG_QM_PROVIDER", "Other".to_string()),
        (
            "RCLONE_CONFIG_QM_ENDPOINT",
            config.endpoint.clone().unwrap_or_default(),
        ),
        ("RCLONE_CONFIG_QM_REGION", config.region.clone()),
        (
            "RCLONE_CONFIG_QM_ACCESS_KEY_ID",
            config.access_key_id.clone(),
        ),
        (
            "RCLONE_CONFIG_QM_SECRET_ACCESS_KEY",
            config.secret_access_key.clone(),
        ),
        ("RCLONE_CONFIG_QM_FORCE_PATH_STYLE", "true".to_string()),
    ];
    let transfer = &config.transfer;
    println!(
        "== checkpoints against rclone ({}), same S3 server, {mib} MiB a set, {rounds} rounds interleaved",
        rclone_version()
    );
    println!("   Quartermaster: the checkpoint library with the service's defaults ({transfer:?})");
    let mut results = Vec::new();
    for files in sets {
        let src = root.join(format!("src-{files}"));
        eprintln!("bench: generating {mib} MiB as {files} files");
        generate(&src, files, mib << 20);
        let bytes = (mib << 20) as f64;
        let mut row = Row::default();
        let mut seq = 0;
        for round in 0..rounds {
            let remote = format!("qm:{}/rclone-{files}-{round}", config.bucket);
            eprintln!("bench: {files} files, round {}: rclone up", round + 1);
            let cpu = Cpu::start(&server_cgroup);
            let (secs, peak) = rclone(&rclone_env, &[src.to_str().expect("utf-8"), &remote]);
            row.cpu[0].push(cpu.children());
            row.rclone_up.push(bytes / MIB / secs);
            row.rclone_peak = row.rclone_peak.max(peak);

            eprintln!(
                "bench: {files} files, round {}: Quartermaster commit",
                round + 1
            );
            let prefix = format!("qm-{files}-{round}");
            let mut uploaded = Uploaded::default();
            seq += 1;
            reset_peak();
            let cpu = Cpu::start(&server_cgroup);
            let t = Instant::now();
            commit(&store, &prefix, &src, info(seq), &mut uploaded)
                .await
                .expect("commit");
            row.qm_up.push(bytes / MIB / t.elapsed().as_secs_f64());
            row.cpu[1].push(cpu.this_process());
            row.qm_peak_up = row.qm_peak_up.max(peak_rss());
            seq += 1;
            let t = Instant::now();
            commit(&store, &prefix, &src, info(seq), &mut uploaded)
                .await
                .expect("re-commit");
            row.recommit.push(t.elapsed().as_secs_f64());

            eprintln!("bench: {files} files, round {}: rclone down", round + 1);
            let dst = root.join("dst");
            let _ = std::fs::remove_dir_all(&dst);
            let cpu = Cpu::start(&server_cgroup);
            let (secs, peak) = rclone(&rclone_env, &[&remote, dst.to_str().expect("utf-8")]);
            row.cpu[2].push(cpu.children());
            row.rclone_down.push(bytes / MIB / secs);
            row.rclone_peak = row.rclone_peak.max(peak);
            same_tree(&src, &dst);
            std::fs::remove_dir_all(&dst).expect("clean");

            eprintln!(
                "bench: {files} files, round {}: Quartermaster restore",
                round + 1
            );
            std::fs::create_dir_all(&dst).expect("restore target");
            reset_peak();
            let cpu = Cpu::start(&server_cgroup);
            let t = Instant::now();
            let restored = restore(&store, &prefix, &dst, &Progress::default())
                .await
                .expect("restore");
            row.qm_down.push(bytes / MIB / t.elapsed().as_secs_f64());
            row.cpu[3].push(cpu.this_process());
            row.qm_peak_down = row.qm_peak_down.max(peak_rss());
            assert_eq!(restored.manifest.map(|m| m.seq), Some(seq));
            same_tree(&src, &dst);
            std::fs::remove_dir_all(&dst).expect("clean");
        }
        std::fs::remove_dir_all(&src).expect("clean");
        results.push((files, row));
    }
    print_results(&results, rounds, mib, server_cgroup.as_deref());
    let _ = std::fs::remove_dir_all(&root);
}

/// The table of medians (throughput, re-commit time, peak memory), then
/// the CPU seconds per GiB moved.
fn print_results(
    results: &[(usize, Row)],
    rounds: usize,
    mib: usize,
    server_cgroup: Option<&Path>,
) {
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{:<12} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7} {:>11} {:>10} {:>10} {:>10}",
        "set",
        "rclone up",
        "qm up",
        "ratio",
        "rclone dn",
        "qm dn",
        "ratio",
        "re-commit",
        "rclone RSS",
        "qm RSS up",
        "qm RSS dn"
    );
    for (files, r) in results {
        let (ru, qu, rd, qd) = (
            median(&r.rclone_up),
            median(&r.qm_up),
            median(&r.rclone_down),
            median(&r.qm_down),
        );
        println!(
            "{:<12} {:>6.0} MiB/s {:>6.0} MiB/s {:>6.2}x {:>6.0} MiB/s {:>6.0} MiB/s {:>6.2}x {:>9.2} s {:>6.0} MiB {:>6.0} MiB {:>6.0} MiB",
            format!("{files} files"),
            ru,
            qu,
            qu / ru,
            rd,
            qd,
            qd / rd,
            median(&r.recommit),
            r.rclone_peak as f64 / MIB,
            r.qm_peak_up as f64 / MIB,
            r.qm_peak_down as f64 / MIB,
        );
    }
    println!("(medians of {rounds} rounds; ratio = Quartermaster / rclone)");
    println!();
    println!("CPU seconds per GiB moved, client + S3 server (medians):");
    println!(
        "{:<12} {:>16} {:>16} {:>16} {:>16}",
        "set", "rclone up", "qm up", "rclone dn", "qm dn"
    );
    let gib = mib as f64 / 1024.0;
    for (files, r) in results {
        let cell = |v: &[(f64, f64)]| {
            let c = median(&v.iter().map(|x| x.0).collect::<Vec<_>>()) / gib;
            match server_cgroup {
                Some(_) => {
                    let s = median(&v.iter().map(|x| x.1).collect::<Vec<_>>()) / gib;
                    format!("{c:.2} + {s:.2}")
                }
                None => format!("{c:.2} + ?"),
            }
        };
        println!(
            "{:<12} {:>16} {:>16} {:>16} {:>16}",
            format!("{files} files"),
            cell(&r.cpu[0]),
            cell(&r.cpu[1]),
            cell(&r.cpu[2]),
            cell(&r.cpu[3]),
        );
    }
}

fn info(seq: u64) -> CommitInfo {
    CommitInfo {
        seq,
        attempt: 1,
        job_id: None,
        epoch: None,
        step: Some(seq),
        created_at_ms: seq,
    }
}

fn rclone_version() -> String {
    std::process::Command::new("rclone")
        .arg("version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "rclone".into())
}

/// Runs `rclone copy <from> <to>` with its defaults; its wall time and peak
/// memory (VmHWM, sampled every 20 ms).
fn rclone(env: &[(&str, String)], args: &[&str]) -> (f64, u64) {
    let t = Instant::now();
    let mut child = std::process::Command::new("rclone")
        .args(["copy", "-q"])
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        // A CA bundle for AWS's SDKs set in the environment breaks rclone's
        // HTTP client (and the endpoint here is plain HTTP).
        .env_remove("AWS_CA_BUNDLE")
        .spawn()
        .expect("rclone runs");
    let mut peak = 0;
    loop {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{}/status", child.id())) {
            peak = peak.max(hwm(&s));
        }
        if let Some(status) = child.try_wait().expect("rclone") {
            assert!(status.success(), "rclone copy {args:?}: {status}");
            return (t.elapsed().as_secs_f64(), peak);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The S3 server container's CPU-time counter (cgroup v1 `cpuacct.usage`
/// or v2 `cpu.stat`), when it can be found.
fn server_cpu_file(id: &str) -> Option<PathBuf> {
    [
        format!("/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage"),
        format!("/sys/fs/cgroup/cpu,cpuacct/docker/{id}/cpuacct.usage"),
        format!("/sys/fs/cgroup/system.slice/docker-{id}.scope/cpu.stat"),
        format!("/sys/fs/cgroup/docker/{id}/cpu.stat"),
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// Seconds of CPU the server's cgroup has used.
fn server_seconds(file: &Path) -> f64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    match text.lines().find_map(|l| l.strip_prefix("usage_usec ")) {
        Some(us) => us.trim().parse::<f64>().unwrap_or(0.0) / 1e6,
        None => text.trim().parse::<f64>().unwrap_or(0.0) / 1e9,
    }
}

/// Seconds of CPU this process has used (`own`), or the children it has
/// waited for, from /proc/self/stat (utime, stime; cutime, cstime), in the
/// kernel's USER_HZ ticks of 10 ms.
fn cpu_seconds(own: bool) -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime is field 14 of the whole line, the 12th after the name.
    let first = if own { 11 } else { 13 };
    (tick(first) + tick(first + 1)) / 100.0
}

/// CPU time from now on: the client's (this process, or the children it
/// has waited for) and the S3 server's.
struct Cpu<'a> {
    server_file: &'a Option<PathBuf>,
    server: f64,
    this: f64,
    children: f64,
}

impl<'a> Cpu<'a> {
    fn start(server_file: &'a Option<PathBuf>) -> Cpu<'a> {
        Cpu {
            server_file,
            server: server_file.as_deref().map(server_seconds).unwrap_or(0.0),
            this: cpu_seconds(true),
            children: cpu_seconds(false),
        }
    }

    fn server(&self) -> f64 {
        self.server_file
            .as_deref()
            .map(server_seconds)
            .unwrap_or(0.0)
            - self.server
    }

    fn this_process(&self) -> (f64, f64) {
        (cpu_seconds(true) - self.this, self.server())
    }

    fn children(&self) -> (f64, f64) {
        (cpu_seconds(false) - self.children, self.server())
    }
}

fn hwm(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

fn peak_rss() -> u64 {
    hwm(&std::fs::read_to_string("/proc/self/status").expect("/proc/self/status"))
}

/// Resets this process's VmHWM to its current RSS.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("/proc/self/clear_refs");
}

/// `files` files of pseudo-random bytes (incompressible), `total` in all.
fn generate(dir: &Path, files: usize, total: usize) {
    use std::io::Write;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("source directory");
    let each = total / files;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut block = vec![0u8; 1 << 20];
    for i in 0..files {
        let path = dir.join(format!("shard-{i:04}.bin"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
        let mut left = each;
        while left > 0 {
            for chunk in block.chunks_exact_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes());
            }
            let n = left.min(block.len());
            f.write_all(&block[..n]).expect("write");
            left -= n;
        }
        f.flush().expect("flush");
    }
}

/// Every file of `a` is in `b` with the same size (both tools verify the
/// content: rclone its checksums, a restore every file's SHA-256).
fn same_tree(a: &Path, b: &Path) {
    let mut names: Vec<PathBuf> = std::fs::read_dir(a)
        .expect("source")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    for p in names {
        let q = b.join(p.file_name().expect("name"));
        let (x, y) = (
            std::fs::metadata(&p).expect("source file").len(),
            std::fs::metadata(&q)
                .unwrap_or_else(|e| panic!("{}: {e}", q.display()))
                .len(),
        );
        assert_eq!(x, y, "{}", q.display());
    }
}
